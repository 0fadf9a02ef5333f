package taskstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Inputs keep the open input requests of a task: the questions its
// upstream call asked the client and the client has not answered yet, each
// under a key the caller chose, unique for the task's life. Any replica
// can read them and answer them; an answer travels to the process running
// the call through the task's inbox (TakeAnswers), like Answer's.
type Inputs interface {
	// AddInputRequest records req (the request as the client is to see it,
	// stored verbatim) as open under key and signals the task's Watch
	// channel (EventUpdate). It expires with the task and is deleted when
	// the task ends. Recording a key again replaces its request.
	// ErrTerminal if the task is terminal, ErrNotFound if missing.
	AddInputRequest(ctx context.Context, owner, id, key string, req []byte) error
	// InputRequests returns the task's open input requests, ordered by
	// key length, then key (so "in-2" comes before "in-10"). A missing or
	// terminal task has none: nil, nil.
	InputRequests(ctx context.Context, owner, id string) ([]InputRequest, error)
	// AnswerInputs takes the answers whose key is open, atomically: those
	// keys are removed (an InputRequests right after no longer returns
	// them), each answer's Msg is appended to the task's inbox, and the
	// task's Watch channel is signalled (EventAnswer) when any was taken.
	// Answers to unknown or already answered keys are ignored. It returns
	// the keys taken and how many requests are still open.
	// ErrTerminal if the task is terminal (nothing is taken), ErrNotFound
	// if missing.
	AnswerInputs(ctx context.Context, owner, id string, answers []InputAnswer) (taken []string, open int, err error)
}

// InputRequest is one open input request of a task.
type InputRequest struct {
	Key     string
	Request []byte
}

// InputAnswer is the client's answer to the input request Key, as it is to
// reach the task's inbox.
type InputAnswer struct {
	Key string
	Msg []byte
}

