package v20260728

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines leak; only fasthttp's
// process-wide housekeeping goroutines are ignored (they live as long as the process and
// are not ours to stop).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	)
}
