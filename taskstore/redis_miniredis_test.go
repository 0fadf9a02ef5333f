package taskstore

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// miniTick is how often the embedded server's clock advances; keys
// expire at most this late (the store's own clock checks make tasks
// vanish on time regardless).
const miniTick = 250 * time.Millisecond

// newMiniEmbedded is the embedded store taskgate shipped before the native
// one (Embedded): an in-process Redis (miniredis on 127.0.0.1, random
// port) running the same Lua scripts as real Redis. It stays as a test
// helper so benchmarks can compare the two in one run. miniredis moves TTLs only when
// told, so a goroutine advances its clock to wall time every 250 ms
// (SetTime + FastForward) and keys expire as on real Redis. Data lives only
// in this process; several replicas cannot share it.
//
// closer (equivalently s.Close) stops the clock goroutine, the client and
// the server; it is idempotent.
func newMiniEmbedded(cfg Config) (s *Redis, closer func(), err error) {
	m := miniredis.NewMiniRedis()
	start := time.Now()
	m.SetTime(start)
	if err := m.Start(); err != nil {
		return nil, nil, fmt.Errorf("taskstore: embedded: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:                  m.Addr(),
		ContextTimeoutEnabled: true,
		DialTimeout:           DefaultDialTimeout,
		ReadTimeout:           DefaultReadTimeout,
		WriteTimeout:          DefaultWriteTimeout,
		DisableIdentity:       true, // miniredis has no CLIENT SETINFO
	})
	s, err = NewRedis(rdb, cfg)
	if err != nil {
		_ = rdb.Close()
		m.Close()
		return nil, nil, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(miniTick)
		defer tick.Stop()
		last := start
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				// SetTime first: (P)EXPIREAT between ticks is computed
				// against this instant, and the next FastForward covers
				// exactly the time since.
				now := time.Now()
				if d := now.Sub(last); d > 0 {
					m.SetTime(now)
					m.FastForward(d)
					last = now
				}
			}
		}
	}()
	s.onClose = append(s.onClose, func() error {
		close(stop)
		wg.Wait()
		err := rdb.Close()
		m.Close()
		if err != nil && !errors.Is(err, redis.ErrClosed) {
			return fmt.Errorf("taskstore: embedded: close client: %w", err)
		}
		return nil
	})
	return s, func() { _ = s.Close() }, nil
}
