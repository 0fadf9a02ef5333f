package taskstore

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Benchmarks run on every store taskgate can use: the native embedded
// store, the miniredis-based embedded store it replaced (for comparison),
// miniredis itself, and a spawned redis-server (skipped without one).
// Where the stored-task count matters, they run with 0, 1k and 10k tasks
// already stored by the same owner: the cost per operation must stay flat.

// benchStores lists the backends by name, in a fixed order.
var benchStores = []struct {
	name string
	mk   func(testing.TB) *backend
}{
	{"native", nativeBackend},
	{"miniredis-embedded", miniEmbeddedBackend},
	{"redis-server", func(tb testing.TB) *backend { return redisServer(tb)(tb) }},
}

func benchBackends(b *testing.B, fn func(b *testing.B, s Store)) {
	for _, bs := range benchStores {
		b.Run(bs.name, func(b *testing.B) {
			fn(b, bs.mk(b).open(b, Config{}))
		})
	}
}

// benchSizes runs fn on every backend with 0, 1k and 10k tasks stored.
func benchSizes(b *testing.B, fn func(b *testing.B, s Store)) {
	benchBackends(b, func(b *testing.B, s Store) {
		stored := 0
		for _, n := range []int{0, 1000, 10000} {
			benchCreate(b, s, n-stored)
			stored = n
			b.Run(fmt.Sprintf("stored=%d", n), func(b *testing.B) { fn(b, s) })
		}
	})
}

func benchCreate(b *testing.B, s Store, n int) []*Task {
	b.Helper()
	ctx := context.Background()
	out := make([]*Task, n)
	for i := range out {
		out[i] = newTask(ownerA)
		if err := s.Create(ctx, out[i], CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

var benchOutcome = Outcome{OutcomeResult, json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)}

func BenchmarkCreate(b *testing.B) {
	benchSizes(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			task := &Task{Owner: ownerA, TTL: time.Hour, Tool: "build", UpstreamID: "1", Runner: "r", Session: sessA}
			if err := s.Create(ctx, task, CreateOptions{MaxPerOwner: 1 << 30}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGet(b *testing.B) {
	benchSizes(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		task := benchCreate(b, s, 1)[0]
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Get(ctx, ownerA, task.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCreateFinish is a task's whole store life on the runner: Create,
// then Finish ("complete").
func BenchmarkCreateFinish(b *testing.B) {
	benchSizes(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			task := &Task{Owner: ownerA, TTL: time.Hour, Tool: "build", UpstreamID: "1", Runner: "r", Session: sessA}
			if err := s.Create(ctx, task, CreateOptions{MaxPerOwner: 1 << 30}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Finish(ctx, ownerA, task.ID, Completed, "", benchOutcome); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkList reads the first page of 50 of an owner's tasks, and a page
// from a cursor in the middle.
func BenchmarkList(b *testing.B) {
	benchSizes(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		benchCreate(b, s, 100)
		_, cursor, err := s.List(ctx, ownerA, "", 50)
		if err != nil || cursor == "" {
			b.Fatal(cursor, err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if l, _, err := s.List(ctx, ownerA, cursor, 50); err != nil || len(l) != 50 {
				b.Fatal(len(l), err)
			}
		}
	})
}

// BenchmarkRoundtrip is create + wait: a waiter subscribes to a new task
// (Watch), the runner finishes it, the waiter wakes and reads the outcome.
func BenchmarkRoundtrip(b *testing.B) {
	benchSizes(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			task := &Task{Owner: ownerA, TTL: time.Hour, Tool: "build", UpstreamID: "1", Runner: "r"}
			if err := s.Create(ctx, task, CreateOptions{MaxPerOwner: 1 << 30}); err != nil {
				b.Fatal(err)
			}
			ch, stop, err := s.Watch(ctx, ownerA, task.ID)
			if err != nil {
				b.Fatal(err)
			}
			finished := make(chan error, 1)
			go func() {
				_, err := s.Finish(ctx, ownerA, task.ID, Completed, "", benchOutcome)
				finished <- err
			}()
			for {
				t, out, err := s.Outcome(ctx, ownerA, task.ID)
				if err != nil {
					b.Fatal(err)
				}
				if t.Status.Terminal() {
					if out.Kind != OutcomeResult {
						b.Fatal(out.Kind)
					}
					break
				}
				<-ch
			}
			stop()
			if err := <-finished; err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEnqueueDrain(b *testing.B) {
	benchBackends(b, func(b *testing.B, s Store) {
		ctx := context.Background()
		task := &Task{Owner: ownerA, TTL: time.Hour, Session: sessA}
		if err := s.Create(ctx, task, CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		msg := []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Enqueue(ctx, ownerA, task.ID, KindNotification, msg, 0); err != nil {
				b.Fatal(err)
			}
			if m, err := s.Drain(ctx, ownerA, task.ID); err != nil || len(m) != 1 {
				b.Fatal(len(m), err)
			}
		}
	})
}

// TestEmbeddedMemory10k reports the heap the native store holds for 10,000
// in-flight tasks (each with a lease, a Watch as its runner keeps, and a
// queued progress message). The figure goes into the log (go test -v);
// the assertion is a loose ceiling far above it, so it fails only when
// memory per task grows by an order of magnitude.
func TestEmbeddedMemory10k(t *testing.T) {
	const n = 10000
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	e := newNative(t, Config{})
	ctx := context.Background()
	stops := make([]func(), 0, n)
	msg := []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`)
	for i := range n {
		task := newSessionTask(fmt.Sprintf("owner-%d", i%100), sessA)
		if err := e.Create(ctx, task, CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, stop, err := e.WatchKinds(ctx, task.Owner, task.ID, EventTerminal|EventAnswer)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
		if _, err := e.Enqueue(ctx, task.Owner, task.ID, KindProgress, msg, 16); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perTask := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("native store, %d in-flight tasks: heap %.1f MiB (%.0f bytes per task)", n, float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), perTask)
	if perTask > 20000 {
		t.Errorf("%.0f bytes per in-flight task, want well under 20 kB", perTask)
	}
	for _, stop := range stops {
		stop()
	}
}
