package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/taskstore"
)

// Config configures an Engine. The wire layers fill it from their own
// configuration; New does not apply defaults beyond what it documents.
type Config struct {
	// ProcessID names this process in leases (Task.Runner).
	ProcessID string
	// Lease is the bound on how long a task whose runner died stays
	// working (see LeaseTTL); it must be > 0.
	Lease time.Duration
	// StoreTimeout is the time one store operation may take; the runner's
	// retries to record an outcome while shutting down are bounded by it.
	StoreTimeout time.Duration
	// MaxTasksPerOwner caps an owner's unfinished tasks; <= 0 = none.
	MaxTasksPerOwner int
	// QueueMax bounds a task's queue of undelivered messages.
	QueueMax int
	// KeepAlive is the interval of WaitTerminal's tick.
	KeepAlive time.Duration
	// ListPageSize is the page size of List.
	ListPageSize int
	// TaskRate and TaskBurst are the per-owner token bucket of task
	// operations (Limits.Allow): operations per second and bucket size. A rate
	// <= 0 disables it.
	TaskRate  float64
	TaskBurst int
	// HoldFor and HoldYoung shape Poll's wait for a young local call
	// (holdYoung): a call younger than HoldYoung is waited for up to
	// HoldFor.
	HoldFor, HoldYoung time.Duration
	// PollHold bounds how long Poll holds a tasks/get of a working task
	// for its end (HoldTime); <= 0 answers at once.
	PollHold time.Duration
}

// Hooks are the engine's metrics and tracing. Each may be nil.
type Hooks struct {
	// TaskEvent counts a task lifecycle event ("created", "refused",
	// "completed", "failed", "cancelled", "expired", "lost", "dropped",
	// "rate_limited", "lookup_miss") of tool ("" when unknown).
	TaskEvent func(event, tool string)
	// TaskDuration observes the age of a task of tool that reached status
	// (a terminal status, or "lost").
	TaskDuration func(tool, status string, age time.Duration)
	// CallDuration observes how long one upstream call of tool took.
	CallDuration func(tool string, d time.Duration)
	// Running adds delta to the count of calls running in this process.
	Running func(delta int64)
	// RateLimited counts a task operation refused by Limits.Allow.
	RateLimited func()
	// StoreOp observes one store operation of the engine (op: "create",
	// "get", "finish", "cancel", "outcome", "list", "renew", "recover",
	// "enqueue", "drain", "answer", "add_input", "inputs", "answer_inputs")
	// and whether it failed (an answer the store's contract foresees, such
	// as not found, is no failure).
	StoreOp func(op string, d time.Duration, failed bool)
	// CallContext returns ctx with the wire's values for j's call (its
	// trace span); j's call, its supervision and the recording of its
	// outcome run under the result. It runs inside Create, once j.Task and
	// j.Call are set, and must not keep ctx.
	CallContext func(j *Job, ctx context.Context) context.Context
	// LogContext returns log with what ctx says about the work it is
	// written for (the trace ids of its span), for the lines the engine
	// writes inside a request; nil: log as it is.
	LogContext func(ctx context.Context, log *zerolog.Logger) *zerolog.Logger
	// Lost reports a task that lease recovery failed (its runner stopped
	// renewing the lease), after its "lost" event.
	Lost func(t *taskstore.Task)
}

func (h *Hooks) event(event, tool string) {
	if h.TaskEvent != nil {
		h.TaskEvent(event, tool)
	}
}

func (h *Hooks) duration(tool, status string, age time.Duration) {
	if h.TaskDuration != nil {
		h.TaskDuration(tool, status, age)
	}
}

// Engine runs this process's tasks: it creates, starts, reads, waits for
// and cancels them (engine.go, tasks.go, wait.go). Its parts do the rest:
// Mail carries the messages of running calls, Limits admits work, and,
// unexported, the runners run the calls (runner.go), the supervisor
// watches them while they run (supervise.go) and the recoverer fails the
// tasks of dead runners (recover.go). It is safe for concurrent use; Close
// stops it.
type Engine struct {
	// Mail carries the messages of running calls between their upstream
	// and their client. New sets it; do not replace it.
	Mail *Mailbox
	// Limits holds the tool concurrency slots and the per-owner rate
	// limit. New sets it; do not replace it.
	Limits *Limits

	cfg    Config
	store  taskstore.Store
	log    *zerolog.Logger
	up     Upstream
	sender Sender // up, when it is one
	hooks  Hooks

	// jobs holds this process's running task calls by task id, so a wait
	// here on a call running here wakes when the runner settles it
	// instead of through a store subscription.
	jobs sync.Map

	runs        runners     // the runner goroutines
	sup         *supervisor // supervision of the running calls
	root        context.Context
	cancel      context.CancelFunc
	streams     lifeGroup // the wires' result streams (Enter, Leave)
	waitRoot    context.Context
	cancelWaits context.CancelFunc
	bg          sync.WaitGroup // lease recovery and the supervisor's loop
	closed      atomic.Bool
}

