package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// countHook counts network round trips: one per command, one per pipeline.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestRoundTrips: create, complete, cancel and get are one round trip each
// (one script or command changes the hash, the index and the wake-up
// together), counted after the scripts are cached: the first EVALSHA of a
// cold server costs a NOSCRIPT reply and an EVAL.
func TestRoundTrips(t *testing.T) {
	backends := map[string]func(t *testing.T) string{
		"miniredis":    func(t *testing.T) string { return miniredis.RunT(t).Addr() },
		"redis-server": func(t *testing.T) string { return redistest.Start(t) },
	}
	for name, start := range backends {
		t.Run(name, func(t *testing.T) {
			rdb := redis.NewClient(clientOpts(start(t)))
			s := storeOn(t, rdb, uniquePrefix(), Config{}, true)
			// The AdminStats counters are written every statFlush from a
			// loop of their own: its pipeline would land in whichever
			// operation it overlaps (CI saw Outcome take 4 round trips).
			s.stats.noTimer = true
			h := &countHook{}
			rdb.AddHook(h)
			ctx := testCtx(t)
			out := Outcome{OutcomeResult, json.RawMessage(`{"content":[]}`)}
			var task *Task
			ops := []struct {
				name string
				fn   func() error
			}{
				{"Create", func() error {
					task = newSessionTask(ownerA, sessA)
					return s.Create(ctx, task, CreateOptions{MaxPerOwner: 10})
				}},
				{"Get", func() error { _, err := s.Get(ctx, ownerA, task.ID); return err }},
				{"Enqueue", func() error {
					_, err := s.Enqueue(ctx, ownerA, task.ID, KindProgress, []byte(`{"method":"notifications/progress"}`), 1)
					return err
				}},
				{"Enqueue trimming", func() error { _, err := s.Enqueue(ctx, ownerA, task.ID, KindRequest, []byte(`{}`), 1); return err }},
				{"QueuedTasks", func() error { _, err := s.QueuedTasks(ctx, ownerA, sessA); return err }},
				{"Drain", func() error { _, err := s.Drain(ctx, ownerA, task.ID); return err }},
				{"Requeue", func() error {
					return s.Requeue(ctx, ownerA, task.ID, []Message{{KindRequest, []byte("a")}, {KindRequest, []byte("b")}})
				}},
				{"SetListening", func() error { return s.SetListening(ctx, ownerA, task.ID, time.Minute) }},
				{"SetListening(0)", func() error { return s.SetListening(ctx, ownerA, task.ID, 0) }},
				{"AddPending", func() error { return s.AddPending(ctx, ownerA, sessA, `1`, task.ID) }},
				{"Answer", func() error { _, err := s.Answer(ctx, ownerA, sessA, `1`, []byte(`{"result":{}}`)); return err }},
				{"TakeAnswers", func() error { _, err := s.TakeAnswers(ctx, ownerA, task.ID); return err }},
				{"Update", func() error { _, err := s.Update(ctx, ownerA, task.ID, InputRequired, "x"); return err }},
				{"Renew", func() error { _, err := s.Renew(ctx, ownerA, task.ID, time.Minute); return err }},
				{"Finish", func() error { _, err := s.Finish(ctx, ownerA, task.ID, Completed, "", out); return err }},
				{"Outcome", func() error { _, _, err := s.Outcome(ctx, ownerA, task.ID); return err }},
				{"Cancel", func() error { _, err := s.Cancel(ctx, ownerA, task.ID, ""); return err }},
				{"List", func() error { _, _, err := s.List(ctx, ownerA, "", 10); return err }},
				{"SessionVersion", func() error { _, err := s.SessionVersion(ctx, "s"); return err }},
				{"SetSessionVersion", func() error { return s.SetSessionVersion(ctx, "s", "v", time.Minute) }},
			}
			run := func(count bool) {
				for _, op := range ops {
					before := h.n.Load()
					err := op.fn()
					if op.name == "Cancel" && errors.Is(err, ErrTerminal) {
						err = nil // the task was finished just before; still one trip
					}
					if err != nil {
						t.Fatalf("%s: %v", op.name, err)
					}
					if got := h.n.Load() - before; count && got != 1 {
						t.Errorf("%s took %d round trips, want 1", op.name, got)
					}
				}
			}
			run(false) // warm up: load scripts
			run(true)
		})
	}
}

// TestScriptCacheFlushed: after SCRIPT FLUSH (restart, failover) pipelined
// scripts fall back to EVAL and the operations still work once.
func TestScriptCacheFlushed(t *testing.T) {
	for name, b := range map[string]func(testing.TB) *backend{"miniredis": miniBackend, "redis-server": redisServer(t)} {
		t.Run(name, func(t *testing.T) {
			b := b(t)
			s := b.open(t, Config{})
			ctx := testCtx(t)
			flush := func() {
				if err := b.raw.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			flush()
			task := mustCreate(t, s, newTask(ownerA), CreateOptions{})
			flush()
			if _, err := s.Renew(ctx, ownerA, task.ID, time.Minute); err != nil {
				t.Fatalf("Renew after flush: %v", err)
			}
			flush()
			if _, err := s.Update(ctx, ownerA, task.ID, InputRequired, ""); err != nil {
				t.Fatalf("Update after flush: %v", err)
			}
			flush()
			if _, err := s.Finish(ctx, ownerA, task.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)}); err != nil {
				t.Fatalf("Finish after flush: %v", err)
			}
			flush()
			if l, _, err := s.List(ctx, ownerA, "", 10); err != nil || len(l) != 1 {
				t.Fatalf("List after flush = %d, %v", len(l), err)
			}
			if n, err := b.raw.Exists(ctx, b.k.leases()).Result(); err != nil || n != 0 {
				t.Errorf("lease zset exists (%d, %v); tasks take no per-task lease entry", n, err)
			}
		})
	}
}

