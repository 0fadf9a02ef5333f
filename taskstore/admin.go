package taskstore

import (
	"context"
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
	AdminList(ctx context.Context, f AdminFilter) ([]Task, string, error)
	AdminFind(ctx context.Context, id string) (*Task, error) // whatever its owner (Task.Owner set), or ErrNotFound
	AdminStats(ctx context.Context) (AdminStats, error)
}

var _ Admin = (*Embedded)(nil)

// adminCursorOwner is the owner under which admin cursors are sealed: no
// owner key contains a NUL byte, so an owner's tasks/list cursor never
// opens as an admin cursor and the other way round.
const adminCursorOwner = "\x00admin"

// adminLimit applies AdminFilter.Limit's default and cap.
func adminLimit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 1000:
		return 1000
	}
	return n
}

// match reports whether t passes f's filters (not the cursor) at now (ms).
func (f *AdminFilter) match(t *memTask, now int64) bool {
	if len(f.Status) > 0 && !slices.Contains(f.Status, t.status) {
		return false
	}
	if f.Tool != "" && t.tool != f.Tool {
		return false
	}
	if f.Runner != "" && t.runner != f.Runner {
		return false
	}
	if f.OlderThan > 0 && t.created > now-f.OlderThan.Milliseconds() {
		return false
	}
	return true
}

// AdminList implements Admin: live tasks of every owner, newest first
// (creation time, then id, descending). It scans every shard: its cost
// grows with the number of stored tasks.
func (e *Embedded) AdminList(_ context.Context, f AdminFilter) ([]Task, string, error) {
	limit := adminLimit(f.Limit)
	var afterMS int64
	afterID, from := "", false
	if f.Cursor != "" {
		ms, id, ok := e.openCursor(adminCursorOwner, f.Cursor)
		if !ok {
			return nil, "", ErrBadCursor
		}
		afterMS, afterID, from = ms, id, true
	}
	if e.d.closed.Load() {
		return nil, "", errStoreClosed
	}
	now := e.nowMS()
	var out []Task
	for i := range e.d.shards {
		sh := &e.d.shards[i]
		sh.mu.Lock()
		for _, o := range sh.owners {
			for _, t := range o.tasks {
				if !t.alive(now) || !f.match(t, now) {
					continue
				}
				if from && (t.created > afterMS || (t.created == afterMS && t.id >= afterID)) {
					continue
				}
				out = append(out, t.value())
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Task) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		switch {
		case a.ID > b.ID:
			return -1
		case a.ID < b.ID:
			return 1
		}
		return 0
	})
	if len(out) <= limit {
		return out, "", nil
	}
	out = out[:limit]
	last := out[limit-1]
	return out, e.sealCursor(adminCursorOwner, last.CreatedAt.UnixMilli(), last.ID), nil
}

// AdminFind implements Admin by scanning every owner.
func (e *Embedded) AdminFind(_ context.Context, id string) (*Task, error) {
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

// AdminStats implements Admin by scanning every live task.
func (e *Embedded) AdminStats(_ context.Context) (AdminStats, error) {
	if e.d.closed.Load() {
		return AdminStats{}, errStoreClosed
	}
	now := e.nowMS()
	st := AdminStats{ByStatus: map[Status]int{}, ByTool: map[string]map[Status]int{}, OldestRunning: map[string]time.Time{}}
	for i := range e.d.shards {
		sh := &e.d.shards[i]
		sh.mu.Lock()
		for _, o := range sh.owners {
			for _, t := range o.tasks {
				if !t.alive(now) {
					continue
				}
				st.ByStatus[t.status]++
				bt := st.ByTool[t.tool]
				if bt == nil {
					bt = map[Status]int{}
					st.ByTool[t.tool] = bt
				}
				bt[t.status]++
				if t.status == Working || t.status == InputRequired {
					c := time.UnixMilli(t.created)
					if old, ok := st.OldestRunning[t.tool]; !ok || c.Before(old) {
						st.OldestRunning[t.tool] = c
					}
				}
			}
		}
		sh.mu.Unlock()
	}
	return st, nil
}
