package taskstore

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Embedded is a Store kept in this process's memory: the default when
// taskgate runs without a Redis. It keeps the Redis store's contract to the
// millisecond (the same store suite runs on both): TTLs, per-owner creation
// order and cursors, MaxPerOwner, leases and Recover, outbound queues with
// their bound, inboxes and pending requests, listening marks, session
// queued sets, Watch, WatchKinds and WatchSession, terminal-is-final. Data
// lives only in this process, so several replicas cannot share it.
//
// Layout: owners are spread over embeddedShards shards by a hash of the
// owner, each with its own mutex, so one owner's operations are serialised
// (like the scripts of one Redis slot) while different owners rarely
// contend. A shard holds per owner a map id -> task, the creation-order
// index (a slice kept sorted by its strictly increasing score, so a cursor
// is found by binary search and List costs O(log n + page)), the live set
// for MaxPerOwner, the session queued sets and the pending requests; and per
// shard a lease heap (Recover pops expired leases, Renew fixes one entry)
// and an expiry heap that a janitor goroutine drains every embeddedTick.
// The janitor only reclaims memory: every operation checks expiry against
// the store clock itself, so a task is gone at CreatedAt+TTL exactly.
// Every operation costs O(1) or O(log n) in the number of stored tasks;
// nothing is sorted or scanned per call except what the call returns (and,
// at an owner's MaxPerOwner cap, that owner's live tasks, as Redis does).
//
// Wake-ups are direct: a change sends on the watchers' channels (never
// blocking) while the shard is locked, so a Watch that returned sees every
// later change; nothing is sent for a task or session nobody watches.
//
// Messages and outcomes are copied in; Drain, TakeAnswers and Outcome hand
// out the stored bytes (the first two give up the store's reference, an
// outcome must not be modified). Operations never block on I/O, so
// Config.OpTimeout has nothing to bound here.
//
// Close stops the janitor and signals every watcher once; afterwards every
// operation fails with ErrUnavailable.
type Embedded struct {
	d    *memData
	now  func() time.Time
	sTTL time.Duration
	cursors
}

var _ Store = (*Embedded)(nil)

// embeddedShards is the number of owner shards (a power of two).
const embeddedShards = 32

// embeddedTick is how often the janitor reclaims expired tasks and records.
const embeddedTick = 250 * time.Millisecond

// janitorBatch bounds the expired entries one shard reclaims per lock hold,
// so a mass expiry never stalls that shard's operations for long.
const janitorBatch = 1024

// errStoreClosed is returned by an Embedded store's operations after Close.
var errStoreClosed = fmt.Errorf("%w: %w", ErrUnavailable, errClosed)

