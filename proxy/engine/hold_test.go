package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/taskstore"
)

// watchCounter is a store that counts subscriptions (a hold must not
// subscribe).
type watchCounter struct {
	taskstore.Store
	n atomic.Int32
}

func (s *watchCounter) WatchKinds(ctx context.Context, owner, id string, kinds taskstore.EventKind) (<-chan struct{}, func(), error) {
	ch, stop, err := s.Store.WatchKinds(ctx, owner, id, kinds)
	s.n.Add(1)
	return ch, stop, err
}

// storeLag is how far the test store's clock is behind: its new tasks
// are that old to the engine, so their delay bound is 3 s (holdAge) and a
// poll of them is held 5 s (twice that, at most PollHold): an answer
// sooner than holdAge did not come from the hold's end.
const (
	storeLag = time.Minute
	holdAge  = 3 * time.Second
)

// newHoldEngine is an engine on an embedded store seen through a
// watchCounter, holding polls up to pollHold, without the young hold.
// Calls that block until ctx ends end at the test's end (stop), before
// the engine closes.
func newHoldEngine(t *testing.T, pollHold time.Duration, up *fakeUpstream, stop chan struct{}) (*Engine, *watchCounter) {
	t.Helper()
	emb, closer, err := taskstore.NewEmbedded(taskstore.Config{Now: func() time.Time { return time.Now().Add(-storeLag) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closer)
	st := &watchCounter{Store: emb}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	e := New(Config{ProcessID: "test", Lease: 15 * time.Second, StoreTimeout: 3 * time.Second, KeepAlive: time.Second,
		QueueMax: 16, PollHold: pollHold}, st, &log, up, Hooks{})
	up.eng = e
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	t.Cleanup(func() { close(stop) }) // runs first
	return e, st
}

// oldTask is a working task of owner alice, polled every 30 s at most.
func oldTask(id string) *taskstore.Task {
	created := time.Now().Add(-storeLag).UTC().Truncate(time.Millisecond)
	return &taskstore.Task{ID: id, Owner: "alice", Status: taskstore.Working, CreatedAt: created, UpdatedAt: created,
		TTL: time.Hour, Tool: "slow", UpstreamID: `"u-` + id + `"`, Runner: "test", PollInterval: 30 * time.Second}
}

// startOld creates and starts a call of tool slow, storeLag old.
func startOld(t *testing.T, e *Engine, id string) *Job {
	t.Helper()
	st := policy.Settings{Timeout: time.Hour, PollInterval: 30 * time.Second} // it is storeLag old
	if _, _, err := e.Limits.Reserve("slow", st); err != nil {                // the slot Create takes
		t.Fatal(err)
	}
	j := new(Job)
	if err := e.Create(context.Background(), j, oldTask(id), st, nil, "", ""); err != nil {
		t.Fatal(err)
	}
	e.Start(j)
	return j
}

// blockUntil is a call that ends when stop is closed (or on a cancel).
func blockUntil(stop chan struct{}) func(context.Context, *Job) Result {
	return func(ctx context.Context, _ *Job) Result {
		select {
		case <-stop:
			return done(`{"content":[]}`)
		case <-ctx.Done():
			return Result{}
		}
	}
}

type pollAnswer struct {
	t   *taskstore.Task
	out *taskstore.Outcome
	err error
	dur time.Duration
}

func pollAsync(e *Engine, id string, withOutcome bool) <-chan pollAnswer {
	ch := make(chan pollAnswer, 1)
	go func() {
		start := time.Now()
		t, out, err := e.Poll(context.Background(), "alice", id, withOutcome)
		ch <- pollAnswer{t, out, err, time.Since(start)}
	}()
	return ch
}

// waitHeld waits until a Poll holds j (it took j's status channel).
func waitHeld(t *testing.T, j *Job) {
	t.Helper()
	waitFor(t, func() bool { j.mu.Lock(); defer j.mu.Unlock(); return j.statusWake != nil }, "the poll to hold")
}

// A poll of a working task running here is held and answers the task's
// end as it happens, within the hold; a task that goes on is answered
// working after the hold; a terminal task, a task waiting for input and a
// task running on another process are answered at once, without a wait;
// PollHold 0 answers at once; Close ends a hold; a message the call queues
// (its last progress, just before its result) does not. A held task reports the
// held pollInterval, which leaves the round trips after a hold's answer
// room within the delay bound; one answered at once reports the bound.
func TestEnginePollHold(t *testing.T) {
	t.Run("local end", func(t *testing.T) {
		release, stop := make(chan struct{}), make(chan struct{})
		up := &fakeUpstream{call: func(ctx context.Context, _ *Job) Result {
			select {
			case <-release:
				return done(`{"content":[]}`)
			case <-ctx.Done():
				return Result{}
			}
		}}
		e, st := newHoldEngine(t, PollHold, up, stop)
		j := startOld(t, e, "t1")
		ans := pollAsync(e, "t1", true)
		waitHeld(t, j)
		close(release)
		a := <-ans
		if a.err != nil || a.t.Status != taskstore.Completed || a.out == nil || string(a.out.Raw) != `{"content":[]}` {
			t.Fatalf("Poll = %+v, %+v, %v; want completed with the result", a.t, a.out, a.err)
		}
		if a.dur >= holdAge {
			t.Errorf("Poll took %v: the end did not end the hold", a.dur)
		}
		if n := st.n.Load(); n != 0 {
			t.Errorf("a local hold subscribed %d times to the store", n)
		}
		// The terminal task is answered at once.
		start := time.Now()
		tk, err := e.Get(context.Background(), "alice", "t1")
		if err != nil || tk.Status != taskstore.Completed || time.Since(start) > time.Second || st.n.Load() != 0 {
			t.Errorf("Get of the completed task = %+v, %v after %v, %d subscriptions", tk, err, time.Since(start), st.n.Load())
		}
	})
	t.Run("queued message", func(t *testing.T) {
		release, stop := make(chan struct{}), make(chan struct{})
		up := &fakeUpstream{call: func(ctx context.Context, _ *Job) Result {
			select {
			case <-release:
				return done(`{"content":[]}`)
			case <-stop:
				return Result{}
			case <-ctx.Done():
				return Result{}
			}
		}}
		e, _ := newHoldEngine(t, PollHold, up, stop)
		j := startOld(t, e, "t7")
		ans := pollAsync(e, "t7", false)
		waitHeld(t, j)
		e.Mail.Enqueue(context.Background(), j, taskstore.KindProgress,
			[]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1,"total":1}}`), "notifications/progress")
		select {
		case a := <-ans:
			t.Fatalf("Poll = %+v, %v after %v: a queued message ended the hold", a.t, a.err, a.dur)
		case <-time.After(100 * time.Millisecond): // held on (the hold is 5 s)
		}
		close(release)
		if a := <-ans; a.err != nil || a.t.Status != taskstore.Completed || a.dur >= holdAge {
			t.Fatalf("Poll = %+v, %v after %v; want completed at the end, within the hold", a.t, a.err, a.dur)
		}
	})
	t.Run("local question", func(t *testing.T) {
		ask, stop := make(chan struct{}), make(chan struct{})
		up := &fakeUpstream{}
		up.call = func(ctx context.Context, j *Job) Result {
			select {
			case <-ask:
			case <-ctx.Done():
				return Result{}
			}
			up.eng.Mail.InputRequired(ctx, j, "elicitation/create")
			return blockUntil(stop)(ctx, j)
		}
		e, _ := newHoldEngine(t, PollHold, up, stop)
		j := startOld(t, e, "t2")
		ans := pollAsync(e, "t2", false)
		waitHeld(t, j)
		close(ask)
		a := <-ans
		if a.err != nil || a.t.Status != taskstore.InputRequired || a.dur >= holdAge {
			t.Fatalf("Poll = %+v, %v after %v; want input_required before the hold's end", a.t, a.err, a.dur)
		}
		// Waiting for input, it is answered at once.
		start := time.Now()
		if tk, err := e.Get(context.Background(), "alice", "t2"); err != nil || tk.Status != taskstore.InputRequired || time.Since(start) > time.Second {
			t.Errorf("Get of the input_required task = %+v, %v after %v", tk, err, time.Since(start))
		}
	})
	t.Run("held for its interval", func(t *testing.T) {
		stop := make(chan struct{})
		up := &fakeUpstream{call: blockUntil(stop)}
		const limit = 200 * time.Millisecond
		e, _ := newHoldEngine(t, limit, up, stop)
		startOld(t, e, "t3")
		a := <-pollAsync(e, "t3", false)
		if a.err != nil || a.t.Status != taskstore.Working || a.dur < limit || a.dur > limit+2*time.Second {
			t.Fatalf("Poll = %+v, %v after %v; want working after about %v", a.t, a.err, a.dur, limit)
		}
		// A task that ends just after this answer is learnt at the next
		// poll, the reported interval and round trips later: within the
		// bound for round trips of 20 ms (the answer back, the poll there
		// and back, the TS SDK's tasks/result).
		now := time.Now()
		got, bound := e.ReportedPollInterval(a.t), PollInterval(a.t, now, false, false)
		if !e.Holds(a.t) || got+5*20*time.Millisecond/2 > bound || got < bound*8/10 {
			t.Errorf("held task: Holds %v, pollInterval %v; want held, at most the bound %v less 50 ms, about 0.9 of it", e.Holds(a.t), got, bound)
		}
	})
	t.Run("off", func(t *testing.T) {
		stop := make(chan struct{})
		up := &fakeUpstream{call: blockUntil(stop)}
		e, _ := newHoldEngine(t, 0, up, stop)
		startOld(t, e, "t4")
		a := <-pollAsync(e, "t4", false)
		if a.err != nil || a.t.Status != taskstore.Working || a.dur > time.Second {
			t.Fatalf("Poll = %+v, %v after %v; want working at once", a.t, a.err, a.dur)
		}
		if got, want := e.ReportedPollInterval(a.t), PollInterval(a.t, time.Now(), false, false); e.Holds(a.t) || got != want {
			t.Errorf("unheld task: Holds %v, pollInterval %v; want the bound %v", e.Holds(a.t), got, want)
		}
	})
	t.Run("remote", func(t *testing.T) {
		e, st := newHoldEngine(t, PollHold, &fakeUpstream{}, make(chan struct{}))
		// A task whose runner is another process: answered at once.
		if err := st.Create(context.Background(), oldTask("t5"), taskstore.CreateOptions{Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		a := <-pollAsync(e, "t5", true)
		if a.err != nil || a.t.Status != taskstore.Working || a.dur > time.Second || st.n.Load() != 0 {
			t.Fatalf("Poll = %+v, %v after %v, %d subscriptions; want working at once", a.t, a.err, a.dur, st.n.Load())
		}
		if got, want := e.ReportedPollInterval(a.t), PollInterval(a.t, time.Now(), false, false); e.Holds(a.t) || got != want {
			t.Errorf("task of another process: Holds %v, pollInterval %v; want the bound %v", e.Holds(a.t), got, want)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		stop := make(chan struct{})
		up := &fakeUpstream{call: blockUntil(stop)}
		e, _ := newHoldEngine(t, PollHold, up, stop)
		j := startOld(t, e, "t6")
		ans := pollAsync(e, "t6", false)
		waitHeld(t, j)
		ctx, cancel := context.WithCancel(context.Background())
		closed := make(chan struct{})
		go func() { _ = e.Close(ctx); close(closed) }()
		a := <-ans
		cancel() // the call is cut; Close returns
		<-closed
		if a.err != nil || a.dur >= holdAge {
			t.Fatalf("Poll = %+v, %v after %v; want an answer when Close starts", a.t, a.err, a.dur)
		}
	})
}
