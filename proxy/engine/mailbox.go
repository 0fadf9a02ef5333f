package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/taskstore"
)

// Mailbox carries the messages of running calls between their upstream
// and their client. While a call runs, its upstream may send
// notifications for the client and ask the client questions. The wire
// layer renders each message as its client must see it; the Mailbox
// queues it in the task's mailbox in the store, where the client's
// streams (on any replica) drain it, so each message is delivered once.
// A question is also recorded as pending for the owner under the id the
// client answers, so the answer, posted to any replica, lands in the
// task's inbox; the runner's supervisor takes it from there (Upstream.
// Answers, TakeAnswers).
//
// The call's side: Progress, Enqueue, Ask, InputRequired, TakeAnswers,
// Answered, Working, AddInputRequest; AskFor for a question the upstream
// asked outside any call's answer (OnlyTaskOn finds its task). The
// client's side: Answer, WatchOwner, DeliverQueued, DeliverAllQueued,
// Listen, Redeliver, InputRequests, AnswerInputs.
//
// New makes it (Engine.Mail). It is safe for concurrent use, except that
// Progress is called only from the goroutine reading the call's answer.
type Mailbox struct {
	store    taskstore.Store
	queueMax int // Config.QueueMax
	// logAt is the engine's logger for a line written for the work of ctx.
	logAt func(ctx context.Context) *zerolog.Logger
	// changed wakes the local waiters (Poll's holds) of owner's task
	// taskID, running here or not, after its status changed.
	changed func(owner, taskID string)
}

// statusThrottle is the least time between two progress-driven
// statusMessage updates of one task.
const statusThrottle = 250 * time.Millisecond

// Progress makes text the task's statusMessage, at most once per
// statusThrottle (later calls within it are dropped), so a client that
// only polls sees the call's progress. Call it from the goroutine reading
// the call's answer only.
func (mb *Mailbox) Progress(ctx context.Context, j *Job, text string) {
	if text == "" || time.Since(j.lastStatus) < statusThrottle {
		return
	}
	j.lastStatus = time.Now()
	_, _ = mb.store.Update(ctx, j.Task.Owner, j.Task.ID, "", text)
}