// New returns an Engine that stores tasks in store and runs their calls
// through up, and starts its lease recovery loop. log must outlive it.
func New(cfg Config, store taskstore.Store, log *zerolog.Logger, up Upstream, hooks Hooks) *Engine {
	if hooks.StoreOp != nil {
		store = &meteredStore{Store: store, obs: hooks.StoreOp}
	}
	e := &Engine{cfg: cfg, store: store, log: log, up: up, hooks: hooks}
	e.Limits = &Limits{rate: newRateLimiter(cfg.TaskRate, cfg.TaskBurst, 65536), hooks: &e.hooks}
	e.Mail = &Mailbox{store: store, queueMax: cfg.QueueMax, logAt: e.logAt, changed: func(owner, taskID string) {
		if j := e.LocalJob(owner, taskID); j != nil {
			j.noteChanged()
		}
	}}
	// The root's cause reaches every running call (their contexts derive
	// from it): context.Cause tells a shutdown from a client's cancel.
	root, cancelRoot := context.WithCancelCause(context.Background())
	e.root, e.cancel = root, func() { cancelRoot(ErrShutdown) }
	waitRoot, cancelWaits := context.WithCancelCause(context.Background())
	e.waitRoot, e.cancelWaits = waitRoot, func() { cancelWaits(ErrShutdown) }
	e.runs = runners{e: e, q: make(chan *Job), closing: make(chan struct{})}
	e.sender, _ = up.(Sender)
	e.sup = newSupervisor(e)
	rec := &recoverer{store: store, lease: cfg.Lease, log: log, hooks: &e.hooks}
	e.bg.Add(2)
	go func() {
		defer e.bg.Done()
		rec.loop(e.root)
	}()
	go e.sup.loop()
	return e
}

// logAt is the engine's logger for a line written for the work of ctx.
func (e *Engine) logAt(ctx context.Context) *zerolog.Logger {
	if e.hooks.LogContext != nil {
		return e.hooks.LogContext(ctx, e.log)
	}
	return e.log
}

// Root is the engine's context: it ends (cause ErrShutdown) when Close
// gives up waiting, or when Close returns. Work done for a request derives
// from it.
func (e *Engine) Root() context.Context { return e.root }

// WaitRoot is the context of waits for a task's end (tasks/result): it
// ends after Root, once this process's calls have recorded their outcomes
// and the waits had FinalAnswerWait to deliver them (see Close), so a
// client waiting here on a call cut by the shutdown gets its final answer.
func (e *Engine) WaitRoot() context.Context { return e.waitRoot }

// FinalAnswerWait is how long Close lets result waits deliver their
// answers after this process's calls have ended (and the grace, if longer).
const FinalAnswerWait = 2 * time.Second

// Closed reports whether Close was called: no task may be created then.
func (e *Engine) Closed() bool { return e.closed.Load() }

// Enter counts a piece of work Close waits for (a wire's result stream,
// whose context derives from WaitRoot); Leave ends it. Enter may be called
// while Close waits.
func (e *Engine) Enter() { e.streams.Add(1) }

// Leave ends a piece of work counted by Enter.
func (e *Engine) Leave() { e.streams.Done() }

// Close stops the engine: idle runners exit, and runners still going are
// waited for until ctx ends, then their calls are cancelled (cause
// ErrShutdown; each records its task failed, "taskgate shut down before
// the upstream call finished"). Then the work counted by Enter (result
// streams) gets until ctx ends, and at least FinalAnswerWait, to deliver
// those outcomes before WaitRoot ends: every wait of this process on one
// of its own tasks gets a final answer; a wait on a task running elsewhere
// that is cut then ends without one (its client resumes on another
// replica). Close is idempotent.
func (e *Engine) Close(ctx context.Context) error {
	if e.closed.Swap(true) {
		return nil
	}
	close(e.runs.closing)
	runners := waitChan(&e.runs.wg)
	select {
	case <-runners:
	case <-ctx.Done():
		e.cancel()
		<-runners
	}
	streams := waitChan(&e.streams)
	bound := time.NewTimer(FinalAnswerWait)
	defer bound.Stop()
	grace, boundOver := ctx.Done(), false
	for waiting := true; waiting; {
		select {
		case <-streams:
			waiting = false
			continue
		case <-bound.C:
			boundOver = true
		case <-grace:
			grace = nil
		}
		if boundOver && grace == nil {
			e.cancel()
			e.cancelWaits()
			<-streams
			waiting = false
		}
	}
	e.cancel()
	e.cancelWaits()
	e.bg.Wait()
	return nil
}

// waitChan returns a channel closed when g's count is zero.
func waitChan(g *lifeGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { g.Wait(); close(done) }()
	return done
}

// RunnersStarted is the number of runner goroutines started so far.
func (e *Engine) RunnersStarted() int64 { return e.runs.started.Load() }

// RunnersIdle is the number of runner goroutines waiting for a job.
func (e *Engine) RunnersIdle() int { return int(e.runs.idle.Load()) }

// SetHold changes HoldFor and HoldYoung (tests; before any task runs).
func (e *Engine) SetHold(holdFor, holdYoung time.Duration) {
	e.cfg.HoldFor, e.cfg.HoldYoung = holdFor, holdYoung
}

// SetPollHold changes PollHold (tests; before any task runs).
func (e *Engine) SetPollHold(d time.Duration) { e.cfg.PollHold = d }

// Why a runner's call ended early (context.Cause of its context).
var (
	// ErrCancelledByClient: the task was cancelled (tasks/cancel, any
	// replica, or its session ended).
	ErrCancelledByClient = errors.New("task cancelled by the client")
	// ErrShutdown: the engine closed before the call finished.
	ErrShutdown = errors.New("taskgate shut down before the call finished")
	// ErrTimeout: the call ran past the policy timeout.
	ErrTimeout = errors.New("upstream call exceeded the policy timeout")
	// ErrExpired: the task's ttl passed before the call finished.
	ErrExpired = errors.New("task ttl passed before the call finished")
)

// Log field names (each used once per line: zerolog keeps duplicates).
const (
	logTaskID    = "task_id"
	logTool      = "tool"
	logOwner     = "owner"
	logRPCMethod = "rpc_method"
	logTraceID   = "trace_id"
	logSpanID    = "span_id"
)