// memData is what every view (Embedded value) of one store shares.
type memData struct {
	seed   maphash.Seed
	clock  func() time.Time // expires entries, like a Redis server's clock
	shards [embeddedShards]memShard
	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

type memShard struct {
	mu     sync.Mutex
	owners map[string]*memOwner
	exp    expHeap
	leases leaseHeap
	sess   map[string]memSessRec
	srec   map[string]*memSessRecord
	watch  map[taskRef]map[*taskWatcher]EventKind
	swatch map[sessRef]map[*sessWatcher]struct{}
	_      [64]byte // keep shards' mutexes on separate cache lines
}

type taskRef struct{ owner, id string }

type sessRef struct{ owner, session string }

type pendRef struct{ session, reqID string }

type memSessRec struct {
	version string
	exp     int64 // unix ms
}

// memOwner is one owner's tasks. Guarded by its shard's mu.
type memOwner struct {
	tasks     map[string]*memTask
	index     []*memTask // creation order (score increasing); may hold gone tasks
	gone      int        // gone tasks in index
	live      map[string]*memTask
	lastScore int64
	queued    map[string]map[string]struct{} // session -> ids with queued messages
	pending   map[pendRef]string             // pending server-to-client request -> task id
}

// memTask is one stored task. Guarded by its shard's mu.
type memTask struct {
	id, owner                string
	status                   Status
	msg                      string
	created, updated         int64 // unix ms
	ttl, poll                int64 // ms
	tool, upID, runner, sess string
	era                      string
	score                    int64
	lease                    int64 // deadline, unix ms
	leaseIdx                 int   // index in the shard's lease heap, -1 when not in it
	okind                    OutcomeKind
	out                      json.RawMessage
	queue                    []Message
	inbox                    [][]byte
	inputs                   map[string][]byte // open input requests by key
	listenUntil              int64             // unix ms; 0 = no listening mark
	pend                     []pendRef
	gone                     bool
}

func (t *memTask) expiry() int64            { return t.created + t.ttl }
func (t *memTask) alive(now int64) bool     { return !t.gone && now < t.expiry() }
func (t *memTask) listening(now int64) bool { return t.listenUntil > now }
func (t *memTask) terminal() bool           { return t.status.Terminal() }
func (t *memTask) snapshot() *Task          { v := t.value(); return &v }
func (t *memTask) ref() taskRef             { return taskRef{t.owner, t.id} }

func (t *memTask) value() Task {
	return Task{
		ID: t.id, Owner: t.owner, Status: t.status, StatusMessage: t.msg,
		CreatedAt: time.UnixMilli(t.created), UpdatedAt: time.UnixMilli(t.updated),
		TTL: time.Duration(t.ttl) * time.Millisecond, PollInterval: time.Duration(t.poll) * time.Millisecond,
		Tool: t.tool, UpstreamID: t.upID, Runner: t.runner, Session: t.sess, Era: t.era,
	}
}

// NewEmbedded returns a new, empty Embedded store and its closer (the same
// as Close; idempotent). cfg.Prefix is not used; the other fields mean what
// they mean for NewRedis.
func NewEmbedded(cfg Config) (*Embedded, func(), error) {
	cfg = cfg.withDefaults()
	mac, err := cfg.cursorKey("NewEmbedded")
	if err != nil {
		return nil, nil, err
	}
	d := &memData{seed: maphash.MakeSeed(), clock: time.Now, stop: make(chan struct{})}
	for i := range d.shards {
		sh := &d.shards[i]
		sh.owners = map[string]*memOwner{}
		sh.sess = map[string]memSessRec{}
		sh.srec = map[string]*memSessRecord{}
		sh.watch = map[taskRef]map[*taskWatcher]EventKind{}
		sh.swatch = map[sessRef]map[*sessWatcher]struct{}{}
	}
	d.wg.Add(1)
	go d.janitor()
	e := &Embedded{d: d, now: cfg.Now, sTTL: cfg.SessionTTL, cursors: newCursors(mac)}
	return e, func() { _ = e.Close() }, nil
}

// view returns another Embedded value over the same data with its own
// clock and cursor key: a second "replica" for the store suite.
func (e *Embedded) view(cfg Config) (*Embedded, error) {
	cfg = cfg.withDefaults()
	mac, err := cfg.cursorKey("NewEmbedded")
	if err != nil {
		return nil, err
	}
	return &Embedded{d: e.d, now: cfg.Now, sTTL: cfg.SessionTTL, cursors: newCursors(mac)}, nil
}

// Close stops the janitor and signals every watcher one last time (an
// empty signal for Watch, SessionRescan for WatchSession). Idempotent.
func (e *Embedded) Close() error {
	d := e.d
	d.once.Do(func() {
		d.closed.Store(true)
		close(d.stop)
		d.wg.Wait()
		for i := range d.shards {
			sh := &d.shards[i]
			sh.mu.Lock()
			for _, ws := range sh.watch {
				for w := range ws {
					w.signal()
				}
			}
			for _, ws := range sh.swatch {
				for w := range ws {
					w.deliver(SessionEvent{Kind: SessionRescan})
				}
			}
			sh.mu.Unlock()
		}
	})
	return nil
}

func (e *Embedded) nowMS() int64 { return e.now().UnixMilli() }

func (e *Embedded) shard(key string) *memShard {
	return &e.d.shards[maphash.String(e.d.seed, key)&(embeddedShards-1)]
}

// lock returns owner's shard, locked, and the owner's state (nil when the
// owner has no tasks).
func (e *Embedded) lock(owner string) (*memShard, *memOwner) {
	sh := e.shard(owner)
	sh.mu.Lock()
	return sh, sh.owners[owner]
}

// publish wakes the task's watchers that want kind; sh.mu is held.
func (sh *memShard) publish(t *memTask, kind EventKind) {
	if len(sh.watch) == 0 {
		return
	}
	for w, kinds := range sh.watch[t.ref()] {
		if kinds.has(kind) {
			w.signal()
		}
	}
}

// publishSession delivers ev to the session's watchers; sh.mu is held.
func (sh *memShard) publishSession(owner, session string, ev SessionEvent) {
	if session == "" || len(sh.swatch) == 0 {
		return
	}
	for w := range sh.swatch[sessRef{owner, session}] {
		w.deliver(ev)
	}
}

// announce records t in its session's queued set and tells the session's
// watchers; sh.mu is held.
func (sh *memShard) announce(o *memOwner, t *memTask) {
	if t.sess == "" {
		return
	}
	set := o.queued[t.sess]
	if set == nil {
		if o.queued == nil {
			o.queued = map[string]map[string]struct{}{}
		}
		set = map[string]struct{}{}
		o.queued[t.sess] = set
	}
	set[t.id] = struct{}{}
	sh.publishSession(t.owner, t.sess, SessionEvent{Kind: SessionQueued, TaskID: t.id})
}

// unqueue removes t from its session's queued set; sh.mu is held.
func (o *memOwner) unqueue(t *memTask) {
	if t.sess == "" {
		return
	}
	if set := o.queued[t.sess]; set != nil {
		delete(set, t.id)
		if len(set) == 0 {
			delete(o.queued, t.sess)
		}
	}
}

// Create implements Store. It validates and fills in t like Redis.Create.
func (e *Embedded) Create(_ context.Context, t *Task, opt CreateOptions) error {
	lease, err := prepareCreate(t, opt)
	if err != nil {
		return err
	}
	if e.d.closed.Load() {
		return fmt.Errorf("taskstore: create %s: %w", t.ID, errStoreClosed)
	}
	now := e.nowMS()
	ttl := t.TTL.Milliseconds()
	sh, o := e.lock(t.Owner)
	defer sh.mu.Unlock()
	if o == nil {
		o = &memOwner{tasks: map[string]*memTask{}, live: map[string]*memTask{}}
		sh.owners[t.Owner] = o
	} else if o.tasks[t.ID] != nil {
		return fmt.Errorf("taskstore: create %s: id already exists", t.ID)
	}
	if max := opt.MaxPerOwner; max > 0 && len(o.live) >= max {
		n := 0
		for _, lt := range o.live {
			if lt.alive(now) {
				n++
			}
		}
		if n >= max {
			return ErrOwnerLimit
		}
	}
	score := max(now, o.lastScore+1)
	o.lastScore = score
	mt := &memTask{
		id: t.ID, owner: t.Owner, status: Working, msg: t.StatusMessage, created: now, updated: now,
		ttl: ttl, poll: t.PollInterval.Milliseconds(), tool: t.Tool, upID: t.UpstreamID, runner: t.Runner,
		sess: t.Session, era: t.Era, score: score, lease: now + lease.Milliseconds(),
	}
	o.tasks[mt.id] = mt
	o.index = append(o.index, mt)
	o.live[mt.id] = mt
	heap.Push(&sh.leases, mt)
	heap.Push(&sh.exp, expItem{at: mt.expiry(), task: mt})
	t.Status = Working
	t.CreatedAt = time.UnixMilli(now)
	t.UpdatedAt = t.CreatedAt
	t.TTL = time.Duration(ttl) * time.Millisecond
	t.PollInterval = t.PollInterval.Truncate(time.Millisecond)
	return nil
}

// find returns the live task (by the store clock) or nil; sh.mu is held.
func find(o *memOwner, id string, now int64) *memTask {
	if o == nil {
		return nil
	}
	if t := o.tasks[id]; t != nil && t.alive(now) {
		return t
	}
	return nil
}

// openTask is the prelude of an operation on one of owner's tasks: it
// fails when the store is closed, locks owner's shard and finds task id
// as of now. A missing task is ErrNotFound; a terminal one is
// ErrTerminal when working is set. When err is nil the shard stays locked
// and the caller unlocks sh.mu; otherwise nothing is locked.
func (e *Embedded) openTask(owner, id string, working bool) (sh *memShard, o *memOwner, t *memTask, now int64, err error) {
	if e.d.closed.Load() {
		return nil, nil, nil, 0, errStoreClosed
	}
	now = e.nowMS()
	sh, o = e.lock(owner)
	switch t = find(o, id, now); {
	case t == nil:
		err = ErrNotFound
	case working && t.terminal():
		err = ErrTerminal
	}
	if err != nil {
		sh.mu.Unlock()
		return nil, nil, nil, 0, err
	}
	return sh, o, t, now, nil
}

// Get implements Store.
func (e *Embedded) Get(_ context.Context, owner, id string) (*Task, error) {
	if e.d.closed.Load() {
		return nil, errStoreClosed
	}
	now := e.nowMS()
	sh, o := e.lock(owner)
	defer sh.mu.Unlock()
	t := find(o, id, now)
	if t == nil {
		return nil, ErrNotFound
	}
	return t.snapshot(), nil
}

// Outcome implements Store. Raw is the stored outcome itself: it must not
// be modified.
func (e *Embedded) Outcome(_ context.Context, owner, id string) (*Task, *Outcome, error) {
	if e.d.closed.Load() {
		return nil, nil, errStoreClosed
	}
	now := e.nowMS()
	sh, o := e.lock(owner)
	defer sh.mu.Unlock()
	t := find(o, id, now)
	if t == nil {
		return nil, nil, ErrNotFound
	}
	return t.snapshot(), &Outcome{Kind: t.okind, Raw: t.out}, nil
}

// Update implements Store like Redis.Update.
func (e *Embedded) Update(_ context.Context, owner, id string, st Status, msg string) (*Task, error) {
	if st != "" && st != Working && st != InputRequired {
		return nil, fmt.Errorf("taskstore: update %s: status %q is not working or input_required", id, st)
	}
	sh, _, t, now, err := e.openTask(owner, id, true)
	if err != nil {
		return nil, err
	}
	defer sh.mu.Unlock()
	changed := false
	if st != "" && st != t.status {
		t.status, changed = st, true
	}
	if msg != "" && msg != t.msg {
		t.msg, changed = msg, true
	}
	if changed {
		t.updated = max(now, t.updated)
		sh.publish(t, EventUpdate)
		sh.publishSession(owner, t.sess, SessionEvent{Kind: SessionStatus, TaskID: id})
	}
	return t.snapshot(), nil
}

// Finish implements Store like Redis.Finish. It keeps out.Raw itself, not a
// copy: a result of megabytes copied under the shard's lock held up every
// other owner on the shard, and the copy was a fifth of taskgate's CPU
// while 50 results of 8 MiB were recorded.
func (e *Embedded) Finish(_ context.Context, owner, id string, st Status, msg string, out Outcome) (*Task, error) {
	if st != Completed && st != Failed {
		return nil, fmt.Errorf("taskstore: finish %s: status %q is not completed or failed", id, st)
	}
	switch out.Kind {
	case OutcomeResult, OutcomeError, OutcomeInternal:
	default:
		return nil, fmt.Errorf("taskstore: finish %s: outcome kind %q", id, out.Kind)
	}
	return e.terminate(owner, id, st, msg, out, true)
}

// Cancel implements Store like Redis.Cancel.
func (e *Embedded) Cancel(_ context.Context, owner, id, msg string) (*Task, error) {
	return e.terminate(owner, id, Cancelled, msg, Outcome{}, false)
}

func (e *Embedded) terminate(owner, id string, st Status, msg string, out Outcome, keepNotes bool) (*Task, error) {
	sh, o, t, now, err := e.openTask(owner, id, true)
	if err != nil {
		return nil, err
	}
	defer sh.mu.Unlock()
	sh.end(o, t, st, msg, out, keepNotes, now)
	return t.snapshot(), nil
}

// end moves t to a terminal status: what terminateCmd does on Redis;
// sh.mu is held. t keeps out.Raw itself: the caller hands it over.
func (sh *memShard) end(o *memOwner, t *memTask, st Status, msg string, out Outcome, keepNotes bool, now int64) {
	t.status, t.msg, t.updated = st, msg, max(now, t.updated)
	if out.Kind != OutcomeNone {
		t.okind = out.Kind
		if len(out.Raw) > 0 {
			t.out = out.Raw
		}
	}
	if t.leaseIdx >= 0 {
		heap.Remove(&sh.leases, t.leaseIdx)
	}
	delete(o.live, t.id)
	kept := 0
	if keepNotes {
		// Notifications queued before the end stay deliverable (they
		// precede the result); requests are moot once the upstream answered.
		q := t.queue[:0]
		for _, m := range t.queue {
			if m.Kind != KindRequest {
				q = append(q, m)
			}
		}
		clear(t.queue[len(q):])
		t.queue, kept = q, len(q)
	}
	if kept == 0 {
		t.queue = nil
		o.unqueue(t)
	}
	t.inbox, t.inputs, t.listenUntil = nil, nil, 0
	sh.publish(t, EventTerminal)
	sh.publishSession(t.owner, t.sess, SessionEvent{Kind: SessionStatus, TaskID: t.id})
}

// List implements Store like Redis.List (same cursor format and order).
func (e *Embedded) List(_ context.Context, owner, cursor string, limit int) ([]Task, string, error) {
	limit = min(max(limit, 1), MaxListLimit)
	if !validOwner(owner) {
		if cursor != "" {
			return nil, "", ErrBadCursor
		}
		return nil, "", nil
	}
	var afterScore int64
	afterID, from := "", false
	if cursor != "" {
		score, id, ok := e.openCursor(owner, cursor)
		if !ok {
			return nil, "", ErrBadCursor
		}
		afterScore, afterID, from = score, id, true
	}
	if e.d.closed.Load() {
		return nil, "", errStoreClosed
	}
	now := e.nowMS()
	sh, o := e.lock(owner)
	defer sh.mu.Unlock()
	if o == nil {
		return nil, "", nil
	}
	i := 0
	if from {
		i = sort.Search(len(o.index), func(i int) bool {
			t := o.index[i]
			return t.score > afterScore || (t.score == afterScore && t.id > afterID)
		})
	}
	var out []Task
	more := false
	for ; i < len(o.index); i++ {
		t := o.index[i]
		if !t.alive(now) {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		if out == nil {
			out = make([]Task, 0, min(limit, len(o.index)-i))
		}
		out = append(out, t.value())
	}
	if !more || len(out) == 0 {
		return out, "", nil
	}
	last := out[len(out)-1]
	return out, e.sealCursor(owner, o.tasks[last.ID].score, last.ID), nil
}

// Renew implements Store like Redis.Renew.
func (e *Embedded) Renew(_ context.Context, owner, id string, lease time.Duration) (Status, error) {
	if lease <= 0 {
		lease = DefaultLease
	}
	sh, _, t, now, err := e.openTask(owner, id, false)
	if err != nil {
		return "", err
	}
	defer sh.mu.Unlock()
	switch {
	case t.terminal():
		return t.status, nil
	}
	t.lease = now + lease.Milliseconds()
	if t.leaseIdx >= 0 {
		heap.Fix(&sh.leases, t.leaseIdx)
	} else {
		heap.Push(&sh.leases, t)
	}
	return t.status, nil
}

// Recover implements Store: per shard, it pops the leases that expired
// before now-skew and fails their tasks like Redis.Recover.
func (e *Embedded) Recover(_ context.Context, skew time.Duration, msg string) ([]Task, error) {
	if e.d.closed.Load() {
		return nil, errStoreClosed
	}
	skew = max(skew, 0)
	now := e.nowMS()
	cutoff := now - skew.Milliseconds()
	var failed []Task
	for i := range e.d.shards {
		sh := &e.d.shards[i]
		sh.mu.Lock()
		for len(sh.leases) > 0 && sh.leases[0].lease < cutoff {
			t := heap.Pop(&sh.leases).(*memTask)
			if !t.alive(now) || t.terminal() {
				continue
			}
			sh.end(sh.owners[t.owner], t, Failed, msg, Outcome{Kind: OutcomeInternal}, false, now)
			failed = append(failed, t.value())
		}
		sh.mu.Unlock()
	}
	return failed, nil
}

// Watch implements Store.
func (e *Embedded) Watch(ctx context.Context, owner, id string) (<-chan struct{}, func(), error) {
	return e.WatchKinds(ctx, owner, id, AllEvents)
}

// WatchKinds implements Store. It never waits: the watcher is registered
// when it returns.
func (e *Embedded) WatchKinds(_ context.Context, owner, id string, kinds EventKind) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	stop, err := e.watch(owner, id, kinds, &taskWatcher{ch: ch})
	if err != nil {
		return nil, nil, err
	}
	return ch, stop, nil
}

// WatchFunc implements Store. It never waits: the watcher is registered
// when it returns.
func (e *Embedded) WatchFunc(_ context.Context, owner, id string, kinds EventKind, fn func()) (func(), error) {
	return e.watch(owner, id, kinds, &taskWatcher{fn: fn})
}

func (e *Embedded) watch(owner, id string, kinds EventKind, w *taskWatcher) (func(), error) {
	if !validOwner(owner) || !validID(id) {
		return nil, ErrNotFound
	}
	if e.d.closed.Load() {
		return nil, fmt.Errorf("taskstore: watch %s: %w", id, errStoreClosed)
	}
	ref := taskRef{owner, id}
	sh := e.shard(owner)
	sh.mu.Lock()
	ws := sh.watch[ref]
	if ws == nil {
		ws = map[*taskWatcher]EventKind{}
		sh.watch[ref] = ws
	}
	ws[w] = kinds
	sh.mu.Unlock()
	return func() {
		w.once.Do(func() { // the watcher's own Once: no allocation of its own
			sh.mu.Lock()
			if ws := sh.watch[ref]; ws != nil {
				delete(ws, w)
				if len(ws) == 0 {
					delete(sh.watch, ref)
				}
			}
			sh.mu.Unlock()
		})
	}, nil
}

// WatchSession implements Store with WatchSession's Redis contract (the
// channel holds sessionBuffer events; when it is one short of full a
// SessionRescan takes the last slot).
func (e *Embedded) WatchSession(_ context.Context, owner, session string) (<-chan SessionEvent, func(), error) {
	if !validOwner(owner) || !validSession(session) {
		return nil, nil, errors.New("taskstore: watch session: invalid owner or session key")
	}
	if e.d.closed.Load() {
		return nil, nil, fmt.Errorf("taskstore: watch session: %w", errStoreClosed)
	}
	w := &sessWatcher{ch: make(chan SessionEvent, sessionBuffer)}
	ref := sessRef{owner, session}
	sh := e.shard(owner)
	sh.mu.Lock()
	ws := sh.swatch[ref]
	if ws == nil {
		ws = map[*sessWatcher]struct{}{}
		sh.swatch[ref] = ws
	}
	ws[w] = struct{}{}
	sh.mu.Unlock()
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			sh.mu.Lock()
			if ws := sh.swatch[ref]; ws != nil {
				delete(ws, w)
				if len(ws) == 0 {
					delete(sh.swatch, ref)
				}
			}
			sh.mu.Unlock()
		})
	}, nil
}

