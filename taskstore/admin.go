package taskstore

import (
	"cmp"
	"context"
	"crypto/hmac"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"time"
)

// AdminFilter selects tasks across owners for operators. Zero fields match everything.
type AdminFilter struct {
	Status    []Status      // any of these; empty = any status
	Tool      string        // exact tool name; "" = any
	Runner    string        // exact runner id; "" = any
	OlderThan time.Duration // created more than this long ago; 0 = any age
	Cursor    string        // "" = from the newest; else a cursor this store issued
	Limit     int           // <= 0 means 100; capped at 1000
}

// AdminStats are aggregates for dashboards.
type AdminStats struct {
	ByStatus      map[Status]int            // live (unexpired) tasks per status
	ByTool        map[string]map[Status]int // per tool, per status
	OldestRunning map[string]time.Time      // per tool: CreatedAt of the oldest working or input_required task
}

// Admin reads and finds tasks across owners, for operators. Store implementations (Redis, Embedded) implement it.
type Admin interface {
	// AdminList returns tasks matching f, newest first, and the next page's cursor ("" = no more).
	AdminList(ctx context.Context, f AdminFilter) ([]Task, string, error)
	// AdminFind returns the task with this id whatever its owner (Task.Owner is set), or ErrNotFound.
	AdminFind(ctx context.Context, id string) (*Task, error)
	// AdminStats returns the aggregates.
	AdminStats(ctx context.Context) (AdminStats, error)
}

// Admin listing order and cursors. Tasks are listed newest first by
// (CreatedAt ms, "<owner>/<id>") descending: the Redis store's global
// index is a zset with exactly that score and member, and the embedded
// store sorts by the same key, so both list in one order. A cursor is the
// position of the last task of a page, sealed with the store's cursor key
// (HMAC) under a name no owner can have, so an owner's tasks/list cursor
// is never accepted here and the other way round; ErrBadCursor otherwise.

// DefaultAdminLimit is AdminFilter.Limit when it is <= 0.
const DefaultAdminLimit = 100

// adminCursorOwner names admin cursors in the MAC; validOwner rejects
// control characters, so no owner's cursor can pass for an admin one.
const adminCursorOwner = "\x00admin"

// adminLimit applies AdminFilter.Limit's default and cap.
func (f AdminFilter) adminLimit() int {
	if f.Limit <= 0 {
		return DefaultAdminLimit
	}
	return min(f.Limit, MaxListLimit)
}

// matches reports whether t passes f's filters (not the cursor); now is
// unix ms.
func (f AdminFilter) matches(t *Task, now int64) bool {
	if len(f.Status) > 0 && !slices.Contains(f.Status, t.Status) {
		return false
	}
	if f.Tool != "" && t.Tool != f.Tool {
		return false
	}
	if f.Runner != "" && t.Runner != f.Runner {
		return false
	}
	if f.OlderThan > 0 && t.CreatedAt.UnixMilli() >= now-f.OlderThan.Milliseconds() {
		return false
	}
	return true
}

// adminPos is a position in the admin order.
type adminPos struct {
	created int64
	member  string // "<owner>/<id>"
}

// before reports whether p sorts after q in the admin order (p is older).
func (p adminPos) before(q adminPos) bool {
	return p.created < q.created || (p.created == q.created && p.member < q.member)
}

func compareAdminPos(a, b adminPos) int {
	// Newest first: descending.
	if c := cmp.Compare(b.created, a.created); c != 0 {
		return c
	}
	return cmp.Compare(b.member, a.member)
}

