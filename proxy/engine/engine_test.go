package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/taskstore"
)

// fakeUpstream is an Upstream whose call is a function of the test. It
// records what the engine told it.
type fakeUpstream struct {
	call    func(ctx context.Context, j *Job) Result
	answers func(ctx context.Context, j *Job)
	eng     *Engine

	mu      sync.Mutex
	begun   int
	stopped []string
	ended   int
}

func (u *fakeUpstream) Begin(*Job) { u.mu.Lock(); u.begun++; u.mu.Unlock() }
func (u *fakeUpstream) Call(ctx context.Context, j *Job) Result {
	u.mu.Lock()
	b := u.begun
	u.mu.Unlock()
	if b == 0 {
		panic("Call before Begin")
	}
	return u.call(ctx, j)
}
func (u *fakeUpstream) Stopped(_ *Job, reason string) {
	u.mu.Lock()
	u.stopped = append(u.stopped, reason)
	u.mu.Unlock()
}
func (u *fakeUpstream) Answers(ctx context.Context, j *Job) {
	if u.answers != nil {
		u.answers(ctx, j)
	}
}
func (u *fakeUpstream) CloseSession(*Job) {}
func (u *fakeUpstream) Ended(*Job)        { u.mu.Lock(); u.ended++; u.mu.Unlock() }

func (u *fakeUpstream) stops() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.stopped...)
}

type testEngine struct {
	*Engine
	store *taskstore.Embedded
	up    *fakeUpstream
}

