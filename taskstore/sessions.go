package taskstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Session records. A client's MCP session with the upstream outlives the
// client's own view of it while tasks created on it still run: the proxy
// binds each upstream session to the credential that initialized it, counts
// the task calls running on it, and, when the client ends the session while
// calls still run, marks it closing and ends it upstream only after the last
// of them ended. One record per session, one key:
//
//	P:srec:<session>   hash  cred      credential the session is bound to
//	                         closing   "1" once the client ended the session
//	                         t:<id>    deadline (unix ms) of a task call running on it
//
// <session> is the caller's digest of the session id (validSession). The key
// expires at the latest of the binding's ttl and the deadlines of its calls,
// so a record whose calls vanished (their runner died) goes on its own.

// Errors of the session records.
var (
	// ErrSessionBound: the session is bound to another credential.
	ErrSessionBound = errors.New("taskstore: session bound to another credential")
	// ErrSessionClosing: the client ended the session; no new calls start on it.
	ErrSessionClosing = errors.New("taskstore: session is closing")
)

// SessionRecord is what the store knows of one upstream session.
type SessionRecord struct {
	// Credential is what BindSession recorded ("" when the record exists
	// only because a task call was started on an unbound session).
	Credential string
	// Closing is true once CloseSession deferred the session's end.
	Closing bool
	// Tasks are the ids of the task calls running on the session whose
	// deadline has not passed, sorted.
	Tasks []string
}

// SessionRecords is the part of the store that keeps session records. All
// methods are one round trip; an invalid session key is ErrNotFound for
// reads and an error for writes.
type SessionRecords interface {
	// BindSession binds session to credential for at least ttl (a binding
	// to the same credential is extended). ErrSessionBound when the
	// session is bound to another credential; nothing changes then.
	BindSession(ctx context.Context, session, credential string, ttl time.Duration) error
	// Session returns the session's record, ErrNotFound when there is none.
	Session(ctx context.Context, session string) (SessionRecord, error)
	// StartSessionTask records that task call id runs on session until at
	// most until (its policy timeout or expiry). ErrSessionClosing when the
	// session is closing; nothing is recorded then.
	StartSessionTask(ctx context.Context, session, id string, until time.Time) error
	// EndSessionTask removes task call id from the session. closeNow is
	// true, once, when the session is closing and no call runs on it any
	// more: the record is deleted and the caller ends the session upstream.
	EndSessionTask(ctx context.Context, session, id string) (closeNow bool, err error)
	// CloseSession ends the session for the client. When calls still run
	// on it, it is marked closing and deferred is true (EndSessionTask
	// reports when to end it upstream); else the record is deleted and the
	// caller ends the session upstream at once.
	CloseSession(ctx context.Context, session string) (deferred bool, err error)
	// PendingTask returns the task a pending server-to-client request
	// (AddPending) belongs to, ErrNotFound when it is not pending (answered,
	// or its task expired).
	PendingTask(ctx context.Context, owner, session, reqID string) (string, error)
}

// Fields of a session record.
const (
	fSessCred    = "cred"
	fSessClosing = "closing"
	fSessTask    = "t:" // prefix of a running call's field
)

// luaSessionPrelude is shared by the session scripts:
//   - prune(k, now): delete the "t:" fields whose deadline passed; returns
//     the number of calls left and the latest deadline
//   - keep(k, at, now): make k live at least until unix ms at
var luaSessionPrelude = `
local function prune(k, now)
  local all = redis.call("HGETALL", k)
  local n, last = 0, 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == "t:" then
      local d = tonumber(all[i + 1])
      if d <= now then
        redis.call("HDEL", k, all[i])
      else
        n = n + 1
        if d > last then last = d end
      end
    end
  end
  return n, last
end
local function keep(k, at, now)
  local p = redis.call("PTTL", k)
  if p < 0 or now + p < at then redis.call("PEXPIREAT", k, string.format("%d", at)) end
end
`

