package taskstore

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// go-redis redials a pool that failed PoolSize dials in a background
// goroutine that notices Close only after its 1 s sleep (TestUnavailable's
// dead client reaches that state).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(reportingM{m}, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// reportingM reports the tests skipped for a missing redis-server after
// the run.
type reportingM struct{ m *testing.M }

func (r reportingM) Run() int {
	code := r.m.Run()
	redistest.Report(os.Stderr)
	return code
}
