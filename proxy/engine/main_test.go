package engine

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines leak: Close must stop
// the runners, the supervisors and lease recovery.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