// sortInputs orders requests by key length, then key.
func sortInputs(rs []InputRequest) {
	slices.SortFunc(rs, func(a, b InputRequest) int {
		if c := cmp.Compare(len(a.Key), len(b.Key)); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
}

// AddInputRequest implements Store with addInputCmd, one round trip.
func (s *Redis) AddInputRequest(ctx context.Context, owner, id, key string, req []byte) error {
	s.lazy.flushTask(id, s.recordLazy) // a call with messages is recorded on its session first
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validOwner(owner) || !validID(id) {
		return ErrNotFound
	}
	cmd := s.run(ctx, addInputCmd, []string{s.k.task(owner, id), s.k.inputs(owner, id)}, s.nowMS(), key, req, s.k.events(owner, id))
	return s.codeReply("add input request", id, cmd.Int64Slice)
}

// InputRequests implements Store with inputsCmd, one round trip.
func (s *Redis) InputRequests(ctx context.Context, owner, id string) ([]InputRequest, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validOwner(owner) || !validID(id) {
		return nil, nil
	}
	vals, err := s.run(ctx, inputsCmd, []string{s.k.task(owner, id), s.k.inputs(owner, id)}, s.nowMS()).StringSlice()
	if err != nil {
		return nil, wrapErr("input requests", id, err)
	}
	if len(vals)%2 != 0 {
		return nil, fmt.Errorf("taskstore: input requests %s: bad script reply", id)
	}
	if len(vals) == 0 {
		return nil, nil
	}
	out := make([]InputRequest, 0, len(vals)/2)
	for i := 0; i < len(vals); i += 2 {
		out = append(out, InputRequest{Key: vals[i], Request: []byte(vals[i+1])})
	}
	sortInputs(out)
	return out, nil
}

// AnswerInputs implements Store with answerInputsCmd, one round trip.
func (s *Redis) AnswerInputs(ctx context.Context, owner, id string, answers []InputAnswer) ([]string, int, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validOwner(owner) || !validID(id) {
		return nil, 0, ErrNotFound
	}
	args := make([]any, 0, 2+2*len(answers))
	args = append(args, s.nowMS(), s.k.events(owner, id))
	for _, a := range answers {
		args = append(args, a.Key, a.Msg)
	}
	cmd := s.run(ctx, answerInputsCmd,
		[]string{s.k.task(owner, id), s.k.inputs(owner, id), s.k.inbox(owner, id)}, args...)
	code, vals, err := scriptReply(cmd)
	if err != nil {
		return nil, 0, wrapErr("answer inputs", id, err)
	}
	switch code {
	case codeOK:
	case codeNotFound:
		return nil, 0, ErrNotFound
	case codeTerminal:
		return nil, 0, ErrTerminal
	default:
		return nil, 0, fmt.Errorf("taskstore: answer inputs %s: unexpected script code %d", id, code)
	}
	if len(vals) < 1 {
		return nil, 0, fmt.Errorf("taskstore: answer inputs %s: bad script reply", id)
	}
	open, ok := vals[0].(int64)
	if !ok {
		return nil, 0, fmt.Errorf("taskstore: answer inputs %s: bad script reply", id)
	}
	var taken []string
	for _, v := range vals[1:] {
		k, ok := v.(string)
		if !ok {
			return nil, 0, fmt.Errorf("taskstore: answer inputs %s: bad script reply", id)
		}
		taken = append(taken, k)
	}
	return taken, int(open), nil
}

// addInputCmd records an open input request of a live, non-terminal task
// and publishes "u" on the task's channel.
//
// KEYS[1] task hash, KEYS[2] input request hash. ARGV[1] now ms, ARGV[2]
// key, ARGV[3] request, ARGV[4] task channel.
// Returns {1} recorded, {0} missing or expired, {-1} terminal. The hash
// expires with the task.
var addInputCmd = redis.NewScript(lua(`
local now = tonumber(ARGV[1])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
redis.call("HSET", KEYS[2], ARGV[2], ARGV[3])
redis.call("PEXPIREAT", KEYS[2], ms(expiry(v)))
mark(KEYS[1], v)
redis.call("PUBLISH", ARGV[4], "u")
return {1}
`))

// inputsCmd reads the open input requests of a live, non-terminal task
// (the store's clock decides, as for Get, even where the server expires
// keys late).
//
// KEYS[1] task hash, KEYS[2] input request hash. ARGV[1] now ms.
// Returns {key1, request1, key2, ...}; {} for a missing or terminal task.
var inputsCmd = redis.NewScript(lua(`
local v = meta(KEYS[1])
if not alive(v, tonumber(ARGV[1])) or terminal(v[1]) then return {} end
return redis.call("HGETALL", KEYS[2])
`))

// answerInputsCmd takes the answers to open input requests of a live,
// non-terminal task: each open key is removed and its answer appended to
// the inbox (expiring with the task); "a" is published on the task's
// channel when any was taken.
//
// KEYS[1] task hash, KEYS[2] input request hash, KEYS[3] inbox. ARGV[1] now
// ms, ARGV[2] task channel, ARGV[3..] pairs of key and answer.
// Returns {1, open, taken keys...}, {0} missing or expired, {-1} terminal.
var answerInputsCmd = redis.NewScript(lua(`
local now = tonumber(ARGV[1])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
local out = {1, 0}
for i = 3, #ARGV - 1, 2 do
  if redis.call("HDEL", KEYS[2], ARGV[i]) == 1 then
    redis.call("RPUSH", KEYS[3], ARGV[i + 1])
    out[#out + 1] = ARGV[i]
  end
end
if #out > 2 then
  redis.call("PEXPIREAT", KEYS[3], ms(expiry(v)))
  redis.call("PUBLISH", ARGV[2], "a")
  mark(KEYS[1], v)
end
out[2] = redis.call("HLEN", KEYS[2])
return out
`))

// AddInputRequest implements Store like Redis.AddInputRequest. req is
// copied.
func (e *Embedded) AddInputRequest(_ context.Context, owner, id, key string, req []byte) error {
	if !validOwner(owner) || !validID(id) {
		return ErrNotFound
	}
	sh, _, t, _, err := e.openTask(owner, id, true)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if t.inputs == nil {
		t.inputs = map[string][]byte{}
	}
	t.inputs[key] = append([]byte(nil), req...)
	sh.publish(t, EventUpdate)
	return nil
}

// InputRequests implements Store like Redis.InputRequests. The returned
// requests are the caller's.
func (e *Embedded) InputRequests(_ context.Context, owner, id string) ([]InputRequest, error) {
	if !validOwner(owner) || !validID(id) {
		return nil, nil
	}
	if e.d.closed.Load() {
		return nil, errStoreClosed
	}
	sh, o := e.lock(owner)
	defer sh.mu.Unlock()
	t := find(o, id, e.nowMS())
	if t == nil || t.terminal() || len(t.inputs) == 0 {
		return nil, nil
	}
	out := make([]InputRequest, 0, len(t.inputs))
	for k, v := range t.inputs {
		out = append(out, InputRequest{Key: k, Request: append([]byte(nil), v...)})
	}
	sortInputs(out)
	return out, nil
}

// AnswerInputs implements Store like Redis.AnswerInputs. The answers are
// copied.
func (e *Embedded) AnswerInputs(_ context.Context, owner, id string, answers []InputAnswer) ([]string, int, error) {
	if !validOwner(owner) || !validID(id) {
		return nil, 0, ErrNotFound
	}
	sh, _, t, _, err := e.openTask(owner, id, true)
	if err != nil {
		return nil, 0, err
	}
	defer sh.mu.Unlock()
	var taken []string
	for _, a := range answers {
		if _, ok := t.inputs[a.Key]; !ok {
			continue
		}
		delete(t.inputs, a.Key)
		t.inbox = append(t.inbox, append([]byte(nil), a.Msg...))
		taken = append(taken, a.Key)
	}
	if len(taken) > 0 {
		sh.publish(t, EventAnswer)
	}
	return taken, len(t.inputs), nil
}