// Enqueue implements Store like Redis.Enqueue. msg is copied.
func (e *Embedded) Enqueue(_ context.Context, owner, id string, kind MessageKind, msg []byte, max int) (int, error) {
	if !kind.valid() {
		return 0, fmt.Errorf("taskstore: enqueue %s: message kind %q", id, byte(kind))
	}
	sh, o, t, now, err := e.openTask(owner, id, true)
	if err != nil {
		return 0, err
	}
	defer sh.mu.Unlock()
	t.queue = append(t.queue, Message{Kind: kind, Data: append([]byte(nil), msg...)})
	dropped := 0
	if max > 0 && len(t.queue) > max {
		dropped = t.trim(len(t.queue) - max)
	}
	sh.publish(t, EventMessage)
	if !t.listening(now) {
		sh.announce(o, t)
	}
	return dropped, nil
}

// trim drops up to excess queued messages: the oldest progress first, then
// the oldest other notifications, never requests. Returns how many.
func (t *memTask) trim(excess int) int {
	var nProgress, nNote int
	for _, m := range t.queue {
		switch m.Kind {
		case KindProgress:
			nProgress++
		case KindNotification:
			nNote++
		}
	}
	dropP := min(excess, nProgress)
	dropN := min(excess-dropP, nNote)
	if dropP+dropN == 0 {
		return 0
	}
	q := t.queue[:0]
	p, n := dropP, dropN
	for _, m := range t.queue {
		switch {
		case m.Kind == KindProgress && p > 0:
			p--
		case m.Kind == KindNotification && n > 0:
			n--
		default:
			q = append(q, m)
		}
	}
	clear(t.queue[len(q):])
	t.queue = q
	return dropP + dropN
}

