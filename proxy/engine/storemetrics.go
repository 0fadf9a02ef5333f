package engine

import (
	"context"
	"errors"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// meteredStore reports the duration of the task store's main operations
// to Hooks.StoreOp, and whether each failed. Answers that are part of the
// contract (not found, terminal, owner limit, bad cursor, session bound
// or closing) are not failures. Other operations pass through unmetered.
type meteredStore struct {
	taskstore.Store
	obs func(op string, d time.Duration, failed bool)
}

func (s *meteredStore) done(op string, start time.Time, err error) {
	failed := err != nil && !errors.Is(err, taskstore.ErrNotFound) && !errors.Is(err, taskstore.ErrTerminal) &&
		!errors.Is(err, taskstore.ErrOwnerLimit) && !errors.Is(err, taskstore.ErrBadCursor) &&
		!errors.Is(err, taskstore.ErrSessionBound) && !errors.Is(err, taskstore.ErrSessionClosing)
	s.obs(op, time.Since(start), failed)
}

func (s *meteredStore) Create(ctx context.Context, t *taskstore.Task, opt taskstore.CreateOptions) error {
	start := time.Now()
	err := s.Store.Create(ctx, t, opt)
	s.done("create", start, err)
	return err
}

func (s *meteredStore) Get(ctx context.Context, owner, id string) (*taskstore.Task, error) {
	start := time.Now()
	t, err := s.Store.Get(ctx, owner, id)
	s.done("get", start, err)
	return t, err
}

func (s *meteredStore) Finish(ctx context.Context, owner, id string, st taskstore.Status, msg string, out taskstore.Outcome) (*taskstore.Task, error) {
	start := time.Now()
	t, err := s.Store.Finish(ctx, owner, id, st, msg, out)
	s.done("finish", start, err)
	return t, err
}

func (s *meteredStore) Cancel(ctx context.Context, owner, id, msg string) (*taskstore.Task, error) {
	start := time.Now()
	t, err := s.Store.Cancel(ctx, owner, id, msg)
	s.done("cancel", start, err)
	return t, err
}

func (s *meteredStore) Outcome(ctx context.Context, owner, id string) (*taskstore.Task, *taskstore.Outcome, error) {
	start := time.Now()
	t, out, err := s.Store.Outcome(ctx, owner, id)
	s.done("outcome", start, err)
	return t, out, err
}

func (s *meteredStore) List(ctx context.Context, owner, cursor string, limit int) ([]taskstore.Task, string, error) {
	start := time.Now()
	ts, next, err := s.Store.List(ctx, owner, cursor, limit)
	s.done("list", start, err)
	return ts, next, err
}

func (s *meteredStore) Renew(ctx context.Context, owner, id string, lease time.Duration) (taskstore.Status, error) {
	start := time.Now()
	st, err := s.Store.Renew(ctx, owner, id, lease)
	s.done("renew", start, err)
	return st, err
}

func (s *meteredStore) Recover(ctx context.Context, skew time.Duration, msg string) ([]taskstore.Task, error) {
	start := time.Now()
	ts, err := s.Store.Recover(ctx, skew, msg)
	s.done("recover", start, err)
	return ts, err
}

func (s *meteredStore) Enqueue(ctx context.Context, owner, id string, kind taskstore.MessageKind, msg []byte, max int) (int, error) {
	start := time.Now()
	n, err := s.Store.Enqueue(ctx, owner, id, kind, msg, max)
	s.done("enqueue", start, err)
	return n, err
}

func (s *meteredStore) Drain(ctx context.Context, owner, id string) ([]taskstore.Message, error) {
	start := time.Now()
	msgs, err := s.Store.Drain(ctx, owner, id)
	s.done("drain", start, err)
	return msgs, err
}

func (s *meteredStore) Answer(ctx context.Context, owner, session, reqID string, msg []byte) (string, error) {
	start := time.Now()
	id, err := s.Store.Answer(ctx, owner, session, reqID, msg)
	s.done("answer", start, err)
	return id, err
}

func (s *meteredStore) AddInputRequest(ctx context.Context, owner, id, key string, req []byte) error {
	start := time.Now()
	err := s.Store.AddInputRequest(ctx, owner, id, key, req)
	s.done("add_input", start, err)
	return err
}

func (s *meteredStore) InputRequests(ctx context.Context, owner, id string) ([]taskstore.InputRequest, error) {
	start := time.Now()
	reqs, err := s.Store.InputRequests(ctx, owner, id)
	s.done("inputs", start, err)
	return reqs, err
}

func (s *meteredStore) AnswerInputs(ctx context.Context, owner, id string, answers []taskstore.InputAnswer) ([]string, int, error) {
	start := time.Now()
	taken, open, err := s.Store.AnswerInputs(ctx, owner, id, answers)
	s.done("answer_inputs", start, err)
	return taken, open, err
}
