package engine

import (
	"context"
	"errors"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// Messages of a running call. While a call runs, its upstream may send
// notifications for the client and ask the client questions. The wire
// layer renders each message as its client must see it; the engine
// queues it in the task's mailbox in the store, where the client's
// streams (on any replica) drain it, so each message is delivered once.
// A question is also recorded as pending for the owner under the id the
// client answers, so the answer, posted to any replica, lands in the
// task's inbox; the runner's supervisor takes it from there (Upstream.
// Answers, TakeAnswers).

// statusThrottle is the least time between two progress-driven
// statusMessage updates of one task.
const statusThrottle = 250 * time.Millisecond

// Progress makes text the task's statusMessage, at most once per
// statusThrottle (later calls within it are dropped), so a client that
// only polls sees the call's progress. Call it from the goroutine reading
// the call's answer only.
func (e *Engine) Progress(ctx context.Context, j *Job, text string) {
	if text == "" || time.Since(j.lastStatus) < statusThrottle {
		return
	}
	j.lastStatus = time.Now()
	_, _ = e.store.Update(ctx, j.Task.Owner, j.Task.ID, "", text)
}

// Enqueue queues msg, of kind, for the task's client and wakes the task's
// local waiters. method names the message in log lines. Over QueueMax the
// store drops the oldest progress, then other notifications (never
// questions); nothing is queued after the task's end.
func (e *Engine) Enqueue(ctx context.Context, j *Job, kind taskstore.MessageKind, msg []byte, method string) {
	dropped, err := e.store.Enqueue(ctx, j.Task.Owner, j.Task.ID, kind, msg, e.cfg.QueueMax)
	if !errors.Is(err, taskstore.ErrTerminal) && !errors.Is(err, taskstore.ErrNotFound) {
		j.noteQueued() // also when unsure (a timeout): a needless drain is harmless
	}
	switch {
	case err == nil && dropped > 0:
		j.Log.Warn().Int("dropped", dropped).Int("queue_max", e.cfg.QueueMax).
			Msg("task message queue full: dropped the oldest progress/log notifications")
	case errors.Is(err, taskstore.ErrTerminal), errors.Is(err, taskstore.ErrNotFound), ctx.Err() != nil:
		// Nothing after the end (a cancel or timeout ends ctx too).
	case err != nil:
		j.Log.Warn().Err(err).Str(logRPCMethod, method).Msg("queueing a task message failed")
	}
}

// Ask records a question of the call, asked under qid (the id the client
// answers; canonical form) in mailbox session, as pending, and moves the
// task to input_required with a statusMessage naming method. It returns
// the store's error when the question could not be recorded (then the
// task's status is unchanged). The wire queues the question itself
// (Enqueue, kind taskstore.KindRequest).
func (e *Engine) Ask(ctx context.Context, j *Job, session, qid, method string) error {
	if err := e.store.AddPending(ctx, j.Task.Owner, session, qid, j.Task.ID); err != nil {
		return err
	}
	j.pending.Add(1)
	e.InputRequired(ctx, j, method)
	return nil
}

// InputRequired moves the task to input_required with a statusMessage
// naming method (the question's).
func (e *Engine) InputRequired(ctx context.Context, j *Job, method string) {
	if _, err := e.store.Update(ctx, j.Task.Owner, j.Task.ID, taskstore.InputRequired, "waiting for the client to answer "+method); err != nil {
		j.Log.Debug().Err(err).Msg("moving the task to input_required failed")
	}
}

// TakeAnswers takes the client's answers waiting in the task's inbox
// (each as the client posted it); nil when there are none or the store
// failed.
func (e *Engine) TakeAnswers(ctx context.Context, j *Job) [][]byte {
	answers, err := e.store.TakeAnswers(ctx, j.Task.Owner, j.Task.ID)
	if err != nil {
		return nil
	}
	return answers
}

// Answered records that n questions recorded by Ask were answered; once
// none is pending the task returns to working.
func (e *Engine) Answered(ctx context.Context, j *Job, n int) {
	for range n {
		if j.pending.Add(-1) < 0 {
			j.pending.Store(0)
		}
	}
	if j.pending.Load() <= 0 {
		e.Working(ctx, j)
	}
}

// Working returns the task to working after its questions were answered.
func (e *Engine) Working(ctx context.Context, j *Job) {
	_, _ = e.store.Update(ctx, j.Task.Owner, j.Task.ID, taskstore.Working, "input received; working")
}

// Answer routes a client's answer msg to question qid, pending for owner
// in mailbox session, into its task's inbox, and returns the task's id;
// taskstore.ErrNotFound when no such question is pending (answered
// before, its task ended, or not this owner's).
func (e *Engine) Answer(ctx context.Context, owner, session, qid string, msg []byte) (string, error) {
	return e.store.Answer(ctx, owner, session, qid, msg)
}

// Redeliver puts question msg (qid, of owner's task taskID, asked in
// mailbox session) back in its task's queue when it is still pending: the
// stream that carried it ended before the client answered. It reports
// whether it was queued again.
func (e *Engine) Redeliver(owner, session, taskID, qid string, msg []byte) bool {
	ctx := context.Background()
	if _, err := e.store.PendingTask(ctx, owner, session, qid); err != nil {
		return false
	}
	return e.store.Requeue(ctx, owner, taskID, []taskstore.Message{{Kind: taskstore.KindRequest, Data: msg}}) == nil
}