// Drain implements Store like Redis.Drain. The returned messages are the
// caller's.
func (e *Embedded) Drain(_ context.Context, owner, id string) ([]Message, error) {
	if !validOwner(owner) || !validID(id) {
		return nil, ErrNotFound
	}
	if e.d.closed.Load() {
		return nil, errStoreClosed
	}
	sh, o := e.lock(owner)
	defer sh.mu.Unlock()
	t := find(o, id, e.nowMS()) // expired by the clock: gone, like its queue
	if t == nil {
		return nil, nil
	}
	q := t.queue
	t.queue = nil
	o.unqueue(t)
	return q, nil
}

// Requeue implements Store like Redis.Requeue. The messages are copied.
func (e *Embedded) Requeue(_ context.Context, owner, id string, msgs []Message) error {
	if !validOwner(owner) || !validID(id) {
		return ErrNotFound
	}
	if len(msgs) == 0 {
		return nil
	}
	for _, m := range msgs {
		if !m.Kind.valid() {
			return fmt.Errorf("taskstore: requeue %s: message kind %q", id, byte(m.Kind))
		}
	}
	sh, o, t, now, err := e.openTask(owner, id, true)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	q := make([]Message, 0, len(msgs)+len(t.queue))
	for _, m := range msgs {
		q = append(q, Message{Kind: m.Kind, Data: append([]byte(nil), m.Data...)})
	}
	t.queue = append(q, t.queue...)
	sh.publish(t, EventMessage)
	if !t.listening(now) {
		sh.announce(o, t)
	}
	return nil
}

