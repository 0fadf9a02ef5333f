package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// Large outcomes are kept out of the task hash. A reply cannot be routed
// by its size before it is read, and Outcome's HMGET runs in a batch with
// other replicas' small reads (readBatcher): one 8 MiB result in the hash
// would hold up every reply pipelined behind it. So Finish stores an
// outcome of spillMin bytes or more under its own key P:{owner}:res:<id>
// (SET PXAT the task's expiry, alone on a connection of its own:
// readBatcher.direct) and gives terminateCmd the marker spilledRaw instead;
// Outcome finds the marker in its batched HMGET and reads the key the
// same way. Small outcomes, nearly all of them, cost nothing more; a large
// one costs an HMGET and a SET at Finish and a GET at Outcome.
const spillMin = largePayload

// spilledRaw is the outcome stored in the task hash for a spilled one: a
// NUL byte starts no JSON text, so no real outcome equals it.
const spilledRaw = "\x00spilled"

// spill stores raw under the task's spilled key, expiring with the task,
// and returns the marker to store in its place. A missing or terminal task
// is ErrNotFound or ErrTerminal, as Finish would answer. The caller holds
// a lane (readBatcher.lane).
func (s *Redis) spill(ctx context.Context, owner, id string, raw []byte) ([]byte, error) {
	t, err := s.Get(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if t.Status.Terminal() {
		return nil, ErrTerminal
	}
	cmd := redis.NewStatusCmd(ctx, "set", s.k.spilled(owner, id), raw, "pxat", t.ExpiresAt().UnixMilli())
	if err := s.reads.alone(ctx, cmd); err != nil {
		return nil, wrapErr("finish", id, err)
	}
	return []byte(spilledRaw), nil
}

// unspill reads a spilled outcome (Outcome found the marker).
func (s *Redis) unspill(ctx context.Context, owner, id string) (json.RawMessage, error) {
	cmd := redis.NewStringCmd(ctx, "get", s.k.spilled(owner, id))
	if err := s.reads.direct(ctx, cmd); err != nil {
		return nil, wrapErr("outcome", id, err) // redis.Nil: expired with the task
	}
	// The reply is a string of megabytes that nothing else holds, and an
	// Outcome's Raw is never modified (Store.Outcome): its bytes are
	// shared rather than copied.
	v := cmd.Val()
	return json.RawMessage(unsafe.Slice(unsafe.StringData(v), len(v))), nil
}

// dropSpilled deletes a spilled outcome that Finish could not record (the
// task ended otherwise meanwhile); best effort, it expires with the task.
func (s *Redis) dropSpilled(ctx context.Context, owner, id string, err error) {
	if errors.Is(err, ErrTerminal) || errors.Is(err, ErrNotFound) {
		_ = s.rdb.Del(ctx, s.k.spilled(owner, id)).Err()
	}
}

// finishSpilled is Finish for an outcome of spillMin bytes or more. It
// takes a lane first, so the wait for one does not eat the time of the
// operations that follow (see readBatcher.lane).
func (s *Redis) finishSpilled(ctx context.Context, owner, id string, st Status, msg string, out Outcome) (*Task, error) {
	ctx, release, err := s.reads.lane(ctx)
	if err != nil {
		return nil, wrapErr("finish", id, err)
	}
	defer release()
	raw, err := s.spill(ctx, owner, id, out.Raw)
	if err != nil {
		return nil, err
	}
	t, err := s.terminate(ctx, "finish", owner, id, st, msg, Outcome{Kind: out.Kind, Raw: raw})
	if err != nil {
		s.dropSpilled(ctx, owner, id, err)
	}
	return t, err
}
