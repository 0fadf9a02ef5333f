//go:build !race

// The race detector changes allocation counts, so the budget is checked in
// builds without it (CI runs it in a separate step without -race).

package capability

import "testing"

// TestAllocs is the allocation budget of the two rewrites: the output
// buffer and the edit list, plus one name string per tool (support may keep
// it).
func TestAllocs(t *testing.T) {
	init, old := []byte(goSDKInit), []byte(tsSDKInit)
	tools := bigToolsList(100)
	tests := []struct {
		name string
		max  float64
		f    func()
	}{
		{name: "RewriteInitialize", max: 2, f: func() { _, _, _ = RewriteInitialize(init, InitOptions{List: true}) }},
		{name: "RewriteInitialize unchanged", max: 0, f: func() { _, _, _ = RewriteInitialize(old, InitOptions{}) }},
		{name: "RewriteToolsList 100 tools", max: 100 + 8, f: func() { _, _ = RewriteToolsList(tools, optional) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(50, tt.f); got > tt.max {
				t.Errorf("%s: %v allocs/op, want <= %v", tt.name, got, tt.max)
			}
		})
	}
}