// bindSessionCmd binds a session to a credential.
//
// KEYS[1] P:srec:<session>. ARGV[1] credential, ARGV[2] keep-until ms,
// ARGV[3] now ms.
// Returns 1 bound, -1 bound to another credential (nothing changed).
var bindSessionCmd = redis.NewScript(luaSessionPrelude + `
local cur = redis.call("HGET", KEYS[1], "cred")
if cur and cur ~= "" and cur ~= ARGV[1] then return -1 end
redis.call("HSET", KEYS[1], "cred", ARGV[1])
keep(KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
return 1
`)

// startSessionTaskCmd records a running call on a session that is not
// closing.
//
// KEYS[1] P:srec:<session>. ARGV[1] field t:<id>, ARGV[2] deadline ms,
// ARGV[3] now ms, ARGV[4] keep-until ms (deadline + slack).
// Returns 1 recorded, -1 closing.
var startSessionTaskCmd = redis.NewScript(luaSessionPrelude + `
if redis.call("HGET", KEYS[1], "closing") == "1" then return -1 end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
keep(KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[3]))
return 1
`)

// endSessionTaskCmd removes a running call and reports whether a closing
// session has no call left (then the record is deleted).
//
// KEYS[1] P:srec:<session>. ARGV[1] field t:<id>, ARGV[2] now ms.
// Returns 1 close the session now, 0 not.
var endSessionTaskCmd = redis.NewScript(luaSessionPrelude + `
if redis.call("HDEL", KEYS[1], ARGV[1]) == 0 then return 0 end
local n = prune(KEYS[1], tonumber(ARGV[2]))
if n == 0 and redis.call("HGET", KEYS[1], "closing") == "1" then
  redis.call("DEL", KEYS[1])
  return 1
end
return 0
`)

// closeSessionCmd ends a session for the client: marked closing while
// calls run on it, else deleted.
//
// KEYS[1] P:srec:<session>. ARGV[1] now ms, ARGV[2] slack ms.
// Returns 1 deferred (marked closing), 0 end it now (record deleted or none).
var closeSessionCmd = redis.NewScript(luaSessionPrelude + `
local now = tonumber(ARGV[1])
local n, last = prune(KEYS[1], now)
if n > 0 then
  redis.call("HSET", KEYS[1], "closing", "1")
  keep(KEYS[1], last + tonumber(ARGV[2]), now)
  return 1
end
redis.call("DEL", KEYS[1])
return 0
`)

// BindSession implements SessionRecords with bindSessionCmd.
func (s *Redis) BindSession(ctx context.Context, session, credential string, ttl time.Duration) error {
	if !validSession(session) {
		return errors.New("taskstore: bind session: invalid session key")
	}
	if ttl <= 0 {
		ttl = s.sTTL
	}
	now := s.nowMS()
	n, err := bindSessionCmd.Run(ctx, s.rdb, []string{s.k.sessionRecord(session)},
		credential, now+ttl.Milliseconds(), now).Int64()
	switch {
	case err != nil:
		return wrapErr("bind session", "", err)
	case n == -1:
		return ErrSessionBound
	case n != 1:
		return fmt.Errorf("taskstore: bind session: unexpected script code %d", n)
	}
	return nil
}

// Session implements SessionRecords with one HGETALL.
func (s *Redis) Session(ctx context.Context, session string) (SessionRecord, error) {
	if !validSession(session) {
		return SessionRecord{}, ErrNotFound
	}
	all, err := s.rdb.HGetAll(ctx, s.k.sessionRecord(session)).Result()
	if err != nil {
		return SessionRecord{}, wrapErr("session", "", err)
	}
	if len(all) == 0 {
		return SessionRecord{}, ErrNotFound
	}
	now := s.nowMS()
	rec := SessionRecord{Credential: all[fSessCred], Closing: all[fSessClosing] == "1"}
	for f, v := range all {
		id, ok := strings.CutPrefix(f, fSessTask)
		if !ok {
			continue
		}
		if d, err := strconv.ParseInt(v, 10, 64); err == nil && d > now {
			rec.Tasks = append(rec.Tasks, id)
		}
	}
	slices.Sort(rec.Tasks)
	return rec, nil
}

