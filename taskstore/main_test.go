package taskstore

import (
	"testing"

	"go.uber.org/goleak"
)

// go-redis redials a pool that failed PoolSize dials in a background
// goroutine that notices Close only after its 1 s sleep (TestUnavailable's
// dead client reaches that state).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
