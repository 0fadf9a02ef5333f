package engine

import (
	"context"
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
	// call (see Mailbox.TakeAnswers), when the supervisor was woken.
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
	wake chan struct{} // closed (and cleared) when a message is queued or the status changes; made by waiters
	// statusWake is closed (and cleared) when the status changes, not
	// when a message is queued; made by Poll's holds.
	statusWake chan struct{}
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

// noteChanged wakes the local waiters after the task's status changed
// (Poll's holds re-read it).
func (j *Job) noteChanged() {
	j.mu.Lock()
	if j.wake != nil {
		close(j.wake)
		j.wake = nil
	}
	if j.statusWake != nil {
		close(j.statusWake)
		j.statusWake = nil
	}
	j.mu.Unlock()
}

// statusChanges returns a channel closed at the next noteChanged only: a
// queued message changes nothing a tasks/get answers.
func (j *Job) statusChanges() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.statusWake == nil {
		j.statusWake = make(chan struct{})
	}
	return j.statusWake
}

// changes returns a channel closed at the next noteQueued or noteChanged. Check queued
// after taking it, so no wake-up is lost.
func (j *Job) changes() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.wake == nil {
		j.wake = make(chan struct{})
	}
	return j.wake
}

// settle closes j.settled (once).
func (j *Job) settle() { j.settleOnce.Do(func() { close(j.settled) }) }
