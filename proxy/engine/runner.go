package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/taskstore"
)

// runners runs the engine's jobs: a pool of runner goroutines, reused
// across jobs, each running one call at a time from Begin to Ended and
// recording its outcome. A job's supervision (supervisor) runs beside its
// runner; lease recovery (recoverer) fails the tasks of runners that died.
//
// Goroutine safety: start may be called from any goroutine (Engine.Start);
// a job's run, from begin to ended, happens on its runner goroutine only.
// prepare runs on the creator's goroutine before the job is started.
type runners struct {
	e       *Engine
	q       chan *Job     // idle runner goroutines receive jobs here (start)
	closing chan struct{} // closed when Close starts: idle runners exit
	// started and idle count runner goroutines started and waiting for a
	// job.
	started atomic.Int64
	idle    atomic.Int32
	wg      lifeGroup // runners (Add may race with Close's Wait)
}

// prepare makes j the job of a created task.
func (r *runners) prepare(j *Job, t *taskstore.Task, st policy.Settings, call any, session, upSession string) {
	e := r.e
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

// start runs j on an idle runner goroutine, or on a new one. Runner
// goroutines are reused: a fresh goroutine grows its stack (copying it)
// on the way through the upstream call and the store, for every task.
func (r *runners) start(j *Job) {
	select {
	case r.q <- j:
		return
	default:
	}
	if r.idle.Load() > 0 {
		// A runner counts itself idle just before it waits on q: give
		// it a moment to get there rather than start another goroutine.
		// The bound covers a runner whose idle timer fires meanwhile.
		wait := time.NewTimer(handOverWait)
		select {
		case r.q <- j:
			wait.Stop()
			return
		case <-wait.C:
		}
	}
	r.wg.Add(1)
	r.started.Add(1)
	go r.runner(j)
}

// handOverWait bounds start's wait for a runner that counted itself idle
// and is about to wait for a job.
const handOverWait = time.Millisecond

// runnerIdle is how long a runner goroutine waits for another job.
const runnerIdle = 10 * time.Second

// runner runs j, then further jobs handed to it by start until it has
// been idle for runnerIdle or the engine closes.
func (r *runners) runner(j *Job) {
	defer r.wg.Done()
	var idle *time.Timer // made after the first job: a call may run for minutes
	defer func() {
		if idle != nil {
			idle.Stop()
		}
	}()
	for {
		r.run(j)
		if idle == nil {
			idle = time.NewTimer(runnerIdle)
		} else {
			idle.Reset(runnerIdle)
		}
		r.idle.Add(1)
		select {
		case j = <-r.q:
			r.idle.Add(-1)
		case <-idle.C:
			r.idle.Add(-1)
			return
		case <-r.closing:
			r.idle.Add(-1)
			return
		}
	}
}

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
func (r *runners) run(j *Job) {
	defer r.ended(j)
	r.begin(j)
	if r.e.sender != nil && !r.send(j) {
		r.e.sender.Wait(j)
	}
	r.conclude(j, r.call(j))
}

// begin starts j's run: the upstream's preparation, supervision.
func (r *runners) begin(j *Job) {
	e := r.e
	if e.hooks.Running != nil {
		e.hooks.Running(1)
	}
	e.up.Begin(j)
	e.sup.add(j)
}

// send sends j's request (Sender); it reports whether sending panicked
// (the task then fails like a panic in Call).
func (r *runners) send(j *Job) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			j.Log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("task runner panicked")
			j.sendPanicked = true
			panicked = true
		}
	}()
	r.e.sender.Send(j.ctx, j)
	return false
}

// ended releases what run held for j.
func (r *runners) ended(j *Job) {
	e, t := r.e, j.Task
	j.cancel(nil)
	j.settle()
	e.jobs.Delete(t.ID)
	if e.hooks.Running != nil {
		e.hooks.Running(-1)
	}
	e.Limits.ReleaseTool(t.Tool)
	r.endSessionTask(j)
	e.up.Ended(j)
}

// call runs j's upstream call; a panic of the upstream's code fails the
// task.
func (r *runners) call(j *Job) (res Result) {
	if j.sendPanicked {
		return panicResult
	}
	defer recoverCall(j, &res)
	callStart := time.Now()
	res = r.e.up.Call(j.ctx, j)
	if r.e.hooks.CallDuration != nil {
		r.e.hooks.CallDuration(j.Task.Tool, time.Since(callStart))
	}
	return res
}

// recoverCall, deferred by call, turns a panic into a failed outcome.
func recoverCall(j *Job, res *Result) {
	if p := recover(); p != nil {
		j.Log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("task runner panicked")
		*res = panicResult
	}
}

// panicResult is the outcome of a call whose upstream code panicked.
var panicResult = Result{Status: taskstore.Failed, Message: "taskgate internal error while running the call", Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}

// conclude ends j's supervision and records the outcome of its call, or
// what its context's cause says instead.
func (r *runners) conclude(j *Job, res Result) {
	e, t := r.e, j.Task
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
	r.finish(j, res)
}

// finishRetryFor bounds how long a runner keeps trying to record an outcome.
const finishRetryFor = 2 * time.Minute

// finish records the outcome. While the store is unreachable (a Redis
// restart) it retries with backoff until the task would have expired or
// finishRetryFor passed, so an outcome survives a short outage.
func (r *runners) finish(j *Job, res Result) {
	e := r.e
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

// startSessionTask records j's call on its upstream session, so that the
// client's end of the session waits for it. The call's deadline is the
// earlier of the policy timeout and the task's expiry.
func (r *runners) startSessionTask(j *Job) {
	if j.UpSession == "" {
		return
	}
	if err := r.e.store.StartSessionTask(r.e.root, j.UpSession, j.Task.ID, j.deadline); err != nil {
		// The session then closes without waiting for this call.
		j.Log.Warn().Err(err).Msg("recording the task on its session failed")
		j.UpSession = ""
	}
}

// endSessionTask removes j's call from its session and, when it was the last
// call of a session its client ended, has the upstream end it.
func (r *runners) endSessionTask(j *Job) {
	if j.UpSession == "" {
		return
	}
	closeNow, err := r.e.store.EndSessionTask(context.Background(), j.UpSession, j.Task.ID)
	if err != nil {
		j.Log.Warn().Err(err).Msg("removing the task from its session failed; the session closes at the call's deadline")
		return
	}
	if closeNow {
		r.e.up.CloseSession(j)
	}
}
