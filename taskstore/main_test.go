package taskstore

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(reportingM{m}) }

// reportingM reports the tests skipped for a missing redis-server after
// the run.
type reportingM struct{ m *testing.M }

func (r reportingM) Run() int {
	code := r.m.Run()
	redistest.Report(os.Stderr)
	return code
}
