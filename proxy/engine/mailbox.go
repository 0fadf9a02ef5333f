package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// Task reads owner's task taskID from the store (no hold; see Get).
func (e *Engine) Task(ctx context.Context, owner, taskID string) (*taskstore.Task, error) {
	return e.store.Get(ctx, owner, taskID)
}

// Listen marks a stream of owner's task taskID as the one to deliver its
// messages for ttl (0 clears the mark), so the runner wakes only that
// stream. Failures are ignored: the owner's other streams deliver then.
func (e *Engine) Listen(owner, taskID string, ttl time.Duration) {
	_ = e.store.SetListening(context.Background(), owner, taskID, ttl)
}

// OwnerMail is a subscription to the task messages of every task of an
// owner, for a stream that may carry them (any session of the owner, any
// replica): its events say which task has queued messages ('q'), which
// changed status ('s') and when to look at all of them ('r'). Stop it.
type OwnerMail struct {
	events <-chan taskstore.SessionEvent
	stop   func()
}

// WatchOwner subscribes to the messages of owner's tasks, queued for the
// owner's stream group group.
func (e *Engine) WatchOwner(ctx context.Context, owner, group string) (*OwnerMail, error) {
	events, stop, err := e.store.WatchSession(ctx, owner, group)
	if err != nil {
		return nil, err
	}
	return &OwnerMail{events: events, stop: stop}, nil
}

// Events returns the subscription's wake-ups.
func (m *OwnerMail) Events() <-chan taskstore.SessionEvent { return m.events }

// Stop ends the subscription.
func (m *OwnerMail) Stop() { m.stop() }

// DeliverQueued takes the messages queued for owner's task taskID and
// hands them to deliver in order. When deliver fails (the stream is gone)
// that message and the ones after it go back to the queue and
// DeliverQueued returns false. A failed read of the queue is no failure:
// the next wake-up looks again.
func (e *Engine) DeliverQueued(ctx context.Context, owner, taskID string, deliver func(taskstore.Message) bool) bool {
	msgs, err := e.store.Drain(ctx, owner, taskID)
	if err != nil {
		return true
	}
	for i, m := range msgs {
		if !deliver(m) {
			_ = e.store.Requeue(context.Background(), owner, taskID, msgs[i:])
			return false
		}
	}
	return true
}

// DeliverAllQueued is DeliverQueued for every task of owner with messages
// queued for group; deliver gets the task's id with each message.
func (e *Engine) DeliverAllQueued(ctx context.Context, owner, group string, deliver func(taskID string, m taskstore.Message) bool) bool {
	ids, err := e.store.QueuedTasks(ctx, owner, group)
	if err != nil {
		return true
	}
	for _, id := range ids {
		if !e.DeliverQueued(ctx, owner, id, func(m taskstore.Message) bool { return deliver(id, m) }) {
			return false
		}
	}
	return true
}

// OnlyTaskOn returns the task call running on upstream session sess when
// exactly one runs there (ok false when none or several do, or the store
// failed).
func (e *Engine) OnlyTaskOn(ctx context.Context, sess string) (taskID string, ok bool) {
	rec, err := e.store.Session(ctx, sess)
	if err != nil || len(rec.Tasks) != 1 {
		return "", false
	}
	return rec.Tasks[0], true
}

// ErrNotPending: AskFor could not record the question as pending (the
// task is another owner's, ended, or the store failed).
var ErrNotPending = errors.New("engine: question not recorded")

// AskFor makes msg, a question the upstream asked outside any call's
// answer, a question of owner's task taskID: pending under qid in mailbox
// session, the task input_required (statusMessage naming method), and msg
// queued for the client. It fails with ErrNotPending when the question
// cannot be recorded, else with the store's error when it cannot be
// queued.
func (e *Engine) AskFor(ctx context.Context, owner, session, taskID, qid, method string, msg []byte) error {
	if err := e.store.AddPending(ctx, owner, session, qid, taskID); err != nil {
		return fmt.Errorf("%w: %w", ErrNotPending, err)
	}
	if _, err := e.store.Update(ctx, owner, taskID, taskstore.InputRequired, "waiting for the client to answer "+method); err != nil {
		e.logAt(ctx).Debug().Err(err).Msg("moving the task to input_required failed")
	}
	_, err := e.store.Enqueue(ctx, owner, taskID, taskstore.KindRequest, msg, e.cfg.QueueMax)
	return err
}

// Withdraw cancels j's task with statusMessage msg and aborts its call,
// without counting it as a client's cancel: nobody but the engine knew of
// the task (a held call whose client never came back).
func (e *Engine) Withdraw(ctx context.Context, j *Job, msg string) error {
	if _, err := e.store.Cancel(ctx, j.Task.Owner, j.Task.ID, msg); err != nil {
		return err
	}
	j.cancel(ErrCancelledByClient)
	return nil
}

// AddInputRequest records req, an open question of j's call under key,
// in the store, where any replica reads it (InputRequests) and takes its
// answer (AnswerInputs).
func (e *Engine) AddInputRequest(ctx context.Context, j *Job, key string, req []byte) error {
	return e.store.AddInputRequest(ctx, j.Task.Owner, j.Task.ID, key, req)
}

// InputRequests returns the open questions recorded for owner's task
// taskID.
func (e *Engine) InputRequests(ctx context.Context, owner, taskID string) ([]taskstore.InputRequest, error) {
	return e.store.InputRequests(ctx, owner, taskID)
}

// AnswerInputs answers open questions of owner's task taskID: each answer
// whose key is open is taken (into the task's inbox, for its runner) and
// its question closed. It returns the keys taken and how many questions
// are still open; taskstore.ErrTerminal for a finished task.
func (e *Engine) AnswerInputs(ctx context.Context, owner, taskID string, answers []taskstore.InputAnswer) (taken []string, open int, err error) {
	return e.store.AnswerInputs(ctx, owner, taskID, answers)
}
