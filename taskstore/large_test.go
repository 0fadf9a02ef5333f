package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/taskgate/taskgate/taskstore/redistest"
)

// liveHeap is the live heap after forced collections, in bytes.
func liveHeap() uint64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// largeBurst runs the large-payload scenario on two stores ("replicas") a
// and b sharing one backend: clients tasks, each created and finished
// through a with a result of size bytes and read back twice through b,
// while a probe creates, finishes and reads small tasks the same way. It
// returns every error seen and the probe's latencies (create + finish +
// outcome) during the burst.
func largeBurst(ctx context.Context, a, b Store, clients, size int, ttl time.Duration) (errs []error, probe []time.Duration) {
	result := bigResult(size)
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	done := make(chan struct{})
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			start := time.Now()
			task := &Task{Owner: "probe", Runner: "r", TTL: time.Minute}
			if err := a.Create(ctx, task, CreateOptions{}); err != nil {
				fail(fmt.Errorf("probe create: %w", err))
				continue
			}
			if _, err := a.Finish(ctx, "probe", task.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{"content":[]}`)}); err != nil {
				fail(fmt.Errorf("probe finish: %w", err))
				continue
			}
			if _, _, err := b.Outcome(ctx, "probe", task.ID); err != nil {
				fail(fmt.Errorf("probe outcome: %w", err))
				continue
			}
			mu.Lock()
			probe = append(probe, time.Since(start))
			mu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprint("large-", i)
			task := &Task{Owner: owner, Runner: "r", TTL: ttl}
			if err := a.Create(ctx, task, CreateOptions{}); err != nil {
				fail(fmt.Errorf("large create: %w", err))
				return
			}
			if _, err := a.Finish(ctx, owner, task.ID, Completed, "", Outcome{OutcomeResult, result}); err != nil {
				fail(fmt.Errorf("large finish: %w", err))
				return
			}
			for range 2 {
				_, out, err := b.Outcome(ctx, owner, task.ID)
				if err != nil {
					fail(fmt.Errorf("large outcome: %w", err))
					return
				}
				if len(out.Raw) != len(result) {
					fail(fmt.Errorf("large outcome: %d bytes, want %d", len(out.Raw), len(result)))
				}
			}
		}()
	}
	wg.Wait()
	if clients == 0 {
		for {
			mu.Lock()
			enough := len(probe) >= 200 || len(errs) > 0
			mu.Unlock()
			if enough {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(done)
	<-probeDone
	return errs, probe
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// Issue 22 item 5: 50 clients write and read 8 MiB results through two
// stores on one redis-server (opened as taskgate opens them) while a probe
// runs small tasks: no operation fails, and the live heap comes back to
// within 50 MB of where it started once the burst is over. Before, small
// operations waited in the same pipelined batches as the large ones (with
// a 3 s operation timeout, most of the large reads failed), and a batch
// kept its requests, replies included, referenced in its reused slots
// (with a 30 s timeout, 447 MB stayed live). The probe's latency and the
// heap are reported, not asserted against a time.
func TestLargePayloadsRedis(t *testing.T) {
	addr := redistest.Start(t)
	for _, timeout := range []time.Duration{3 * time.Second, 30 * time.Second} {
		t.Run(fmt.Sprint("timeout ", timeout), func(t *testing.T) {
			prefix := uniquePrefix()
			open := func() *Redis {
				rdb, err := Open("redis://" + addr)
				if err != nil {
					t.Fatal(err)
				}
				return storeOn(t, rdb, prefix, Config{OpTimeout: timeout, CursorKey: testCursorKey}, true)
			}
			a, b := open(), open()
			ctx := context.Background()
			_ = bigResult(8 << 20) // warm up the allocator's size classes
			_, quiet := largeBurst(ctx, a, b, 0, 0, time.Minute)
			before := liveHeap()
			errs, probe := largeBurst(ctx, a, b, 50, 8<<20, time.Minute)
			after := liveHeap()
			// A large-payload operation gets at least largeOpTimeout
			// once it has its lane, whatever the store timeout: no
			// error is excused (before, with the 3 s timeout, a few large
			// Finish calls timed out on a loaded machine and were only
			// reported).
			for _, err := range errs[:min(len(errs), 10)] {
				t.Errorf("store error while Redis is up: %v", err)
			}
			if len(errs) > 10 {
				t.Errorf("... %d store errors in all", len(errs))
			}
			t.Logf("probe create+finish+outcome during the burst: %d runs, p99 %v, max %v (idle: %d runs, p99 %v); live heap %.1f MB before, %.1f MB after",
				len(probe), p99(probe).Round(time.Millisecond), slices.Max(append(probe, 0)).Round(time.Millisecond),
				len(quiet), p99(quiet).Round(time.Millisecond), float64(before)/1e6, float64(after)/1e6)
			if after > before+50<<20 {
				t.Errorf("live heap after the burst %.1f MB, before %.1f MB: more than 50 MB kept", float64(after)/1e6, float64(before)/1e6)
			}
		})
	}
}

// The embedded store under the same burst: nothing fails, and once the
// large tasks expired (TTL 20 s) the live heap is back within 50 MB.
func TestLargePayloadsEmbedded(t *testing.T) {
	e, closer, err := NewEmbedded(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer()
	ctx := context.Background()
	_ = bigResult(8 << 20)
	before := liveHeap()
	// TTL 20 s: under -race on a loaded machine a Finish of the burst came
	// after a 5 s TTL.
	errs, probe := largeBurst(ctx, e, e, 50, 8<<20, 20*time.Second)
	for _, err := range errs {
		t.Errorf("store error: %v", err)
	}
	held := liveHeap()
	var after uint64
	deadline := time.Now().Add(40 * time.Second)
	for {
		after = liveHeap()
		if after <= before+50<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(embeddedTick)
	}
	t.Logf("probe p99 %v (%d runs); live heap %.1f MB before, %.1f MB while the tasks live, %.1f MB after their TTL",
		p99(probe).Round(time.Millisecond), len(probe), float64(before)/1e6, float64(held)/1e6, float64(after)/1e6)
	if after > before+50<<20 {
		t.Errorf("live heap after the tasks expired %.1f MB, before %.1f MB: more than 50 MB kept", float64(after)/1e6, float64(before)/1e6)
	}
}

// TestLargeFinishOutlivesStoreTimeout: a Finish that moves a large outcome
// gets largeOpTimeout once it has its lane, not what is left of the store
// timeout: with Redis holding writes for longer than the store timeout
// (CLIENT PAUSE WRITE), the small operations it is given fail, the large
// Finish succeeds once the pause ends. Before, it failed like them with
// "task store unavailable" (CI: an 8 MiB SET answered after 3 s while
// Redis was up).
func TestLargeFinishOutlivesStoreTimeout(t *testing.T) {
	addr := redistest.Start(t)
	s := storeOn(t, redis.NewClient(clientOpts(addr)), uniquePrefix(), Config{OpTimeout: 200 * time.Millisecond}, true)
	admin := redis.NewClient(clientOpts(addr))
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	large := &Task{Owner: ownerA, Runner: "r", TTL: time.Minute}
	small := &Task{Owner: ownerA, Runner: "r", TTL: time.Minute}
	for _, task := range []*Task{large, small} {
		if err := s.Create(ctx, task, CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	result := bigResult(spillMin * 2)
	const pause = 800 * time.Millisecond // four store timeouts
	if err := admin.Do(ctx, "client", "pause", pause.Milliseconds(), "write").Err(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, smallErr := s.Finish(ctx, ownerA, small.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{"content":[]}`)})
	if !errors.Is(smallErr, ErrUnavailable) {
		t.Errorf("small Finish during the pause: %v, want ErrUnavailable after the store timeout", smallErr)
	}
	if _, err := s.Finish(ctx, ownerA, large.ID, Completed, "", Outcome{OutcomeResult, result}); err != nil {
		t.Fatalf("large Finish during a %v write pause (store timeout 200ms): %v", pause, err)
	}
	if took := time.Since(began); took < pause/2 {
		t.Errorf("the large Finish returned after %v, before the pause could end: the pause did not hold it", took)
	}
	_, out, err := s.Outcome(ctx, ownerA, large.ID)
	if err != nil || len(out.Raw) != len(result) {
		t.Fatalf("Outcome after the pause: %d bytes, %v; want %d bytes", len(out.Raw), err, len(result))
	}
}
