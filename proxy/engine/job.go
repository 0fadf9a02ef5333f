package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/taskstore"
)

// Upstream runs task calls for the engine. A wire layer implements it
// with its upstream client; the engine calls its methods from the job's
// runner goroutine (Begin, Call, Stopped, Ended), from the job's
// supervisor (Answers), and never after Ended.
type Upstream interface {
	// Begin prepares j's call before anything else of the run (the
	// supervisor may call Answers from then on).
	Begin(j *Job)
	// Call runs j's upstream call until its answer or ctx's end, and
	// classifies the answer. When ctx ended it may return the zero Result:
	// the context's cause decides.
	Call(ctx context.Context, j *Job) Result
	// Stopped tells the upstream that j's call was stopped for reason
	// (a cancel, the policy timeout, the task's expiry, shutdown).
	Stopped(j *Job, reason string)
	// Answers hands the client's answers waiting in j's inbox to the
	// call (see TakeAnswers), when the supervisor was woken.
	Answers(ctx context.Context, j *Job)
	// CloseSession ends j's upstream session: j was the last call on a
	// session its client had ended.
	CloseSession(j *Job)
	// Ended releases what Begin and the creator prepared for j; j's run
	// is over.
	Ended(j *Job)
}

// Sender is an Upstream whose calls can be sent before Call, so the wait
// for the answer happens near the bottom of the runner's stack: a call
// that waits for minutes (thousands of them at once) then holds a runner
// whose stack the garbage collector shrinks. The engine calls Send, then
// Wait, then Call, all from the runner goroutine.
type Sender interface {
	// Send writes j's request (a call it does not send itself is sent by
	// Call).
	Send(ctx context.Context, j *Job)
	// Wait blocks until the answer to what Send wrote starts to arrive, or
	// the call is aborted; Call then reads it. Wait should call little.
	Wait(j *Job)
}

// Result is the upstream outcome of one call.
type Result struct {
	Status  taskstore.Status // Completed or Failed
	Message string           // the task's statusMessage
	Outcome taskstore.Outcome
}

// Job is one task call run by this process. The creator allocates it
// (it may be embedded in the wire's own value) and hands it to Create,
// which initialises it.
type Job struct {
	// Task is the task as created; its fields do not change.
	Task *taskstore.Task
	// Settings is the policy the call runs with.
	Settings policy.Settings
	// Log logs with the task's id and tool.
	Log JobLog
	// Session is the owner's stream group ("" for anonymous callers):
	// the mailbox session of the call's questions.
	Session string
	// UpSession is the store key of the upstream session the call runs
	// on ("" without one, or when it is not recorded there).
	UpSession string
	// Call is the wire's value for the call (its request, headers,
	// per-era state); the engine never looks inside.
	Call any

	pending    atomic.Int32 // relayed requests the client has not answered yet
	lastStatus time.Time    // last progress-driven statusMessage update (reader goroutine only)

	// settled is closed once the runner has nothing more to record: the
	// outcome is stored (or was dropped), or the call ended because the
	// task was cancelled or expired. A wait of this process waits on it
	// before it reads the store.
	settled    chan struct{}
	settleOnce sync.Once
	// finalTask and finalOut are what Finish stored, when it succeeded; set
	// before settled is closed, read only after.
	finalTask *taskstore.Task
	finalOut  *taskstore.Outcome

	// sendPanicked: the Sender's Send panicked (the call fails).
	sendPanicked bool

	// queued is set once the runner queued a message of the task in the
	// store; until then a wait of this process needs no drain and no
	// listening mark.
	queued atomic.Bool

	// ctx bounds the call: cancel (a cancel, the policy timeout, the
	// task's expiry) with the reason as its cause; shutdown reaches it
	// through the engine's root context (cause ErrShutdown).
	ctx      context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time // the policy timeout or the task's expiry, whichever is first
	// deadlineCause is ErrTimeout or ErrExpired, the one deadline stands for.
	deadlineCause error

	// sup is the call's supervision (supervise.go), guarded by the
	// supervisor's lock.
	sup supState

	mu   sync.Mutex
	wake chan struct{} // closed (and cleared) when a message is queued; made by waiters
}

