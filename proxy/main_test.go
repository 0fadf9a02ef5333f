package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when goroutines leak; only fasthttp's
// process-wide housekeeping goroutines are ignored (STYLE rule 22).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	)
}