// StartSessionTask implements SessionRecords with startSessionTaskCmd, at
// once or, with Config.SessionTaskDelay, once the call has run that long
// (then it returns nil at once).
func (s *Redis) StartSessionTask(ctx context.Context, session, id string, until time.Time) error {
	if !validSession(session) || !validID(id) {
		return errors.New("taskstore: start session task: invalid session key or id")
	}
	if s.lazy.delay > 0 && s.lazy.add(session, id, until.UnixMilli(), s.recordLazy) {
		return nil
	}
	return s.startSessionTask(ctx, session, id, until.UnixMilli())
}

func (s *Redis) startSessionTask(ctx context.Context, session, id string, until int64) error {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	n, err := startSessionTaskCmd.Run(ctx, s.rdb, []string{s.k.sessionRecord(session)},
		fSessTask+id, until, s.nowMS(), until+indexSlack.Milliseconds()).Int64()
	switch {
	case err != nil:
		return wrapErr("start session task", id, err)
	case n == -1:
		return ErrSessionClosing
	case n != 1:
		return fmt.Errorf("taskstore: start session task %s: unexpected script code %d", id, n)
	}
	return nil
}

// recordLazy records a delayed call (its timer fired, or CloseSession
// needs it).
func (s *Redis) recordLazy(c *lazyCall) {
	err := s.startSessionTask(context.Background(), c.session, c.id, c.until)
	s.lazy.recorded(c, err == nil)
}

// EndSessionTask implements SessionRecords with endSessionTaskCmd; a call
// still waiting for its delay (Config.SessionTaskDelay) was never
// recorded and ends without Redis.
func (s *Redis) EndSessionTask(ctx context.Context, session, id string) (bool, error) {
	if !validSession(session) || !validID(id) {
		return false, nil
	}
	if s.lazy.delay > 0 && !s.lazy.end(session, id) {
		return false, nil
	}
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	n, err := endSessionTaskCmd.Run(ctx, s.rdb, []string{s.k.sessionRecord(session)},
		fSessTask+id, s.nowMS()).Int64()
	if err != nil {
		return false, wrapErr("end session task", id, err)
	}
	return n == 1, nil
}

// CloseSession implements SessionRecords with closeSessionCmd, after
// recording this store's delayed calls of the session. An unknown or
// invalid session has no calls: deferred is false.
func (s *Redis) CloseSession(ctx context.Context, session string) (bool, error) {
	if !validSession(session) {
		return false, nil
	}
	if s.lazy.delay > 0 {
		s.lazy.flush(session, s.recordLazy)
	}
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	n, err := closeSessionCmd.Run(ctx, s.rdb, []string{s.k.sessionRecord(session)},
		s.nowMS(), indexSlack.Milliseconds()).Int64()
	if err != nil {
		return false, wrapErr("close session", "", err)
	}
	return n == 1, nil
}

// lazyCalls are the task calls of a Redis store that StartSessionTask has
// not recorded yet (Config.SessionTaskDelay). Safe for concurrent use.
type lazyCalls struct {
	delay  time.Duration
	mu     sync.Mutex
	calls  map[string]map[string]*lazyCall // session -> id -> call
	byID   map[string]*lazyCall            // id -> call (one session per task call)
	closed bool
	wg     sync.WaitGroup // recordings in flight
}

// lazyCall is one call; its fields after until are guarded by lazyCalls.mu.
type lazyCall struct {
	session, id string
	until       int64
	timer       *time.Timer
	state       lazyState
	done        chan struct{} // closed when a recording finished
}

type lazyState uint8

const (
	lazyPending   lazyState = iota // waiting for its delay
	lazyRecording                  // being written
	lazyRecorded                   // in Redis
	lazyRefused                    // the write failed or the session was closing
)