// SetListening implements Store like Redis.SetListening.
func (e *Embedded) SetListening(_ context.Context, owner, id string, ttl time.Duration) error {
	if !validOwner(owner) || !validID(id) {
		return ErrNotFound
	}
	if e.d.closed.Load() {
		return errStoreClosed
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	now := e.nowMS()
	sh, o := e.lock(owner)
	defer sh.mu.Unlock()
	t := find(o, id, now)
	if ttl <= 0 {
		if t != nil {
			t.listenUntil = 0
			if !t.terminal() && len(t.queue) > 0 {
				sh.announce(o, t)
			}
		}
		return nil
	}
	if t == nil {
		return ErrNotFound
	}
	t.listenUntil = min(now+ms, t.expiry())
	return nil
}

// QueuedTasks implements Store like Redis.QueuedTasks (sorted ids).
func (e *Embedded) QueuedTasks(_ context.Context, owner, session string) ([]string, error) {
	if !validOwner(owner) || !validSession(session) {
		return nil, nil
	}
	if e.d.closed.Load() {
		return nil, errStoreClosed
	}
	sh, o := e.lock(owner)
	defer sh.mu.Unlock()
	if o == nil {
		return nil, nil
	}
	set := o.queued[session]
	var ids []string
	now := e.nowMS()
	for id := range set {
		if t := find(o, id, now); t != nil && len(t.queue) > 0 {
			ids = append(ids, id)
		} else {
			delete(set, id)
		}
	}
	if len(set) == 0 {
		delete(o.queued, session)
	}
	slices.Sort(ids)
	return ids, nil
}

// AddPending implements Store like Redis.AddPending.
func (e *Embedded) AddPending(_ context.Context, owner, session, reqID, id string) error {
	if session != "" && !validSession(session) {
		return fmt.Errorf("taskstore: add pending %s: invalid session key", id)
	}
	if !validOwner(owner) || !validID(id) {
		return ErrNotFound
	}
	sh, o, t, _, err := e.openTask(owner, id, true)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if o.pending == nil {
		o.pending = map[pendRef]string{}
	}
	ref := pendRef{session, reqID}
	o.pending[ref] = id
	t.pend = append(t.pend, ref)
	return nil
}

// Answer implements Store like Redis.Answer. msg is copied.
func (e *Embedded) Answer(_ context.Context, owner, session, reqID string, msg []byte) (string, error) {
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
	ref := pendRef{session, reqID}
	id, ok := o.pending[ref]
	if !ok {
		return "", ErrNotFound
	}
	delete(o.pending, ref)
	t := find(o, id, now)
	if t == nil {
		return "", ErrNotFound
	}
	if !t.terminal() {
		t.inbox = append(t.inbox, append([]byte(nil), msg...))
		sh.publish(t, EventAnswer)
	}
	return id, nil
}

// TakeAnswers implements Store like Redis.TakeAnswers. The returned
// answers are the caller's.
func (e *Embedded) TakeAnswers(_ context.Context, owner, id string) ([][]byte, error) {
	if !validOwner(owner) || !validID(id) {
		return nil, ErrNotFound
	}
	if e.d.closed.Load() {
		return nil, errStoreClosed
	}
	sh, o := e.lock(owner)
	defer sh.mu.Unlock()
	t := find(o, id, e.nowMS())
	if t == nil {
		return nil, nil
	}
	in := t.inbox
	t.inbox = nil
	return in, nil
}

// SessionVersion implements Store.
func (e *Embedded) SessionVersion(_ context.Context, session string) (string, error) {
	if e.d.closed.Load() {
		return "", errStoreClosed
	}
	now := e.nowMS()
	sh := e.shard(session)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if r, ok := sh.sess[session]; ok && r.exp > now {
		return r.version, nil
	}
	return "", nil
}

// SetSessionVersion implements Store; ttl <= 0 means Config.SessionTTL.
func (e *Embedded) SetSessionVersion(_ context.Context, session, version string, ttl time.Duration) error {
	if e.d.closed.Load() {
		return errStoreClosed
	}
	if ttl <= 0 {
		ttl = e.sTTL
	}
	exp := e.nowMS() + max(ttl.Milliseconds(), 1)
	sh := e.shard(session)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.sess[session] = memSessRec{version: version, exp: exp}
	heap.Push(&sh.exp, expItem{at: exp, session: session})
	return nil
}

// Ping implements Store: it fails only after Close.
func (e *Embedded) Ping(context.Context) error {
	if e.d.closed.Load() {
		return errStoreClosed
	}
	return nil
}

// janitor reclaims expired tasks and session records every embeddedTick.
func (d *memData) janitor() {
	defer d.wg.Done()
	tick := time.NewTicker(embeddedTick)
	defer tick.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-tick.C:
			d.sweep()
		}
	}
}

