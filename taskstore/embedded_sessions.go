package taskstore

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"time"
)

// memSessRecord is one session record of the Embedded store (what
// P:srec:<session> holds on Redis). Guarded by its shard's mu.
type memSessRecord struct {
	cred    string
	closing bool
	tasks   map[string]int64 // running call id -> deadline, unix ms
	exp     int64            // unix ms
}

// srecord returns session's shard, locked, and its record when it exists
// and has not expired. A record expires like a Redis key, by the data's
// clock (real time), not by the view's clock: now (the view's) only
// decides which of its calls are past their deadline.
func (e *Embedded) srecord(session string, _ int64) (*memShard, *memSessRecord) {
	sh := e.shard(session)
	sh.mu.Lock()
	r := sh.srec[session]
	if r != nil && r.exp <= e.d.clock().UnixMilli() {
		delete(sh.srec, session)
		r = nil
	}
	return sh, r
}

// keepRecord makes r live at least until at; sh.mu is held.
func (sh *memShard) keepRecord(session string, r *memSessRecord, at int64) {
	if at > r.exp {
		r.exp = at
		heap.Push(&sh.exp, expItem{at: at, srec: session})
	}
}

// prune drops the calls whose deadline passed and returns how many are
// left and the latest deadline.
func (r *memSessRecord) prune(now int64) (n int, last int64) {
	for id, d := range r.tasks {
		if d <= now {
			delete(r.tasks, id)
			continue
		}
		n++
		last = max(last, d)
	}
	return n, last
}

// BindSession implements SessionRecords like Redis.BindSession.
func (e *Embedded) BindSession(_ context.Context, session, credential string, ttl time.Duration) error {
	if !validSession(session) {
		return errors.New("taskstore: bind session: invalid session key")
	}
	if e.d.closed.Load() {
		return errStoreClosed
	}
	if ttl <= 0 {
		ttl = e.sTTL
	}
	now := e.nowMS()
	sh, r := e.srecord(session, now)
	defer sh.mu.Unlock()
	if r == nil {
		r = &memSessRecord{tasks: map[string]int64{}}
		sh.srec[session] = r
	}
	if r.cred != "" && r.cred != credential {
		return ErrSessionBound
	}
	r.cred = credential
	sh.keepRecord(session, r, now+ttl.Milliseconds())
	return nil
}

// Session implements SessionRecords like Redis.Session.
func (e *Embedded) Session(_ context.Context, session string) (SessionRecord, error) {
	if !validSession(session) {
		return SessionRecord{}, ErrNotFound
	}
	if e.d.closed.Load() {
		return SessionRecord{}, errStoreClosed
	}
	now := e.nowMS()
	sh, r := e.srecord(session, now)
	defer sh.mu.Unlock()
	if r == nil {
		return SessionRecord{}, ErrNotFound
	}
	rec := SessionRecord{Credential: r.cred, Closing: r.closing}
	for id, d := range r.tasks {
		if d > now {
			rec.Tasks = append(rec.Tasks, id)
		}
	}
	slices.Sort(rec.Tasks)
	return rec, nil
}

// StartSessionTask implements SessionRecords like Redis.StartSessionTask.
func (e *Embedded) StartSessionTask(_ context.Context, session, id string, until time.Time) error {
	if !validSession(session) || !validID(id) {
		return errors.New("taskstore: start session task: invalid session key or id")
	}
	if e.d.closed.Load() {
		return errStoreClosed
	}
	now := e.nowMS()
	sh, r := e.srecord(session, now)
	defer sh.mu.Unlock()
	if r == nil {
		r = &memSessRecord{tasks: map[string]int64{}}
		sh.srec[session] = r
	}
	if r.closing {
		return ErrSessionClosing
	}
	d := until.UnixMilli()
	r.tasks[id] = d
	sh.keepRecord(session, r, d+indexSlack.Milliseconds())
	return nil
}

// EndSessionTask implements SessionRecords like Redis.EndSessionTask.
func (e *Embedded) EndSessionTask(_ context.Context, session, id string) (bool, error) {
	if !validSession(session) || !validID(id) {
		return false, nil
	}
	if e.d.closed.Load() {
		return false, errStoreClosed
	}
	now := e.nowMS()
	sh, r := e.srecord(session, now)
	defer sh.mu.Unlock()
	if r == nil {
		return false, nil
	}
	if _, ok := r.tasks[id]; !ok {
		return false, nil
	}
	delete(r.tasks, id)
	if n, _ := r.prune(now); n == 0 && r.closing {
		delete(sh.srec, session)
		return true, nil
	}
	return false, nil
}

// CloseSession implements SessionRecords like Redis.CloseSession.
func (e *Embedded) CloseSession(_ context.Context, session string) (bool, error) {
	if !validSession(session) {
		return false, nil
	}
	if e.d.closed.Load() {
		return false, errStoreClosed
	}
	now := e.nowMS()
	sh, r := e.srecord(session, now)
	defer sh.mu.Unlock()
	if r == nil {
		return false, nil
	}
	if n, last := r.prune(now); n > 0 {
		r.closing = true
		sh.keepRecord(session, r, last+indexSlack.Milliseconds())
		return true, nil
	}
	delete(sh.srec, session)
	return false, nil
}

// PendingTask implements SessionRecords like Redis.PendingTask.
func (e *Embedded) PendingTask(_ context.Context, owner, session, reqID string) (string, error) {
	if !validOwner(owner) || (session != "" && !validSession(session)) {
		return "", ErrNotFound
	}
	if e.d.closed.Load() {
		return "", errStoreClosed
	}
	now := e.nowMS()
	sh, o := e.lock(owner)
	defer sh.mu.Unlock()
	if o == nil {
		return "", ErrNotFound
	}
	id, ok := o.pending[pendRef{session, reqID}]
	if !ok || find(o, id, now) == nil {
		return "", ErrNotFound
	}
	return id, nil
}
