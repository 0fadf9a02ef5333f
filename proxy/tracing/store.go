package tracing

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgate/taskgate/taskstore"
)

// Store wraps a task store so that each operation whose context carries a
// recording span (a traced request, a traced task call) gets a child span
// named "taskstore {op}". Operations without one (lease recovery, the
// housekeeping loops) run unwrapped, so tracing adds no roots of their
// own. Answers that are part of the store's contract (not found, terminal,
// owner limit, session bound) do not mark the span as failed.
func (t *Tracer) Store(s taskstore.Store) taskstore.Store { return &tracedStore{Store: s, t: t} }

type tracedStore struct {
	taskstore.Store
	t *Tracer
}

var _ taskstore.Store = (*tracedStore)(nil)

// start starts op's span when ctx is traced; end must be called with the
// operation's error.
func (s *tracedStore) start(ctx context.Context, op, taskID string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	ctx, span := s.t.tr.Start(ctx, "taskstore "+op, trace.WithSpanKind(trace.SpanKindClient))
	span.SetAttributes(StoreOp.String(op))
	if taskID != "" {
		span.SetAttributes(TaskID.String(taskID))
	}
	return ctx, span
}

func end(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil && !contractAnswer(err) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(ErrorType.String(errorType(err)))
	}
	span.End()
}

func contractAnswer(err error) bool {
	for _, e := range [...]error{taskstore.ErrNotFound, taskstore.ErrTerminal, taskstore.ErrOwnerLimit,
		taskstore.ErrBadCursor, taskstore.ErrSessionBound, taskstore.ErrSessionClosing} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func errorType(err error) string {
	switch {
	case errors.Is(err, taskstore.ErrUnavailable):
		return "store_unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "store_error"
}

func (s *tracedStore) Create(ctx context.Context, t *taskstore.Task, opt taskstore.CreateOptions) error {
	ctx, sp := s.start(ctx, "create", t.ID)
	err := s.Store.Create(ctx, t, opt)
	end(sp, err)
	return err
}

func (s *tracedStore) Get(ctx context.Context, owner, id string) (*taskstore.Task, error) {
	ctx, sp := s.start(ctx, "get", id)
	t, err := s.Store.Get(ctx, owner, id)
	end(sp, err)
	return t, err
}

func (s *tracedStore) Update(ctx context.Context, owner, id string, st taskstore.Status, msg string) (*taskstore.Task, error) {
	ctx, sp := s.start(ctx, "update", id)
	t, err := s.Store.Update(ctx, owner, id, st, msg)
	end(sp, err)
	return t, err
}

func (s *tracedStore) Finish(ctx context.Context, owner, id string, st taskstore.Status, msg string, out taskstore.Outcome) (*taskstore.Task, error) {
	ctx, sp := s.start(ctx, "finish", id)
	t, err := s.Store.Finish(ctx, owner, id, st, msg, out)
	end(sp, err)
	return t, err
}

func (s *tracedStore) Cancel(ctx context.Context, owner, id, msg string) (*taskstore.Task, error) {
	ctx, sp := s.start(ctx, "cancel", id)
	t, err := s.Store.Cancel(ctx, owner, id, msg)
	end(sp, err)
	return t, err
}

func (s *tracedStore) Outcome(ctx context.Context, owner, id string) (*taskstore.Task, *taskstore.Outcome, error) {
	ctx, sp := s.start(ctx, "outcome", id)
	t, out, err := s.Store.Outcome(ctx, owner, id)
	end(sp, err)
	return t, out, err
}

func (s *tracedStore) List(ctx context.Context, owner, cursor string, limit int) ([]taskstore.Task, string, error) {
	ctx, sp := s.start(ctx, "list", "")
	ts, next, err := s.Store.List(ctx, owner, cursor, limit)
	end(sp, err)
	return ts, next, err
}

func (s *tracedStore) Renew(ctx context.Context, owner, id string, lease time.Duration) (taskstore.Status, error) {
	ctx, sp := s.start(ctx, "renew", id)
	st, err := s.Store.Renew(ctx, owner, id, lease)
	end(sp, err)
	return st, err
}

func (s *tracedStore) Watch(ctx context.Context, owner, id string) (<-chan struct{}, func(), error) {
	sctx, sp := s.start(ctx, "watch", id)
	ch, stop, err := s.Store.Watch(sctx, owner, id)
	end(sp, err)
	return ch, stop, err
}

func (s *tracedStore) WatchKinds(ctx context.Context, owner, id string, kinds taskstore.EventKind) (<-chan struct{}, func(), error) {
	sctx, sp := s.start(ctx, "watch", id)
	ch, stop, err := s.Store.WatchKinds(sctx, owner, id, kinds)
	end(sp, err)
	return ch, stop, err
}

func (s *tracedStore) Enqueue(ctx context.Context, owner, id string, kind taskstore.MessageKind, msg []byte, max int) (int, error) {
	ctx, sp := s.start(ctx, "enqueue", id)
	n, err := s.Store.Enqueue(ctx, owner, id, kind, msg, max)
	end(sp, err)
	return n, err
}

func (s *tracedStore) Drain(ctx context.Context, owner, id string) ([]taskstore.Message, error) {
	ctx, sp := s.start(ctx, "drain", id)
	msgs, err := s.Store.Drain(ctx, owner, id)
	end(sp, err)
	return msgs, err
}

func (s *tracedStore) AddPending(ctx context.Context, owner, session, reqID, id string) error {
	ctx, sp := s.start(ctx, "add_pending", id)
	err := s.Store.AddPending(ctx, owner, session, reqID, id)
	end(sp, err)
	return err
}

func (s *tracedStore) Answer(ctx context.Context, owner, session, reqID string, msg []byte) (string, error) {
	ctx, sp := s.start(ctx, "answer", "")
	id, err := s.Store.Answer(ctx, owner, session, reqID, msg)
	end(sp, err)
	return id, err
}

func (s *tracedStore) TakeAnswers(ctx context.Context, owner, id string) ([][]byte, error) {
	ctx, sp := s.start(ctx, "take_answers", id)
	a, err := s.Store.TakeAnswers(ctx, owner, id)
	end(sp, err)
	return a, err
}

func (s *tracedStore) AddInputRequest(ctx context.Context, owner, id, key string, req []byte) error {
	ctx, sp := s.start(ctx, "add_input", id)
	err := s.Store.AddInputRequest(ctx, owner, id, key, req)
	end(sp, err)
	return err
}

func (s *tracedStore) InputRequests(ctx context.Context, owner, id string) ([]taskstore.InputRequest, error) {
	ctx, sp := s.start(ctx, "inputs", id)
	r, err := s.Store.InputRequests(ctx, owner, id)
	end(sp, err)
	return r, err
}

func (s *tracedStore) AnswerInputs(ctx context.Context, owner, id string, answers []taskstore.InputAnswer) ([]string, int, error) {
	ctx, sp := s.start(ctx, "answer_inputs", id)
	taken, open, err := s.Store.AnswerInputs(ctx, owner, id, answers)
	end(sp, err)
	return taken, open, err
}

func (s *tracedStore) StartSessionTask(ctx context.Context, session, id string, until time.Time) error {
	ctx, sp := s.start(ctx, "start_session_task", id)
	err := s.Store.StartSessionTask(ctx, session, id, until)
	end(sp, err)
	return err
}

func (s *tracedStore) EndSessionTask(ctx context.Context, session, id string) (bool, error) {
	ctx, sp := s.start(ctx, "end_session_task", id)
	closeNow, err := s.Store.EndSessionTask(ctx, session, id)
	end(sp, err)
	return closeNow, err
}