// JobLog logs with the task's id and tool. It is built lazily per line,
// not as a child logger per job: most task lines are below the level in
// use, and a child logger costs an allocation and a copy per task.
type JobLog struct {
	l            *zerolog.Logger
	taskID, tool string
	// traceID and spanID name the call's trace span ("" when the call is
	// not traced).
	traceID, spanID string
}

// SetTrace makes the task's lines carry the trace_id and span_id of its
// call's span. Call it before the job starts (Engine.Start).
func (l *JobLog) SetTrace(traceID, spanID string) { l.traceID, l.spanID = traceID, spanID }

func (l JobLog) with(e *zerolog.Event) *zerolog.Event {
	e = e.Str(logTaskID, l.taskID).Str(logTool, l.tool)
	if l.traceID != "" {
		e = e.Str(logTraceID, l.traceID).Str(logSpanID, l.spanID)
	}
	return e
}

// Debug starts a debug line of the task.
func (l JobLog) Debug() *zerolog.Event { return l.with(l.l.Debug()) }

// Info starts an info line of the task.
func (l JobLog) Info() *zerolog.Event { return l.with(l.l.Info()) }

// Warn starts a warning line of the task.
func (l JobLog) Warn() *zerolog.Event { return l.with(l.l.Warn()) }

// Error starts an error line of the task.
func (l JobLog) Error() *zerolog.Event { return l.with(l.l.Error()) }

// init makes j the job of a created task.
func (e *Engine) initJob(j *Job, t *taskstore.Task, st policy.Settings, call any, session, upSession string) {
	j.Task, j.Settings, j.Call, j.Session, j.UpSession = t, st, call, session, upSession
	j.settled = make(chan struct{})
	j.Log = JobLog{l: e.log, taskID: t.ID, tool: t.Tool}
	j.deadline, j.deadlineCause = t.CreatedAt.Add(st.Timeout), ErrTimeout
	if exp := t.ExpiresAt(); exp.Before(j.deadline) {
		j.deadline, j.deadlineCause = exp, ErrExpired
	}
	ctx := e.root
	if e.hooks.CallContext != nil {
		ctx = e.hooks.CallContext(j, ctx)
	}
	j.ctx, j.cancel = context.WithCancelCause(ctx)
}

// Settled returns a channel closed once the runner has nothing more to
// record (see Final).
func (j *Job) Settled() <-chan struct{} { return j.settled }

// Final returns the task and outcome the runner stored, once Settled is
// closed; nil when it stored none (a cancel, an expiry, a store failure).
func (j *Job) Final() (*taskstore.Task, *taskstore.Outcome) { return j.finalTask, j.finalOut }

// Queued reports whether a message of the task was queued in the store.
func (j *Job) Queued() bool { return j.queued.Load() }

// Abort ends the call at once with cause (normally ErrCancelledByClient,
// after the task was cancelled in the store).
func (j *Job) Abort(cause error) { j.cancel(cause) }

// noteQueued records that a message of the task was queued in the store
// and wakes the local waiters.
func (j *Job) noteQueued() {
	j.queued.Store(true)
	j.mu.Lock()
	if j.wake != nil {
		close(j.wake)
		j.wake = nil
	}
	j.mu.Unlock()
}

// changes returns a channel closed at the next noteQueued. Check queued
// after taking it, so no wake-up is lost.
func (j *Job) changes() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.wake == nil {
		j.wake = make(chan struct{})
	}
	return j.wake
}

