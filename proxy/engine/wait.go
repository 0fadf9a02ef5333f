package engine

import (
	"context"
	"errors"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// ErrClientGone: WaitTerminal's tick or deliver failed (the client left).
var ErrClientGone = errors.New("client went away")

// recheckInterval bounds how long a lost pub/sub wake-up can delay an
// answer.
const recheckInterval = 5 * time.Second

// AwaitLocal waits until j's runner settles the task (settled true, with
// the task and its outcome), a message is queued for it, or until stop
// fires or ctx ends (settled false, no error). A store read every
// recheckInterval bounds a cancel the runner has not noticed yet.
func (e *Engine) AwaitLocal(ctx context.Context, j *Job, stop <-chan time.Time) (*taskstore.Task, *taskstore.Outcome, bool, error) {
	recheck := time.NewTimer(recheckInterval)
	defer recheck.Stop()
	for {
		wake := j.changes()
		if j.queued.Load() {
			return nil, nil, false, nil
		}
		select {
		case <-j.settled:
			if j.queued.Load() {
				return nil, nil, false, nil // its messages come first
			}
			if t := j.finalTask; t != nil && time.Now().Before(t.ExpiresAt()) {
				// The runner stored this outcome; a terminal task never
				// changes, so it is what the store would answer.
				return t, j.finalOut, true, nil
			}
			return e.ReadTerminal(ctx, j.Task.Owner, j.Task.ID)
		case <-wake:
		case <-stop:
			return nil, nil, false, nil
		case <-ctx.Done():
			return nil, nil, false, nil
		case <-recheck.C:
			if t, out, ok, err := e.ReadTerminal(ctx, j.Task.Owner, j.Task.ID); ok || err != nil {
				return t, out, ok, err
			}
			recheck.Reset(recheckInterval)
		}
	}
}

// ReadTerminal reads the task's outcome once; settled reports whether it
// is terminal. An unavailable store is no error: the caller keeps waiting.
func (e *Engine) ReadTerminal(ctx context.Context, owner, taskID string) (*taskstore.Task, *taskstore.Outcome, bool, error) {
	t, out, err := e.store.Outcome(ctx, owner, taskID)
	switch {
	case errors.Is(err, taskstore.ErrUnavailable):
		return nil, nil, false, nil
	case err != nil:
		return nil, nil, false, err
	}
	return t, out, t.Status.Terminal(), nil
}

// WaitTerminal waits until the task is terminal and returns it with its
// outcome. It subscribes before re-reading, so no wake-up is lost; a slow
// re-check also runs in case a wake-up was lost on a store reconnect.
// tick, when set, runs every KeepAlive and ends the wait (ErrClientGone)
// when it fails. deliver, when set, gets the task's queued messages and
// returns how many it delivered; the rest go back to the queue and the
// wait ends (ErrClientGone). Without either, a call running here is waited
// for through its runner (no store subscription).
func (e *Engine) WaitTerminal(ctx context.Context, owner, taskID string, tick func() bool, deliver func([]taskstore.Message) int) (*taskstore.Task, *taskstore.Outcome, error) {
	if tick == nil && deliver == nil {
		if t, out, ok, err := e.localSettled(ctx, owner, taskID); ok {
			return t, out, err
		}
	}
	every := recheckInterval
	ch, stop, err := e.store.Watch(ctx, owner, taskID)
	switch {
	case errors.Is(err, taskstore.ErrUnavailable) && ctx.Err() == nil:
		// The subscription is not confirmed (the store restarting): wait
		// by re-reading often instead of failing the caller.
		ch, stop, every = nil, func() {}, time.Second
	case err != nil:
		return nil, nil, err
	}
	defer stop()
	keep := time.NewTicker(e.cfg.KeepAlive)
	defer keep.Stop()
	recheck := time.NewTicker(every)
	defer recheck.Stop()
	drain := func() error {
		if deliver == nil {
			return nil
		}
		msgs, err := e.store.Drain(ctx, owner, taskID)
		if err != nil || len(msgs) == 0 {
			return nil
		}
		if n := deliver(msgs); n < len(msgs) {
			_ = e.store.Requeue(context.Background(), owner, taskID, msgs[n:])
			return ErrClientGone
		}
		return nil
	}
	for {
		if err := drain(); err != nil {
			return nil, nil, err
		}
		t, out, err := e.store.Outcome(ctx, owner, taskID)
		if err != nil && !errors.Is(err, taskstore.ErrUnavailable) {
			return nil, nil, err
		}
		if err == nil && t.Status.Terminal() {
			// Notifications queued just before the end precede the result.
			if err := drain(); err != nil {
				return nil, nil, err
			}
			return t, out, nil
		}
		for wait := true; wait; {
			select {
			case <-ch:
				wait = false
			case <-recheck.C:
				wait = false
			case <-keep.C:
				if tick != nil && !tick() {
					return nil, nil, ErrClientGone
				}
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
	}
}

// localSettled serves the wait of WaitTerminal when the task's call runs
// in this process: it waits for the runner to settle the task and answers
// with the outcome the runner stored (or, when the runner stored none,
// reads it once), instead of subscribing to the task's events and reading
// it before and after (two round trips on the pub/sub connection and two
// reads per blocking wait). Every way a running task ends goes through its
// runner: its own outcome, a timeout, and a cancel or expiry, which the
// runner sees through its own watch (or lease renewal) when another
// replica made it. ok is false when the call does not run here or the
// store read after it settled was not conclusive; the caller then waits
// through the store as for a remote runner.
func (e *Engine) localSettled(ctx context.Context, owner, taskID string) (*taskstore.Task, *taskstore.Outcome, bool, error) {
	j := e.LocalJob(owner, taskID)
	if j == nil {
		return nil, nil, false, nil
	}
	return e.AwaitSettled(ctx, j)
}

// AwaitSettled is WaitTerminal's wait for j, a call that runs in this
// process, for a caller that already holds it (LocalJob): the runner may
// settle and leave the registry between the caller's lookup and the
// wait, and its stored outcome is still answered from memory.
func (e *Engine) AwaitSettled(ctx context.Context, j *Job) (*taskstore.Task, *taskstore.Outcome, bool, error) {
	owner, taskID := j.Task.Owner, j.Task.ID
	read := func() (*taskstore.Task, *taskstore.Outcome, bool, error) {
		t, out, err := e.store.Outcome(ctx, owner, taskID)
		switch {
		case errors.Is(err, taskstore.ErrUnavailable):
			return nil, nil, false, nil
		case err != nil:
			return nil, nil, true, err
		}
		return t, out, t.Status.Terminal(), nil
	}
	recheck := time.NewTicker(recheckInterval)
	defer recheck.Stop()
	for {
		select {
		case <-j.settled:
			if t := j.finalTask; t != nil && time.Now().Before(t.ExpiresAt()) {
				// The runner stored this outcome; a terminal task never
				// changes, so it is what the store would answer.
				return t, j.finalOut, true, nil
			}
			return read()
		case <-recheck.C:
			// Bounds a cancel the runner has not noticed yet.
			if t, out, ok, err := read(); ok {
				return t, out, true, err
			}
		case <-ctx.Done():
			return nil, nil, true, ctx.Err()
		}
	}
}

// holdYoung serves Poll's read of j, a call that runs in this process,
// when it started less than HoldYoung ago: it waits up to HoldFor for the
// call to end and then returns the terminal task and outcome the runner
// stored, so a client polling a short call learns of its end in this
// answer instead of after a poll interval and another poll. It returns
// nil (the caller reads the store) when the call is older, still running
// after the wait, or when the runner stored no outcome.
func (e *Engine) holdYoung(j *Job) (*taskstore.Task, *taskstore.Outcome) {
	if time.Since(j.Task.CreatedAt) >= e.cfg.HoldYoung {
		return nil, nil
	}
	select {
	case <-j.settled:
	default:
		tm := time.NewTimer(e.cfg.HoldFor)
		defer tm.Stop()
		select {
		case <-j.settled:
		case <-tm.C:
			return nil, nil
		case <-e.root.Done():
			return nil, nil
		}
	}
	if t := j.finalTask; t != nil && time.Now().Before(t.ExpiresAt()) {
		return t, j.finalOut
	}
	return nil, nil
}

// WaitTerminalOrInput waits, through the store, until owner's task taskID
// (a call running on any process) has ended or has an open question
// recorded with Mailbox.AddInputRequest, and returns the task and its
// outcome, or its open questions. Adding a question and changing the task both wake
// the task's watchers; the task is also re-read every recheckInterval in
// case a wake-up was lost.
func (e *Engine) WaitTerminalOrInput(ctx context.Context, owner, taskID string) (*taskstore.Task, *taskstore.Outcome, []taskstore.InputRequest, error) {
	ch, stop, err := e.store.WatchKinds(ctx, owner, taskID, taskstore.EventUpdate+taskstore.EventTerminal)
	if err != nil {
		return nil, nil, nil, err
	}
	defer stop()
	recheck := time.NewTicker(recheckInterval)
	defer recheck.Stop()
	for {
		t, out, err := e.store.Outcome(ctx, owner, taskID)
		var reqs []taskstore.InputRequest
		if err == nil && !t.Status.Terminal() {
			reqs, err = e.store.InputRequests(ctx, owner, taskID)
		}
		switch {
		case err != nil:
			return nil, nil, nil, err
		case t.Status.Terminal():
			return t, out, nil, nil
		case len(reqs) > 0:
			return t, nil, reqs, nil
		}
		select {
		case <-ch:
		case <-recheck.C:
		case <-ctx.Done():
			return nil, nil, nil, ctx.Err()
		}
	}
}