// TestWatchReconnect: when the pub/sub connection drops, go-redis
// resubscribes and every watcher is signalled (changes may have been
// published meanwhile), and later changes are still delivered.
func TestWatchReconnect(t *testing.T) {
	b := redisServer(t)(t)
	s := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	ch, stop, err := s.Watch(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	n, err := b.raw.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Int()
	if err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want 1 connection killed", n, err)
	}
	// Nothing is published: the wake-up comes from the resubscription.
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the pub/sub connection was killed")
	}
	// After the reconnect settles, publishes arrive again.
	waitFor(t, 10*time.Second, func() bool {
		drain(ch)
		if _, err := s.Update(ctx, ownerA, task.ID, Working, time.Now().String()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
}

// TestWatchSessionReconnect: a pub/sub reconnect delivers an 'r' to
// session watchers, after the events already delivered, and later events
// arrive again.
func TestWatchSessionReconnect(t *testing.T) {
	b := redisServer(t)(t)
	s := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newSessionTask(ownerA, sessA), CreateOptions{})
	events := watchSession(t, s, ownerA, sessA)
	mustEnqueue(t, s, ownerA, task.ID, KindProgress, "m", 0)
	nextEvent(t, events, SessionEvent{'q', task.ID}, "Enqueue")
	n, err := b.raw.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Int()
	if err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want 1 connection killed", n, err)
	}
	select {
	case ev := <-events:
		if ev != (SessionEvent{Kind: 'r'}) {
			t.Errorf("after the reconnect: event {%c %s}, want {r }", ev.Kind, ev.TaskID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no 'r' after the pub/sub connection was killed")
	}
	waitFor(t, 10*time.Second, func() bool {
		if _, err := s.Update(ctx, ownerA, task.ID, "", time.Now().String()); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-events:
			return ev == SessionEvent{'s', task.ID}
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
}

// TestWatchDeadline: with Redis unreachable Watch and WatchSession fail
// with ErrUnavailable when ctx ends.
func TestWatchDeadline(t *testing.T) {
	s := storeOn(t, deadClient(t), uniquePrefix(), Config{}, true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := s.Watch(ctx, ownerA, "0123456789abcdef0123456789abcdef"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Watch on dead Redis = %v, want ErrUnavailable", err)
	}
	if _, _, err := s.WatchSession(ctx, ownerA, sessA); !errors.Is(err, ErrUnavailable) {
		t.Errorf("WatchSession on dead Redis = %v, want ErrUnavailable", err)
	}
}

// deadClient is a client for a loopback address nothing listens on, without
// go-redis's dial and command retries.
func deadClient(t *testing.T) *redis.Client {
	o := clientOpts(deadAddr(t))
	o.MaxRetries, o.DialerRetries, o.DialTimeout = -1, 1, 100*time.Millisecond
	return redis.NewClient(o)
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestUnavailable: transport errors wrap ErrUnavailable and keep their
// cause; nothing is mistaken for ErrNotFound.
func TestUnavailable(t *testing.T) {
	s := storeOn(t, deadClient(t), uniquePrefix(), Config{}, true)
	ctx := testCtx(t)
	id := "0123456789abcdef0123456789abcdef"
	errs := map[string]error{}
	errs["Create"] = s.Create(ctx, newTask(ownerA), CreateOptions{})
	_, errs["Get"] = s.Get(ctx, ownerA, id)
	_, _, errs["Outcome"] = s.Outcome(ctx, ownerA, id)
	_, errs["Update"] = s.Update(ctx, ownerA, id, Working, "")
	_, errs["Finish"] = s.Finish(ctx, ownerA, id, Completed, "", Outcome{Kind: OutcomeInternal})
	_, errs["Cancel"] = s.Cancel(ctx, ownerA, id, "")
	_, _, errs["List"] = s.List(ctx, ownerA, "", 10)
	_, errs["Renew"] = s.Renew(ctx, ownerA, id, time.Second)
	_, errs["Recover"] = s.Recover(ctx, 0, "")
	_, errs["SessionVersion"] = s.SessionVersion(ctx, "x")
	errs["SetSessionVersion"] = s.SetSessionVersion(ctx, "x", "v", time.Second)
	errs["Ping"] = s.Ping(ctx)
	_, errs["Enqueue"] = s.Enqueue(ctx, ownerA, id, KindProgress, []byte("x"), 0)
	_, errs["Drain"] = s.Drain(ctx, ownerA, id)
	errs["Requeue"] = s.Requeue(ctx, ownerA, id, []Message{{KindRequest, []byte("x")}})
	errs["SetListening"] = s.SetListening(ctx, ownerA, id, time.Second)
	_, errs["QueuedTasks"] = s.QueuedTasks(ctx, ownerA, sessA)
	errs["AddPending"] = s.AddPending(ctx, ownerA, sessA, "1", id)
	_, errs["Answer"] = s.Answer(ctx, ownerA, sessA, "1", []byte("x"))
	_, errs["TakeAnswers"] = s.TakeAnswers(ctx, ownerA, id)
	for op, err := range errs {
		var nerr net.Error
		if !errors.Is(err, ErrUnavailable) || !errors.As(err, &nerr) || errors.Is(err, ErrNotFound) {
			t.Errorf("%s on dead Redis = %v, want ErrUnavailable wrapping the net error", op, err)
		}
	}
	// A caller's deadline shows as both.
	live := miniBackend(t).open(t, Config{})
	dctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := live.Get(dctx, ownerA, id); !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with expired ctx = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
}