// startJob runs j on an idle runner goroutine, or on a new one. Runner
// goroutines are reused: a fresh goroutine grows its stack (copying it)
// on the way through the upstream call and the store, for every task.
func (e *Engine) startJob(j *Job) {
	select {
	case e.runq <- j:
		return
	default:
	}
	if e.runnersIdle.Load() > 0 {
		// A runner counts itself idle just before it waits on runq: give
		// it a moment to get there rather than start another goroutine.
		// The bound covers a runner whose idle timer fires meanwhile.
		wait := time.NewTimer(handOverWait)
		select {
		case e.runq <- j:
			wait.Stop()
			return
		case <-wait.C:
		}
	}
	e.wg.Add(1)
	e.runnersStarted.Add(1)
	go e.runner(j)
}

// handOverWait bounds startJob's wait for a runner that counted itself
// idle and is about to wait for a job.
const handOverWait = time.Millisecond

// runnerIdle is how long a runner goroutine waits for another job.
const runnerIdle = 10 * time.Second

// runner runs j, then further jobs handed to it by startJob until it has
// been idle for runnerIdle or the engine closes.
func (e *Engine) runner(j *Job) {
	defer e.wg.Done()
	var idle *time.Timer // made after the first job: a call may run for minutes
	defer func() {
		if idle != nil {
			idle.Stop()
		}
	}()
	for {
		e.run(j)
		if idle == nil {
			idle = time.NewTimer(runnerIdle)
		} else {
			idle.Reset(runnerIdle)
		}
		e.runnersIdle.Add(1)
		select {
		case j = <-e.runq:
			e.runnersIdle.Add(-1)
		case <-idle.C:
			e.runnersIdle.Add(-1)
			return
		case <-e.closing:
			e.runnersIdle.Add(-1)
			return
		}
	}
}

// settle closes j.settled (once).
func (j *Job) settle() { j.settleOnce.Do(func() { close(j.settled) }) }

// run executes a task's upstream call and records its outcome. It is the
// only writer of the task's terminal state besides a cancel and lease
// recovery; the store settles races (a late outcome after a cancel is
// dropped).
//
// The call blocks on the upstream for as long as it runs (minutes, for
// thousands of calls at once), with this goroutine's stack below it: run
// and call keep their frames small (the cleanup, the outcome and panics
// are handled in functions of their own), so the stack of a waiting
// runner stays within what the garbage collector shrinks it to.
func (e *Engine) run(j *Job) {
	defer e.runEnded(j)
	e.begin(j)
	if e.sender != nil && !e.send(j) {
		e.sender.Wait(j)
	}
	e.conclude(j, e.call(j))
}

// begin starts j's run: the upstream's preparation, supervision.
func (e *Engine) begin(j *Job) {
	if e.hooks.Running != nil {
		e.hooks.Running(1)
	}
	e.up.Begin(j)
	e.sup.add(j)
}

// send sends j's request (Sender); it reports whether sending panicked
// (the task then fails like a panic in Call).
func (e *Engine) send(j *Job) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			j.Log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("task runner panicked")
			j.sendPanicked = true
			panicked = true
		}
	}()
	e.sender.Send(j.ctx, j)
	return false
}

// runEnded releases what run held for j.
func (e *Engine) runEnded(j *Job) {
	t := j.Task
	j.cancel(nil)
	j.settle()
	e.jobs.Delete(t.ID)
	if e.hooks.Running != nil {
		e.hooks.Running(-1)
	}
	e.tools.release(t.Tool)
	e.endSessionTask(j)
	e.up.Ended(j)
}

// call runs j's upstream call; a panic of the upstream's code fails the
// task.
func (e *Engine) call(j *Job) (res Result) {
	if j.sendPanicked {
		return panicResult
	}
	defer e.recoverCall(j, &res)
	callStart := time.Now()
	res = e.up.Call(j.ctx, j)
	if e.hooks.CallDuration != nil {
		e.hooks.CallDuration(j.Task.Tool, time.Since(callStart))
	}
	return res
}

// recoverCall, deferred by call, turns a panic into a failed outcome.
func (e *Engine) recoverCall(j *Job, res *Result) {
	if p := recover(); p != nil {
		j.Log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("task runner panicked")
		*res = panicResult
	}
}

