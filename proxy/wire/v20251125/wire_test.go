package v20251125

import (
	"testing"

	"github.com/taskgate/taskgate/proxy/wire"
)

// TestColumn: the era's column of the method table: the flags that only
// mean something with a handler have one, and what it serves alone it
// does not pass in batches.
func TestColumn(t *testing.T) {
	for _, s := range wire.Methods() {
		c := columnOf(&s)
		if c.serve == none && (c.tasksOnly || c.needsID || s.Always) {
			t.Errorf("%s: 2025 flags without a 2025 handler", s.Name)
		}
		if c.serve == none && !s.BatchOK {
			t.Errorf("%s: refused in batches but passed through alone", s.Name)
		}
	}
	if columnOf(nil).serve != none {
		t.Errorf("an unknown method has a handler")
	}
}