func newTestEngine(t *testing.T, cfg Config, up *fakeUpstream) *testEngine {
	t.Helper()
	st, closer, err := taskstore.NewEmbedded(taskstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closer)
	if cfg.Lease == 0 {
		cfg.Lease = 15 * time.Second
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 3 * time.Second
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = time.Second
	}
	if cfg.QueueMax == 0 {
		cfg.QueueMax = 16
	}
	cfg.ProcessID = "test"
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	e := New(cfg, st, &log, up, Hooks{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return &testEngine{Engine: e, store: st, up: up}
}

var testSettings = policy.Settings{Timeout: time.Minute, PollInterval: time.Second}

// start creates and starts a task of tool for owner.
func (e *testEngine) start(t *testing.T, owner, tool string, st policy.Settings) (*Job, error) {
	t.Helper()
	id, nonce, err := e.Limits.Reserve(tool, st)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	task := &taskstore.Task{ID: id, Owner: owner, Status: taskstore.Working, CreatedAt: now, UpdatedAt: now,
		TTL: time.Hour, Tool: tool, UpstreamID: `"` + nonce + `"`, Runner: "test"}
	j := new(Job)
	if err := e.Create(context.Background(), j, task, st, nil, "", ""); err != nil {
		return nil, err
	}
	e.Start(j)
	return j, nil
}

func done(raw string) Result {
	return Result{Status: taskstore.Completed, Outcome: taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: []byte(raw)}}
}

// A created task runs, its outcome is stored, and a wait of this process
// gets it from the runner.
func TestEngineRunsTask(t *testing.T) {
	up := &fakeUpstream{call: func(context.Context, *Job) Result { return done(`{"content":[]}`) }}
	e := newTestEngine(t, Config{}, up)
	j, err := e.start(t, "alice", "echo", testSettings)
	if err != nil {
		t.Fatal(err)
	}
	task, out, err := e.WaitTerminal(context.Background(), "alice", j.Task.ID, nil, nil)
	if err != nil || task.Status != taskstore.Completed || string(out.Raw) != `{"content":[]}` {
		t.Fatalf("WaitTerminal = %+v, %+v, %v; want completed with the result", task, out, err)
	}
	stored, err := e.store.Get(context.Background(), "alice", j.Task.ID)
	if err != nil || stored.Status != taskstore.Completed {
		t.Fatalf("stored task = %+v, %v; want completed", stored, err)
	}
	if _, err := e.Task(context.Background(), "bob", j.Task.ID); !errors.Is(err, taskstore.ErrNotFound) {
		t.Errorf("another owner's read = %v, want ErrNotFound", err)
	}
	<-j.Settled()
	waitFor(t, func() bool { up.mu.Lock(); defer up.mu.Unlock(); return up.ended == 1 }, "Ended")
}

// A cancel aborts the running call at once and tells the upstream why.
func TestEngineCancelAbortsCall(t *testing.T) {
	started := make(chan struct{})
	up := &fakeUpstream{call: func(ctx context.Context, _ *Job) Result {
		close(started)
		<-ctx.Done()
		return Result{}
	}}
	e := newTestEngine(t, Config{}, up)
	j, err := e.start(t, "alice", "block", testSettings)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := e.Cancel(context.Background(), "bob", j.Task.ID, "no", true); !errors.Is(err, taskstore.ErrNotFound) {
		t.Fatalf("another owner's cancel = %v, want ErrNotFound", err)
	}
	task, err := e.Cancel(context.Background(), "alice", j.Task.ID, "cancelled by the client", true)
	if err != nil || task.Status != taskstore.Cancelled {
		t.Fatalf("Cancel = %+v, %v", task, err)
	}
	<-j.Settled()
	waitFor(t, func() bool { return len(up.stops()) == 1 }, "Stopped")
	if got := up.stops(); got[0] != "cancelled by the client through tasks/cancel" {
		t.Errorf("Stopped reason %q", got[0])
	}
	if _, err := e.Cancel(context.Background(), "alice", j.Task.ID, "again", true); !errors.Is(err, taskstore.ErrTerminal) {
		t.Errorf("second cancel = %v, want ErrTerminal", err)
	}
}

// A call that outlasts the policy timeout is stopped and the task fails
// saying so.
func TestEnginePolicyTimeout(t *testing.T) {
	up := &fakeUpstream{call: func(ctx context.Context, _ *Job) Result { <-ctx.Done(); return Result{} }}
	e := newTestEngine(t, Config{}, up)
	st := testSettings
	st.Timeout = 20 * time.Millisecond
	j, err := e.start(t, "alice", "slow", st)
	if err != nil {
		t.Fatal(err)
	}
	task, out, err := e.WaitTerminal(context.Background(), "alice", j.Task.ID, nil, nil)
	if err != nil || task.Status != taskstore.Failed || out.Kind != taskstore.OutcomeInternal ||
		task.StatusMessage != "upstream call exceeded the policy timeout of 20ms and was cancelled" {
		t.Fatalf("WaitTerminal = %+v, %+v, %v", task, out, err)
	}
	if got := up.stops(); len(got) != 1 || got[0] != "taskgate policy timeout" {
		t.Errorf("Stopped = %q", got)
	}
}

// maxConcurrent and the per-owner cap refuse a task before it runs and
// hold nothing afterwards.
func TestEngineLimits(t *testing.T) {
	release := make(chan struct{})
	up := &fakeUpstream{call: func(context.Context, *Job) Result { <-release; return done(`{}`) }}
	e := newTestEngine(t, Config{MaxTasksPerOwner: 2}, up)
	one := testSettings
	one.MaxConcurrent = 1
	j1, err := e.start(t, "alice", "single", one)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.start(t, "alice", "single", one); !errors.Is(err, ErrToolBusy) {
		t.Fatalf("second call of a maxConcurrent 1 tool = %v, want ErrToolBusy", err)
	}
	j2, err := e.start(t, "alice", "other", testSettings)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.start(t, "alice", "single2", one); !errors.Is(err, taskstore.ErrOwnerLimit) {
		t.Fatalf("third unfinished task = %v, want ErrOwnerLimit", err)
	}
	// The refused creation gave its tool slot back.
	if _, _, err := e.Limits.Reserve("single2", one); err != nil {
		t.Fatalf("Reserve after a refused creation = %v", err)
	}
	e.Limits.ReleaseTool("single2")
	close(release)
	<-j1.Settled()
	<-j2.Settled()
	// The runner gives the slot back right after it settled the task.
	waitFor(t, func() bool {
		_, err := e.start(t, "alice", "single", one)
		if err != nil && !errors.Is(err, ErrToolBusy) {
			t.Fatalf("after the first call ended: %v", err)
		}
		return err == nil
	}, "the tool's slot after the first call ended")
}

// A question of the call reaches the client's wait through the mailbox,
// the client's answer reaches the call through the inbox, and the task
// goes input_required and back to working on the way.
func TestEngineQuestionAndAnswer(t *testing.T) {
	answered := make(chan []byte, 1)
	up := &fakeUpstream{}
	up.call = func(ctx context.Context, j *Job) Result {
		if err := up.ask(ctx, j); err != nil {
			return Result{Status: taskstore.Failed, Message: err.Error()}
		}
		select {
		case a := <-answered:
			return done(`{"answer":` + string(a) + `}`)
		case <-ctx.Done():
			return Result{}
		}
	}
	var e *testEngine
	up.answers = func(ctx context.Context, j *Job) {
		if as := e.Mail.TakeAnswers(ctx, j); len(as) > 0 {
			e.Mail.Answered(ctx, j, len(as))
			answered <- as[0]
		}
	}
	e = newTestEngine(t, Config{}, up)
	up.eng = e.Engine
	j, err := e.start(t, "alice", "ask", testSettings)
	if err != nil {
		t.Fatal(err)
	}
	var got []taskstore.Message
	waitDone := make(chan error, 1)
	var final *taskstore.Task
	go func() {
		t2, _, err := e.WaitTerminal(context.Background(), "alice", j.Task.ID, nil, func(msgs []taskstore.Message) int {
			got = append(got, msgs...)
			return len(msgs)
		})
		final = t2
		waitDone <- err
	}()
	waitFor(t, func() bool {
		tk, err := e.Task(context.Background(), "alice", j.Task.ID)
		return err == nil && tk.Status == taskstore.InputRequired
	}, "input_required")
	if _, err := e.Mail.Answer(context.Background(), "alice", "grp", "q1", []byte(`42`)); err != nil {
		t.Fatalf("Answer: %v", err)
	}
	if _, err := e.Mail.Answer(context.Background(), "alice", "grp", "q1", []byte(`43`)); !errors.Is(err, taskstore.ErrNotFound) {
		t.Errorf("second answer = %v, want ErrNotFound (the first answer wins)", err)
	}
	if err := <-waitDone; err != nil || final.Status != taskstore.Completed {
		t.Fatalf("wait = %+v, %v", final, err)
	}
	if len(got) != 1 || string(got[0].Data) != `{"q":1}` || got[0].Kind != taskstore.KindRequest {
		t.Errorf("delivered %+v, want the question", got)
	}
	_, out, _ := e.Outcome(context.Background(), "alice", j.Task.ID)
	if string(out.Raw) != `{"answer":42}` {
		t.Errorf("outcome %s", out.Raw)
	}
}

// ask is the fake call's question: pending as q1 in mailbox grp, queued.
func (u *fakeUpstream) ask(ctx context.Context, j *Job) error {
	if err := u.eng.Mail.Ask(ctx, j, "grp", "q1", "elicitation/create"); err != nil {
		return err
	}
	u.eng.Mail.Enqueue(ctx, j, taskstore.KindRequest, []byte(`{"q":1}`), "elicitation/create")
	return nil
}

// The rate limit refuses an owner over its burst, and only that owner.
func TestEngineRateLimit(t *testing.T) {
	e := newTestEngine(t, Config{TaskRate: 0.001, TaskBurst: 2}, &fakeUpstream{})
	for i := range 2 {
		if ok, _ := e.Limits.Allow("alice"); !ok {
			t.Fatalf("operation %d refused within the burst", i)
		}
	}
	if ok, wait := e.Limits.Allow("alice"); ok || wait <= 0 {
		t.Fatalf("operation over the burst = %v, %v; want refused with a wait", ok, wait)
	}
	if ok, _ := e.Limits.Allow("bob"); !ok {
		t.Fatal("another owner refused")
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

// CancelOwnerTasks cancels every unfinished task of the owner and aborts
// their calls; other owners' tasks and finished tasks stay as they are.
func TestEngineCancelOwnerTasks(t *testing.T) {
	up := &fakeUpstream{call: func(ctx context.Context, j *Job) Result {
		if j.Task.Tool == "quick" {
			return done(`{}`)
		}
		<-ctx.Done()
		return Result{}
	}}
	e := newTestEngine(t, Config{}, up)
	quick, err := e.start(t, "alice", "quick", testSettings)
	if err != nil {
		t.Fatal(err)
	}
	<-quick.Settled()
	var alices []*Job
	for range 2 {
		j, err := e.start(t, "alice", "block", testSettings)
		if err != nil {
			t.Fatal(err)
		}
		alices = append(alices, j)
	}
	bobs, err := e.start(t, "bob", "block", testSettings)
	if err != nil {
		t.Fatal(err)
	}
	e.CancelOwnerTasks("alice", "session ended")
	for _, j := range alices {
		<-j.Settled()
		tk, err := e.Task(context.Background(), "alice", j.Task.ID)
		if err != nil || tk.Status != taskstore.Cancelled || tk.StatusMessage != "session ended" {
			t.Errorf("alice's running task = %+v, %v; want cancelled", tk, err)
		}
	}
	if tk, _ := e.Task(context.Background(), "alice", quick.Task.ID); tk.Status != taskstore.Completed {
		t.Errorf("alice's finished task = %s, want completed", tk.Status)
	}
	if tk, _ := e.Task(context.Background(), "bob", bobs.Task.ID); tk.Status != taskstore.Working {
		t.Errorf("bob's task = %s, want working", tk.Status)
	}
	if _, err := e.Cancel(context.Background(), "bob", bobs.Task.ID, "done", false); err != nil {
		t.Fatal(err)
	}
	<-bobs.Settled()
}
