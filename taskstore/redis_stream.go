package taskstore

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Task streams. While a task's upstream call runs, the messages the
// upstream sends (notifications, server-to-client requests) wait in the
// task's outbound queue until one stream drains them: the task's
// tasks/result stream if one listens (SetListening), else the session's
// GET stream, woken by a SessionEvent 'q'. Drain takes the whole queue in
// one script, so a message reaches at most one stream (H-11); a stream
// that fails to write puts the rest back with Requeue. The client's
// responses to server-to-client requests come back through AddPending,
// Answer and the task's inbox (TakeAnswers), all owner-slot scripts, so
// any replica can serve any step.

// Enqueue implements Store with enqueueCmd, one round trip. msg is copied
// into Redis as is; kind must be KindProgress, KindNotification or
// KindRequest.
func (s *Redis) Enqueue(ctx context.Context, owner, id string, kind MessageKind, msg []byte, max int) (int, error) {
	s.lazy.flushTask(id, s.recordLazy) // a call with messages is recorded on its session first
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	var k string // the element's first byte, as a constant (no allocation)
	switch kind {
	case KindProgress:
		k = "p"
	case KindNotification:
		k = "n"
	case KindRequest:
		k = "r"
	default:
		return 0, fmt.Errorf("taskstore: enqueue %s: message kind %q", id, byte(kind))
	}
	if !validOwner(owner) || !validID(id) {
		return 0, ErrNotFound
	}
	if max < 0 {
		max = 0
	}
	cmd := s.run(ctx, enqueueCmd,
		[]string{s.k.task(owner, id), s.k.queue(owner, id), s.k.listening(owner, id)},
		s.nowMS(), k, msg, max, s.k.events(owner, id),
		s.k.sessQueuedPrefix(owner), s.k.sessEventsPrefix(owner), id, indexSlack.Milliseconds(), s.k.sessListeners(owner))
	code, vals, err := scriptReply(cmd)
	if err != nil {
		return 0, wrapErr("enqueue", id, err)
	}
	switch code {
	case codeOK:
		if len(vals) != 1 {
			return 0, fmt.Errorf("taskstore: enqueue %s: bad script reply", id)
		}
		n, _ := vals[0].(int64)
		return int(n), nil
	case codeNotFound:
		return 0, ErrNotFound
	case codeTerminal:
		return 0, ErrTerminal
	default:
		return 0, fmt.Errorf("taskstore: enqueue %s: unexpected script code %d", id, code)
	}
}

// Drain implements Store with drainCmd, one round trip. A missing task
// (or one never enqueued to) has an empty queue: nil, nil.
func (s *Redis) Drain(ctx context.Context, owner, id string) ([]Message, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validOwner(owner) || !validID(id) {
		return nil, ErrNotFound
	}
	vals, err := s.run(ctx, drainCmd, []string{s.k.queue(owner, id), s.k.task(owner, id)},
		s.k.sessQueuedPrefix(owner), id).Slice()
	if err != nil {
		return nil, wrapErr("drain", id, err)
	}
	return queued("drain", id, vals)
}

// Requeue implements Store with requeueCmd, one round trip (none when msgs
// is empty). The listeners are woken as by Enqueue. The queue bound is not
// applied. Each message keeps the kind it was queued with. ErrTerminal if
// the task is terminal (its queue was deleted, T-50), ErrNotFound if
// missing; a message of an unknown kind is an error.
func (s *Redis) Requeue(ctx context.Context, owner, id string, msgs []Message) error {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validOwner(owner) || !validID(id) {
		return ErrNotFound
	}
	if len(msgs) == 0 {
		return nil
	}
	args := make([]any, 0, 7+len(msgs))
	args = append(args, s.nowMS(), s.k.events(owner, id), s.k.sessQueuedPrefix(owner),
		s.k.sessEventsPrefix(owner), id, indexSlack.Milliseconds(), s.k.sessListeners(owner))
	for _, m := range msgs {
		if !m.Kind.valid() {
			return fmt.Errorf("taskstore: requeue %s: message kind %q", id, byte(m.Kind))
		}
		e := make([]byte, 0, 1+len(m.Data))
		args = append(args, append(append(e, byte(m.Kind)), m.Data...))
	}
	cmd := s.run(ctx, requeueCmd,
		[]string{s.k.task(owner, id), s.k.queue(owner, id), s.k.listening(owner, id)}, args...)
	return s.codeReply("requeue", id, cmd.Int64Slice)
}