// sealAdminCursor encodes created (8 bytes big endian) | member | MAC.
func (s cursors) sealAdminCursor(p adminPos) string {
	b := make([]byte, 0, 8+len(p.member)+cursorMACLen)
	b = binary.BigEndian.AppendUint64(b, uint64(p.created))
	b = append(b, p.member...)
	b = append(b, s.cursorMAC(adminCursorOwner, p.created, p.member)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// openAdminCursor checks and decodes an admin cursor.
func (s cursors) openAdminCursor(c string) (adminPos, bool) {
	if len(c) > maxCursorLen {
		return adminPos{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 8+3+cursorMACLen {
		return adminPos{}, false
	}
	p := adminPos{created: int64(binary.BigEndian.Uint64(b)), member: string(b[8 : len(b)-cursorMACLen])}
	if _, _, ok := parseLeaseMember(p.member); !ok {
		return adminPos{}, false
	}
	if !hmac.Equal(b[len(b)-cursorMACLen:], s.cursorMAC(adminCursorOwner, p.created, p.member)) {
		return adminPos{}, false
	}
	return p, true
}

// newAdminStats returns empty aggregates.
func newAdminStats() AdminStats {
	return AdminStats{ByStatus: map[Status]int{}, ByTool: map[string]map[Status]int{}, OldestRunning: map[string]time.Time{}}
}

// add counts t in st.
func (st *AdminStats) add(t *Task) {
	st.ByStatus[t.Status]++
	m := st.ByTool[t.Tool]
	if m == nil {
		m = map[Status]int{}
		st.ByTool[t.Tool] = m
	}
	m[t.Status]++
	if !t.Status.Terminal() {
		if cur, ok := st.OldestRunning[t.Tool]; !ok || t.CreatedAt.Before(cur) {
			st.OldestRunning[t.Tool] = t.CreatedAt
		}
	}
}

var _ Admin = (*Embedded)(nil)

// AdminList implements Admin. The embedded store keeps no cross-owner
// index: it walks every owner's tasks in memory (O(live tasks), no I/O)
// and sorts the matches.
func (e *Embedded) AdminList(_ context.Context, f AdminFilter) ([]Task, string, error) {
	limit := f.adminLimit()
	var after *adminPos
	if f.Cursor != "" {
		p, ok := e.openAdminCursor(f.Cursor)
		if !ok {
			return nil, "", ErrBadCursor
		}
		after = &p
	}
	if e.d.closed.Load() {
		return nil, "", errStoreClosed
	}
	now := e.nowMS()
	type hit struct {
		pos adminPos
		t   Task
	}
	var hits []hit
	e.eachLive(now, func(mt *memTask) {
		p := adminPos{mt.created, leaseMember(mt.owner, mt.id)}
		if after != nil && !p.before(*after) {
			return
		}
		t := mt.value()
		if f.matches(&t, now) {
			hits = append(hits, hit{p, t})
		}
	})
	slices.SortFunc(hits, func(a, b hit) int { return compareAdminPos(a.pos, b.pos) })
	next := ""
	if len(hits) > limit {
		hits = hits[:limit]
		next = e.sealAdminCursor(hits[limit-1].pos)
	}
	out := make([]Task, len(hits))
	for i := range hits {
		out[i] = hits[i].t
	}
	return out, next, nil
}

// AdminFind implements Admin by looking the id up in every owner's map
// (O(owners), in memory).
func (e *Embedded) AdminFind(_ context.Context, id string) (*Task, error) {
	if !validID(id) {
		return nil, ErrNotFound
	}
	if e.d.closed.Load() {
		return nil, errStoreClosed
	}
	now := e.nowMS()
	for i := range e.d.shards {
		sh := &e.d.shards[i]
		sh.mu.Lock()
		for _, o := range sh.owners {
			if t := find(o, id, now); t != nil {
				v := t.snapshot()
				sh.mu.Unlock()
				return v, nil
			}
		}
		sh.mu.Unlock()
	}
	return nil, ErrNotFound
}

// AdminStats implements Admin by counting every live task in memory.
func (e *Embedded) AdminStats(_ context.Context) (AdminStats, error) {
	if e.d.closed.Load() {
		return AdminStats{}, errStoreClosed
	}
	st := newAdminStats()
	e.eachLive(e.nowMS(), func(mt *memTask) {
		t := mt.value()
		st.add(&t)
	})
	return st, nil
}

// eachLive calls fn for every live task, one shard locked at a time; fn
// must not call the store.
func (e *Embedded) eachLive(now int64, fn func(*memTask)) {
	for i := range e.d.shards {
		sh := &e.d.shards[i]
		sh.mu.Lock()
		for _, o := range sh.owners {
			for _, t := range o.tasks {
				if t.alive(now) {
					fn(t)
				}
			}
		}
		sh.mu.Unlock()
	}
}