// sweep reclaims every entry whose time has passed by d.clock.
func (d *memData) sweep() {
	for i := range d.shards {
		for d.shards[i].sweep(d.clock().UnixMilli()) {
			select {
			case <-d.stop:
				return
			default:
			}
		}
	}
}

// sweep reclaims up to janitorBatch expired entries and reports whether
// more are due.
func (sh *memShard) sweep(now int64) (more bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for n := 0; len(sh.exp) > 0 && sh.exp[0].at <= now; n++ {
		if n == janitorBatch {
			return true
		}
		it := heap.Pop(&sh.exp).(expItem)
		switch {
		case it.task != nil:
			sh.drop(it.task, now)
		case it.owner != "":
			if o := sh.owners[it.owner]; o != nil && len(o.tasks) == 0 && o.lastScore < now {
				delete(sh.owners, it.owner)
			}
		case it.srec != "":
			if r := sh.srec[it.srec]; r != nil && r.exp <= now {
				delete(sh.srec, it.srec)
			}
		default:
			if r, ok := sh.sess[it.session]; ok && r.exp <= now {
				delete(sh.sess, it.session)
			}
		}
	}
	return false
}

// drop removes an expired task and everything that expires with it;
// sh.mu is held.
func (sh *memShard) drop(t *memTask, now int64) {
	o := sh.owners[t.owner]
	if o == nil || o.tasks[t.id] != t {
		return
	}
	delete(o.tasks, t.id)
	delete(o.live, t.id)
	if t.leaseIdx >= 0 {
		heap.Remove(&sh.leases, t.leaseIdx)
	}
	o.unqueue(t)
	for _, p := range t.pend {
		if o.pending[p] == t.id {
			delete(o.pending, p)
		}
	}
	t.gone = true
	t.queue, t.inbox, t.out, t.pend, t.inputs = nil, nil, nil, nil, nil
	o.gone++
	if o.gone > 32 && 2*o.gone > len(o.index) {
		kept := o.index[:0]
		for _, x := range o.index {
			if !x.gone {
				kept = append(kept, x)
			}
		}
		clear(o.index[len(kept):])
		o.index, o.gone = kept, 0
	}
	if len(o.tasks) == 0 {
		// Keep the owner's last score while a task created in the same
		// millisecond could still get a smaller one (creation order must
		// stay strict for cursors already issued).
		if o.lastScore < now {
			delete(sh.owners, t.owner)
		} else {
			heap.Push(&sh.exp, expItem{at: o.lastScore + 1, owner: t.owner})
		}
	}
}

// expItem is one entry of a shard's expiry heap: a task (task set), an
// owner whose empty state may go (owner set), a session's record
// (srec set), or a session's protocol version (session).
type expItem struct {
	at      int64
	task    *memTask
	owner   string
	srec    string
	session string
}

type expHeap []expItem

func (h expHeap) Len() int           { return len(h) }
func (h expHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expHeap) Push(x any)        { *h = append(*h, x.(expItem)) }
func (h *expHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = expItem{}
	*h = old[:len(old)-1]
	return it
}

// leaseHeap orders a shard's non-terminal tasks by lease deadline; each
// task knows its index (leaseIdx) so Renew and end can fix or remove it.
type leaseHeap []*memTask

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].lease < h[j].lease }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].leaseIdx, h[j].leaseIdx = i, j
}
func (h *leaseHeap) Push(x any) {
	t := x.(*memTask)
	t.leaseIdx = len(*h)
	*h = append(*h, t)
}
func (h *leaseHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.leaseIdx = -1
	*h = old[:len(old)-1]
	return t
}