// add registers a delayed call whose timer calls record; false when the
// store is closed (record it at once).
func (l *lazyCalls) add(session, id string, until int64, record func(*lazyCall)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	if l.calls == nil {
		l.calls = map[string]map[string]*lazyCall{}
	}
	m := l.calls[session]
	if m == nil {
		m = map[string]*lazyCall{}
		l.calls[session] = m
	}
	c := &lazyCall{session: session, id: id, until: until}
	m[id] = c
	if l.byID == nil {
		l.byID = map[string]*lazyCall{}
	}
	l.byID[id] = c
	c.timer = time.AfterFunc(l.delay, func() {
		if l.begin(c) {
			defer l.wg.Done()
			record(c)
		}
	})
	return true
}

// begin moves a pending call to recording; false when it is not pending
// any more (ended, flushed) or the store is closing.
func (l *lazyCalls) begin(c *lazyCall) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.state != lazyPending || l.closed {
		return false
	}
	c.state = lazyRecording
	c.done = make(chan struct{})
	l.wg.Add(1)
	return true
}

// recorded ends a recording.
func (l *lazyCalls) recorded(c *lazyCall, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.state = lazyRefused
	if ok {
		c.state = lazyRecorded
	}
	close(c.done)
}

// end forgets a call and reports whether it is (or, after a recording in
// flight, was) recorded in Redis, so EndSessionTask must remove it there.
// An unknown call (started before a restart of the store value, or
// recorded at once) is treated as recorded.
func (l *lazyCalls) end(session, id string) bool {
	l.mu.Lock()
	c := l.calls[session][id]
	if c == nil {
		l.mu.Unlock()
		return true
	}
	delete(l.calls[session], id)
	if len(l.calls[session]) == 0 {
		delete(l.calls, session)
	}
	if l.byID[id] == c {
		delete(l.byID, id)
	}
	if c.state == lazyPending {
		c.timer.Stop()
		c.state = lazyRefused
		l.mu.Unlock()
		return false
	}
	done := c.done
	l.mu.Unlock()
	<-done
	l.mu.Lock()
	defer l.mu.Unlock()
	return c.state == lazyRecorded
}

// flush records every pending call of session now (CloseSession).
func (l *lazyCalls) flush(session string, record func(*lazyCall)) {
	l.mu.Lock()
	var todo []*lazyCall
	for _, c := range l.calls[session] {
		if c.state == lazyPending && !l.closed {
			c.timer.Stop()
			c.state = lazyRecording
			c.done = make(chan struct{})
			l.wg.Add(1)
			todo = append(todo, c)
		}
	}
	var wait []chan struct{}
	for _, c := range l.calls[session] {
		if c.state == lazyRecording {
			wait = append(wait, c.done)
		}
	}
	l.mu.Unlock()
	for _, c := range todo {
		record(c)
		l.wg.Done()
	}
	for _, ch := range wait {
		<-ch
	}
}

// flushTask records the pending call of task id now: a task that has
// messages or changes status (a question for the client, input_required)
// may wait long on its session, and its session's end must wait for it
// from then on, on every replica. Cheap when nothing is pending.
func (l *lazyCalls) flushTask(id string, record func(*lazyCall)) {
	if l.delay <= 0 {
		return
	}
	l.mu.Lock()
	c := l.byID[id]
	if c == nil {
		l.mu.Unlock()
		return
	}
	if c.state == lazyPending && !l.closed {
		c.timer.Stop()
		c.state = lazyRecording
		c.done = make(chan struct{})
		l.wg.Add(1)
		l.mu.Unlock()
		record(c)
		l.wg.Done()
		return
	}
	done := c.done
	l.mu.Unlock()
	if done != nil {
		<-done
	}
}

// close stops every pending timer and waits for recordings in flight.
func (l *lazyCalls) close() {
	l.mu.Lock()
	l.closed = true
	for _, m := range l.calls {
		for _, c := range m {
			if c.state == lazyPending {
				c.timer.Stop()
			}
		}
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// PendingTask implements SessionRecords with one GET of the pending entry.
func (s *Redis) PendingTask(ctx context.Context, owner, session, reqID string) (string, error) {
	if !validOwner(owner) || (session != "" && !validSession(session)) {
		return "", ErrNotFound
	}
	id, err := s.rdb.Get(ctx, s.k.pending(owner, session, reqID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", wrapErr("pending task", "", err)
	}
	return id, nil
}