// panicResult is the outcome of a call whose upstream code panicked.
var panicResult = Result{Status: taskstore.Failed, Message: "taskgate internal error while running the call", Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}

// conclude ends j's supervision and records the outcome of its call, or
// what its context's cause says instead.
func (e *Engine) conclude(j *Job, res Result) {
	t := j.Task
	cause := context.Cause(j.ctx)
	e.sup.stop(j)

	switch {
	case errors.Is(cause, ErrCancelledByClient):
		j.settle() // the task is cancelled in the store already
		e.up.Stopped(j, "cancelled by the client through tasks/cancel")
		j.Log.Info().Msg("task call aborted after cancel")
		return
	case errors.Is(cause, ErrExpired):
		j.settle() // the task is gone from the store
		e.up.Stopped(j, "task ttl passed")
		e.hooks.event("expired", t.Tool)
		j.Log.Info().Msg("task expired while running; upstream call cancelled")
		return
	case errors.Is(cause, ErrTimeout):
		e.up.Stopped(j, "taskgate policy timeout")
		res = Result{Status: taskstore.Failed, Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal},
			Message: fmt.Sprintf("upstream call exceeded the policy timeout of %s and was cancelled", j.Settings.Timeout)}
	case errors.Is(cause, ErrShutdown):
		e.up.Stopped(j, "taskgate shutting down")
		res = Result{Status: taskstore.Failed, Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal},
			Message: "taskgate shut down before the upstream call finished; the call was cancelled"}
	}
	e.finish(j, res)
}

// watchDelay is how long a call runs before its supervision starts and
// subscribes to the task's events (cancels and client answers).
const watchDelay = 250 * time.Millisecond

// finishRetryFor bounds how long a runner keeps trying to record an outcome.
const finishRetryFor = 2 * time.Minute

// finish records the outcome. While the store is unreachable (a Redis
// restart) it retries with backoff until the task would have expired or
// finishRetryFor passed, so an outcome survives a short outage.
func (e *Engine) finish(j *Job, res Result) {
	var err error
	t := j.Task
	deadline := time.Now().Add(finishRetryFor)
	if exp := t.ExpiresAt(); exp.Before(deadline) {
		deadline = exp
	}
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		var ft *taskstore.Task
		// The call's values (its trace span), not its cancellation: the
		// outcome is recorded after a cancel or at shutdown too.
		ft, err = e.store.Finish(context.WithoutCancel(j.ctx), t.Owner, t.ID, res.Status, res.Message, res.Outcome)
		if err == nil {
			j.finalTask, j.finalOut = ft, &res.Outcome
		}
		if e.root.Err() != nil && deadline.After(time.Now().Add(e.cfg.StoreTimeout)) {
			deadline = time.Now().Add(e.cfg.StoreTimeout) // shutting down: do not hold it up
		}
		if !errors.Is(err, taskstore.ErrUnavailable) || time.Now().Add(backoff).After(deadline) {
			break
		}
		j.Log.Warn().Err(err).Stringer("retry_in", backoff).Msg("task store unavailable; retrying to record the outcome")
		time.Sleep(backoff) // backoff between store retries, not synchronisation
	}
	switch {
	case err == nil:
		e.hooks.event(string(res.Status), t.Tool)
		e.hooks.duration(t.Tool, string(res.Status), time.Since(t.CreatedAt))
		j.Log.Info().Str("status", string(res.Status)).Str("status_message", res.Message).Msg("task finished")
	case errors.Is(err, taskstore.ErrTerminal):
		e.hooks.event("dropped", t.Tool)
		j.Log.Info().Msg("late upstream outcome dropped: task already terminal")
	case errors.Is(err, taskstore.ErrNotFound):
		e.hooks.event("dropped", t.Tool)
		j.Log.Info().Msg("upstream outcome dropped: task expired")
	default:
		j.Log.Error().Err(err).Msg("recording the task outcome failed; lease recovery will fail the task")
	}
}