// Enqueue queues msg, of kind, for the task's client and wakes the task's
// local waiters. method names the message in log lines. Over QueueMax the
// store drops the oldest progress, then other notifications (never
// questions); nothing is queued after the task's end.
func (mb *Mailbox) Enqueue(ctx context.Context, j *Job, kind taskstore.MessageKind, msg []byte, method string) {
	dropped, err := mb.store.Enqueue(ctx, j.Task.Owner, j.Task.ID, kind, msg, mb.queueMax)
	if !errors.Is(err, taskstore.ErrTerminal) && !errors.Is(err, taskstore.ErrNotFound) {
		j.noteQueued() // also when unsure (a timeout): a needless drain is harmless
	}
	switch {
	case err == nil && dropped > 0:
		j.Log.Warn().Int("dropped", dropped).Int("queue_max", mb.queueMax).
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
func (mb *Mailbox) Ask(ctx context.Context, j *Job, session, qid, method string) error {
	if err := mb.store.AddPending(ctx, j.Task.Owner, session, qid, j.Task.ID); err != nil {
		return err
	}
	j.pending.Add(1)
	mb.InputRequired(ctx, j, method)
	return nil
}

// InputRequired moves the task to input_required with a statusMessage
// naming method (the question's).
func (mb *Mailbox) InputRequired(ctx context.Context, j *Job, method string) {
	if _, err := mb.store.Update(ctx, j.Task.Owner, j.Task.ID, taskstore.InputRequired, "waiting for the client to answer "+method); err != nil {
		j.Log.Debug().Err(err).Msg("moving the task to input_required failed")
	}
	j.noteChanged()
}

// TakeAnswers takes the client's answers waiting in the task's inbox
// (each as the client posted it); nil when there are none or the store
// failed.
func (mb *Mailbox) TakeAnswers(ctx context.Context, j *Job) [][]byte {
	answers, err := mb.store.TakeAnswers(ctx, j.Task.Owner, j.Task.ID)
	if err != nil {
		return nil
	}
	return answers
}

// Answered records that n questions recorded by Ask were answered; once
// none is pending the task returns to working.
func (mb *Mailbox) Answered(ctx context.Context, j *Job, n int) {
	for range n {
		if j.pending.Add(-1) < 0 {
			j.pending.Store(0)
		}
	}
	if j.pending.Load() <= 0 {
		mb.Working(ctx, j)
	}
}

// Working returns the task to working after its questions were answered.
func (mb *Mailbox) Working(ctx context.Context, j *Job) {
	_, _ = mb.store.Update(ctx, j.Task.Owner, j.Task.ID, taskstore.Working, "input received; working")
}

// Answer routes a client's answer msg to question qid, pending for owner
// in mailbox session, into its task's inbox, and returns the task's id;
// taskstore.ErrNotFound when no such question is pending (answered
// before, its task ended, or not this owner's).
func (mb *Mailbox) Answer(ctx context.Context, owner, session, qid string, msg []byte) (string, error) {
	return mb.store.Answer(ctx, owner, session, qid, msg)
}

// Redeliver puts question msg (qid, of owner's task taskID, asked in
// mailbox session) back in its task's queue when it is still pending: the
// stream that carried it ended before the client answered. It reports
// whether it was queued again.
func (mb *Mailbox) Redeliver(owner, session, taskID, qid string, msg []byte) bool {
	ctx := context.Background()
	if _, err := mb.store.PendingTask(ctx, owner, session, qid); err != nil {
		return false
	}
	return mb.store.Requeue(ctx, owner, taskID, []taskstore.Message{{Kind: taskstore.KindRequest, Data: msg}}) == nil
}

// Listen marks a stream of owner's task taskID as the one to deliver its
// messages for ttl (0 clears the mark), so the runner wakes only that
// stream. Failures are ignored: the owner's other streams deliver then.
func (mb *Mailbox) Listen(owner, taskID string, ttl time.Duration) {
	_ = mb.store.SetListening(context.Background(), owner, taskID, ttl)
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
func (mb *Mailbox) WatchOwner(ctx context.Context, owner, group string) (*OwnerMail, error) {
	events, stop, err := mb.store.WatchSession(ctx, owner, group)
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
func (mb *Mailbox) DeliverQueued(ctx context.Context, owner, taskID string, deliver func(taskstore.Message) bool) bool {
	msgs, err := mb.store.Drain(ctx, owner, taskID)
	if err != nil {
		return true
	}
	for i, m := range msgs {
		if !deliver(m) {
			_ = mb.store.Requeue(context.Background(), owner, taskID, msgs[i:])
			return false
		}
	}
	return true
}

// DeliverAllQueued is DeliverQueued for every task of owner with messages
// queued for group; deliver gets the task's id with each message.
func (mb *Mailbox) DeliverAllQueued(ctx context.Context, owner, group string, deliver func(taskID string, m taskstore.Message) bool) bool {
	ids, err := mb.store.QueuedTasks(ctx, owner, group)
	if err != nil {
		return true
	}
	for _, id := range ids {
		if !mb.DeliverQueued(ctx, owner, id, func(m taskstore.Message) bool { return deliver(id, m) }) {
			return false
		}
	}
	return true
}

// OnlyTaskOn returns the task call running on upstream session sess when
// exactly one runs there (ok false when none or several do, or the store
// failed).
func (mb *Mailbox) OnlyTaskOn(ctx context.Context, sess string) (taskID string, ok bool) {
	rec, err := mb.store.Session(ctx, sess)
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
func (mb *Mailbox) AskFor(ctx context.Context, owner, session, taskID, qid, method string, msg []byte) error {
	if err := mb.store.AddPending(ctx, owner, session, qid, taskID); err != nil {
		return fmt.Errorf("%w: %w", ErrNotPending, err)
	}
	if _, err := mb.store.Update(ctx, owner, taskID, taskstore.InputRequired, "waiting for the client to answer "+method); err != nil {
		mb.logAt(ctx).Debug().Err(err).Msg("moving the task to input_required failed")
	}
	if mb.changed != nil {
		mb.changed(owner, taskID)
	}
	_, err := mb.store.Enqueue(ctx, owner, taskID, taskstore.KindRequest, msg, mb.queueMax)
	return err
}

// AddInputRequest records req, an open question of j's call under key,
// in the store, where any replica reads it (InputRequests) and takes its
// answer (AnswerInputs).
func (mb *Mailbox) AddInputRequest(ctx context.Context, j *Job, key string, req []byte) error {
	return mb.store.AddInputRequest(ctx, j.Task.Owner, j.Task.ID, key, req)
}

// InputRequests returns the open questions recorded for owner's task
// taskID.
func (mb *Mailbox) InputRequests(ctx context.Context, owner, taskID string) ([]taskstore.InputRequest, error) {
	return mb.store.InputRequests(ctx, owner, taskID)
}

// AnswerInputs answers open questions of owner's task taskID: each answer
// whose key is open is taken (into the task's inbox, for its runner) and
// its question closed. It returns the keys taken and how many questions
// are still open; taskstore.ErrTerminal for a finished task.
func (mb *Mailbox) AnswerInputs(ctx context.Context, owner, taskID string, answers []taskstore.InputAnswer) (taken []string, open int, err error) {
	return mb.store.AnswerInputs(ctx, owner, taskID, answers)
}