// SetListening implements Store with listenCmd, one round trip. ttl is
// capped at the task's expiry. Setting the mark on a missing task is
// ErrNotFound; clearing always succeeds, and if the queue still holds
// messages it announces them to the session (SessionEvent 'q'), so a
// tasks/result stream that closes with undelivered (requeued) messages
// hands them to the session's stream.
func (s *Redis) SetListening(ctx context.Context, owner, id string, ttl time.Duration) error {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validOwner(owner) || !validID(id) {
		return ErrNotFound
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	cmd := s.run(ctx, listenCmd,
		[]string{s.k.task(owner, id), s.k.listening(owner, id), s.k.queue(owner, id)},
		s.nowMS(), ms, s.k.sessQueuedPrefix(owner), s.k.sessEventsPrefix(owner), id, indexSlack.Milliseconds(), s.k.sessListeners(owner))
	return s.codeReply("set listening", id, cmd.Int64Slice)
}

// codeReply maps a {code} script reply: 1 ok, 0 ErrNotFound, -1 ErrTerminal.
func (s *Redis) codeReply(op, id string, result func() ([]int64, error)) error {
	r, err := result()
	if err != nil {
		return wrapErr(op, id, err)
	}
	if len(r) == 0 {
		return fmt.Errorf("taskstore: %s %s: empty script reply", op, id)
	}
	switch r[0] {
	case codeOK:
		return nil
	case codeNotFound:
		return ErrNotFound
	case codeTerminal:
		return ErrTerminal
	default:
		return fmt.Errorf("taskstore: %s %s: unexpected script code %d", op, id, r[0])
	}
}

// QueuedTasks implements Store with queuedCmd, one round trip; ids come
// sorted. Members whose queue is empty or gone are pruned. An invalid or
// empty session has no tasks.
func (s *Redis) QueuedTasks(ctx context.Context, owner, session string) ([]string, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validOwner(owner) || !validSession(session) {
		return nil, nil
	}
	ids, err := s.run(ctx, queuedCmd, []string{s.k.sessQueued(owner, session)},
		s.k.queuePrefix(owner)).StringSlice()
	if err != nil {
		return nil, wrapErr("queued tasks", "", err)
	}
	slices.Sort(ids)
	return ids, nil
}

// AddPending implements Store with addPendingCmd, one round trip. session
// is "" (a client without a session) or a valid session key; reqID is
// hashed into the key, so any raw JSON id text works. ErrNotFound if the
// task is missing, ErrTerminal if it is terminal (nothing is delivered
// after the end, so nothing can be answered).
func (s *Redis) AddPending(ctx context.Context, owner, session, reqID, id string) error {
	s.lazy.flushTask(id, s.recordLazy) // a call with messages is recorded on its session first
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if session != "" && !validSession(session) {
		return fmt.Errorf("taskstore: add pending %s: invalid session key", id)
	}
	if !validOwner(owner) || !validID(id) {
		return ErrNotFound
	}
	cmd := s.run(ctx, addPendingCmd, []string{s.k.task(owner, id), s.k.pending(owner, session, reqID)},
		s.nowMS(), id)
	return s.codeReply("add pending", id, cmd.Int64Slice)
}

// Answer implements Store with answerCmd, one round trip. An answer for a
// task that became terminal after AddPending is accepted (the task id is
// returned) and dropped; one whose task expired is ErrNotFound. A request
// is answered at most once: the entry goes with the first Answer.
func (s *Redis) Answer(ctx context.Context, owner, session, reqID string, msg []byte) (string, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validOwner(owner) || (session != "" && !validSession(session)) {
		return "", ErrNotFound
	}
	cmd := s.run(ctx, answerCmd, []string{s.k.pending(owner, session, reqID)},
		s.nowMS(), msg, s.k.taskPrefix(owner), s.k.inboxPrefix(owner), s.k.eventsPrefix(owner))
	code, vals, err := scriptReply(cmd)
	if err != nil {
		return "", wrapErr("answer", "", err)
	}
	switch code {
	case codeOK:
		id, _ := vals[0].(string)
		if len(vals) != 1 || !validID(id) {
			return "", fmt.Errorf("taskstore: answer: bad script reply")
		}
		return id, nil
	case codeNotFound:
		return "", ErrNotFound
	default:
		return "", fmt.Errorf("taskstore: answer: unexpected script code %d", code)
	}
}

// TakeAnswers implements Store with takeCmd, one round trip. A missing
// task has an empty inbox: nil, nil.
func (s *Redis) TakeAnswers(ctx context.Context, owner, id string) ([][]byte, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validOwner(owner) || !validID(id) {
		return nil, ErrNotFound
	}
	vals, err := s.run(ctx, takeCmd, []string{s.k.inbox(owner, id)}).Slice()
	if err != nil {
		return nil, wrapErr("take answers", id, err)
	}
	return messages("take answers", id, vals, 0)
}

// queued converts a queue reply: each element is the kind byte followed by
// the message. nil for an empty queue.
func queued(op, id string, vals []any) ([]Message, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make([]Message, len(vals))
	for i, v := range vals {
		e, ok := v.(string)
		if !ok || len(e) < 1 || !MessageKind(e[0]).valid() {
			return nil, fmt.Errorf("taskstore: %s %s: bad element %d", op, id, i)
		}
		out[i] = Message{Kind: MessageKind(e[0]), Data: []byte(e[1:])}
	}
	return out, nil
}

// messages converts a list reply, cutting skip leading bytes (the queue's
// kind byte) off each element. nil for an empty list.
func messages(op, id string, vals []any, skip int) ([][]byte, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make([][]byte, len(vals))
	for i, v := range vals {
		e, ok := v.(string)
		if !ok || len(e) < skip {
			return nil, fmt.Errorf("taskstore: %s %s: bad element %d", op, id, i)
		}
		out[i] = []byte(e[skip:])
	}
	return out, nil
}
