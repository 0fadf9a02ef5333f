package engine

import (
	"context"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// PollHold is the longest a tasks/get of a working task is held
// (Config.PollHold's default): far below the 30-60 s at which gateways
// cut idle requests and clients time out their own.
const PollHold = 5 * time.Second

// HoldTime is how long a tasks/get of t, a working task, is held at now:
// twice its delay bound (max(PollMin, 5 % of its age), at most its policy
// bound), at most limit; 0 when limit <= 0 or t is not working. The
// hold's length sets how many polls a task costs, not how late its end is
// learnt (see PollMin).
func HoldTime(t *taskstore.Task, now time.Time, limit time.Duration) time.Duration {
	if limit <= 0 || t.Status != taskstore.Working || t.PollInterval <= 0 {
		return 0
	}
	return min(2*min(pollBound(t, now), t.PollInterval), limit)
}

// Holds reports whether a tasks/get of t would be held in this process
// (Poll): t is working, its call runs here and Config.PollHold > 0. Such
// a task reports the shorter, held pollInterval (PollInterval).
func (e *Engine) Holds(t *taskstore.Task) bool {
	return e.cfg.PollHold > 0 && t.Status == taskstore.Working && t.PollInterval > 0 &&
		e.LocalJob(t.Owner, t.ID) != nil
}

// ReportedPollInterval is the pollInterval t reports now to its owner:
// PollInterval, held when this process holds t's polls (Holds), thrifty
// when the owner runs low on its rate-limit budget (Limits.Thrifty).
func (e *Engine) ReportedPollInterval(t *taskstore.Task) time.Duration {
	return PollInterval(t, time.Now(), e.Limits.Thrifty(t.Owner), e.Holds(t))
}

// Poll serves tasks/get of owner's task taskID on both wires: it reads the
// task (with its outcome when withOutcome) and, while it is working, holds
// the answer until it changes status (ends, or asks its client something)
// or HoldTime passes, whichever is first, and then answers what the store
// holds. A client that polls at the reported pollInterval (the held one,
// Holds) thus spends most of each cycle in a held request, where it
// learns of the end at once, and the rest waiting, where it learns of it
// at the next poll: the delay stays within max(PollMin, 5 % of the task's
// duration), round trips included, with about half the polls (see
// PollMin).
//
// Only a call running in this process is held, on its runner: its end and
// a question it asks wake the hold. A message it queues does not (a
// tasks/get does not carry it, and a call's last progress or log line
// comes just before its result: answered then, the client would learn of
// the end an interval later). The hold costs one more store read (none
// when the call ended: the runner's outcome answers). A task whose call
// runs on another process, a terminal task, one waiting for input, and any
// task when Config.PollHold is <= 0 are answered at once, from one store
// read. (A hold on another process's call would wait on the store's task
// events: with Redis, a SUBSCRIBE and an UNSUBSCRIBE and a second read per
// held request, about 2.2 times the commands and 3.5 times the Redis time
// of the polls it saves, on the one component replicas share.) A young
// call running here is first waited for up to HoldFor (holdYoung). The
// hold ends early when ctx ends or the engine starts to close (Close); the
// answer is then the task as read before.
func (e *Engine) Poll(ctx context.Context, owner, taskID string, withOutcome bool) (*taskstore.Task, *taskstore.Outcome, error) {
	j := e.LocalJob(owner, taskID)
	var wake <-chan struct{}
	if j != nil {
		if t, out := e.holdYoung(j); t != nil {
			return t, out, nil
		}
		wake = j.statusChanges() // before the read: no change after it is missed
	}
	t, out, err := e.read(ctx, owner, taskID, withOutcome)
	if err != nil {
		return nil, nil, err
	}
	hold := HoldTime(t, time.Now(), e.cfg.PollHold)
	if j == nil || hold <= 0 {
		return t, out, nil
	}
	tm := time.NewTimer(hold)
	defer tm.Stop()
	select {
	case <-j.settled:
		if ft := j.finalTask; ft != nil && time.Now().Before(ft.ExpiresAt()) {
			// What the runner stored: a terminal task never changes.
			return ft, j.finalOut, nil
		}
	case <-wake:
	case <-tm.C:
	case <-ctx.Done():
		return t, out, nil
	case <-e.runs.closing:
		return t, out, nil
	}
	if t2, out2, err := e.read(ctx, owner, taskID, withOutcome); err == nil {
		return t2, out2, nil
	}
	return t, out, nil // the first read still answers
}

// read is one store read for Poll.
func (e *Engine) read(ctx context.Context, owner, taskID string, withOutcome bool) (*taskstore.Task, *taskstore.Outcome, error) {
	if withOutcome {
		return e.store.Outcome(ctx, owner, taskID)
	}
	t, err := e.store.Get(ctx, owner, taskID)
	return t, nil, err
}
