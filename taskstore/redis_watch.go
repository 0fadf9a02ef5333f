package taskstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// errClosed is returned by Watch after Close.
var errClosed = errors.New("taskstore: store closed")

// unsubscribeTimeout bounds the UNSUBSCRIBE sent by a Watch's stop func,
// which has no context of its own.
const unsubscribeTimeout = 5 * time.Second

// Watch implements Store. Every script that changes a task publishes to
// the task's channel (P:{owner}:ev:<id>); Watch subscribes to it through
// the store's one shared *redis.PubSub and fans messages out locally.
//
// Contract: Watch returns only once Redis has confirmed the subscription,
// so a caller that calls Watch first and then re-reads the task (the store
// is the source of truth) cannot miss a change. Signals are coalesced
// (the channel has a buffer of one and sends never block) and may be
// spurious; after a pub/sub reconnect (go-redis resubscribes on its own)
// every watcher is signalled, since changes may have been published while
// the connection was down. The channel is never closed; Close signals it
// one last time. stop is idempotent and must be called.
//
// The task need not exist: watching an unknown id costs a subscription
// and is harmless. ctx bounds only the subscription; when it ends first,
// Watch fails with ErrUnavailable.
func (s *Redis) Watch(ctx context.Context, owner, id string) (<-chan struct{}, func(), error) {
	return s.WatchKinds(ctx, owner, id, AllEvents)
}

// WatchKinds implements Store: Watch, signalled only for task events whose
// kind is in kinds (0 = all; reconnects and Close always signal).
func (s *Redis) WatchKinds(ctx context.Context, owner, id string, kinds EventKind) (<-chan struct{}, func(), error) {
	if !validOwner(owner) || !validID(id) {
		return nil, nil, ErrNotFound
	}
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	ch := make(chan struct{}, 1)
	stop, err := s.watch(ctx, owner, id, kinds, &taskWatcher{ch: ch})
	if err != nil {
		return nil, nil, err
	}
	return ch, stop, nil
}

// WatchFunc implements Store: WatchKinds calling fn instead of signalling
// a channel, on the fan-out goroutine.
func (s *Redis) WatchFunc(ctx context.Context, owner, id string, kinds EventKind, fn func()) (func(), error) {
	if !validOwner(owner) || !validID(id) {
		return nil, ErrNotFound
	}
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	return s.watch(ctx, owner, id, kinds, &taskWatcher{fn: fn})
}

func (s *Redis) watch(ctx context.Context, owner, id string, kinds EventKind, w *taskWatcher) (func(), error) {
	ready, stop, err := s.hub.add(ctx, s.k.events(owner, id), w, nil, kinds, "", "")
	if err != nil {
		return nil, fmt.Errorf("taskstore: watch %s: %w", id, err)
	}
	select {
	case <-ready:
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("taskstore: watch %s: %w: %w", id, ErrUnavailable, context.Cause(ctx))
	}
}

// taskWatcher is one watcher of a task's events: a channel signalled
// without blocking (Watch, WatchKinds) or a function called (WatchFunc),
// under the store's lock.
type taskWatcher struct {
	ch   chan struct{}
	fn   func()
	once sync.Once // makes stop idempotent
}

func (w *taskWatcher) signal() {
	if w.fn != nil {
		w.fn()
		return
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// sessionBuffer is the capacity of a WatchSession channel.
const sessionBuffer = 64

// WatchSession implements Store. Scripts publish "q:<id>" (Enqueue,
// Requeue, SetListening clearing with messages left) and "s:<id>" (every
// status change) on the session's channel P:{owner}:sess:<session>; it
// shares Watch's subscription and fan-out.
//
// Contract as Watch: it returns once Redis confirmed the subscription, ctx
// bounds only the subscription (ErrUnavailable when it ends first), stop is
// idempotent and must be called, the channel is never closed. Events are
// never coalesced, but the fan-out never blocks either: when the channel
// (capacity 64) is one event short of full, an 'r' event takes the last
// slot and further events are dropped until the caller has read it; the
// caller's re-scan after reading 'r' covers them. 'r' also follows a
// pub/sub reconnect and Close. A re-scan is: QueuedTasks, then re-read the
// status of the tasks the caller reports on.
//
// session must be a valid session key (validSession); "" and other
// invalid values are an error.
func (s *Redis) WatchSession(ctx context.Context, owner, session string) (<-chan SessionEvent, func(), error) {
	if !validOwner(owner) || !validSession(session) {
		return nil, nil, errors.New("taskstore: watch session: invalid owner or session key")
	}
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	w := &sessWatcher{ch: make(chan SessionEvent, sessionBuffer)}
	ready, stop, err := s.hub.add(ctx, s.k.sessEvents(owner, session), nil, w, 0, owner, session)
	if err != nil {
		return nil, nil, fmt.Errorf("taskstore: watch session: %w", err)
	}
	select {
	case <-ready:
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("taskstore: watch session: %w: %w", ErrUnavailable, context.Cause(ctx))
	}
	// Subscribed first, registered second: a script that sees the
	// registration publishes to a channel this replica already receives.
	if err := s.registerListeners(ctx, owner, []string{session}); err != nil {
		stop()
		return nil, nil, wrapErr("watch session", "", err)
	}
	return w.ch, stop, nil
}

// Session listener registry. Scripts publish on a session channel only
// while the owner's registry (keys.sessListeners) says some replica
// listens; WatchSession registers its session for sessListenTTL, and the
// hub renews the registrations of its session channels every
// sessListenRefresh and after a pub/sub reconnect. A replica that dies
// stops renewing, and its entries lapse.
const (
	sessListenTTL     = 2 * time.Minute
	sessListenRefresh = 30 * time.Second
)

// registerListeners records that this replica listens on the sessions'
// channels of owner for sessListenTTL, one script.
func (s *Redis) registerListeners(ctx context.Context, owner string, sessions []string) error {
	now := s.nowMS()
	until := now + sessListenTTL.Milliseconds()
	step := keepStep.Milliseconds()
	keep := (until + step - 1) / step * step
	args := make([]any, 0, 3+len(sessions))
	args = append(args, now, until, keep)
	for _, sess := range sessions {
		args = append(args, sess)
	}
	return sessListenCmd.Run(ctx, s.rdb, []string{s.k.sessListeners(owner)}, args...).Err()
}

// sessWatcher is one WatchSession caller. Its fields are guarded by the
// hub's mu; only the fan-out (and close) send on ch.
type sessWatcher struct {
	ch chan SessionEvent
	// rescan: an 'r' is the last event in ch; events are dropped until ch
	// is empty (the 'r' was read, so the caller's re-scan covers them).
	rescan bool
}

// deliver sends ev without blocking. Since only deliver sends on ch, a
// watcher that is not in rescan state always has a free slot for an 'r'.
func (w *sessWatcher) deliver(ev SessionEvent) {
	if w.rescan {
		if len(w.ch) > 0 {
			return
		}
		w.rescan = false
	}
	if ev.Kind == SessionRescan || len(w.ch) >= cap(w.ch)-1 {
		ev, w.rescan = SessionEvent{Kind: SessionRescan}, true
	}
	select {
	case w.ch <- ev:
	default:
	}
}

// Task channel payloads, one byte each, published by the scripts.
const (
	payloadUpdate   = "u"
	payloadTerminal = "t"
	payloadMessage  = "m"
	payloadAnswer   = "a"
)

// payloadKind maps a task channel payload to its EventKind (AllEvents for
// an unknown payload, so no watcher misses it).
func payloadKind(p string) EventKind {
	switch p {
	case payloadUpdate:
		return EventUpdate
	case payloadTerminal:
		return EventTerminal
	case payloadMessage:
		return EventMessage
	case payloadAnswer:
		return EventAnswer
	}
	return AllEvents
}

// parseSessionEvent reads a session channel payload "<kind>:<task id>".
func parseSessionEvent(p string) (SessionEvent, bool) {
	if len(p) < 3 || p[1] != ':' || (p[0] != 'q' && p[0] != 's') || !validID(p[2:]) {
		return SessionEvent{}, false
	}
	return SessionEvent{Kind: SessionEventKind(p[0]), TaskID: p[2:]}, true
}

// hub is a Redis value's pub/sub fan-out: one *redis.PubSub, created on
// first use, channels subscribed and unsubscribed as watchers come and go.
type hub struct {
	rdb redis.UniversalClient
	// register renews session channel registrations (registerListeners),
	// grouped by owner; nil disables the renewal loop.
	register func(ctx context.Context, owner string, sessions []string) error
	kick     chan struct{} // asks the renewal loop to run now (after a reconnect)
	stopLoop chan struct{}
	loopDone chan struct{}

	mu      sync.Mutex
	ps      *redis.PubSub
	done    chan struct{} // closed when the fan-out goroutine returned
	closed  bool
	subs    map[string]*topic
	pending map[string]int // SUBSCRIBE commands sent but not yet confirmed
}

// topic is one subscribed channel and its local watchers: Watch's signal
// channels and WatchSession's event watchers (a channel name has only one
// kind, but the hub does not care).
type topic struct {
	watchers map[*taskWatcher]EventKind // watcher -> event kinds it wants (0 = all)
	sess     map[*sessWatcher]struct{}
	ready    chan struct{} // closed once Redis confirmed the subscription
	isReady  bool
	// owner and session name a session channel's registry entry ("" for a
	// task channel).
	owner, session string
}

// add registers ch or sw (one of them non-nil) for channel name,
// subscribing when it is the first watcher. ready is closed once the
// subscription is confirmed.
func (h *hub) add(ctx context.Context, name string, ch *taskWatcher, sw *sessWatcher, kinds EventKind, owner, session string) (ready <-chan struct{}, stop func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, errClosed
	}
	if h.ps == nil {
		h.start()
	}
	t := h.subs[name]
	if t == nil {
		t = &topic{watchers: map[*taskWatcher]EventKind{}, sess: map[*sessWatcher]struct{}{}, ready: make(chan struct{}),
			owner: owner, session: session}
		h.subs[name] = t
		h.pending[name]++
		// Sent under h.mu so SUBSCRIBE/UNSUBSCRIBE of one channel reach
		// Redis in the order of our bookkeeping. On a write error go-redis
		// keeps the channel and subscribes it again when it reconnects;
		// the confirmation then makes t ready (or ctx ends first).
		_ = h.ps.Subscribe(ctx, name)
	}
	if ch != nil {
		t.watchers[ch] = kinds
	}
	if sw != nil {
		t.sess[sw] = struct{}{}
	}
	if ch != nil { // the watcher's own Once: no allocation of its own
		return t.ready, func() { ch.once.Do(func() { h.remove(name, ch, nil) }) }, nil
	}
	var once sync.Once
	return t.ready, func() { once.Do(func() { h.remove(name, ch, sw) }) }, nil
}

func (h *hub) remove(name string, ch *taskWatcher, sw *sessWatcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.subs[name]
	if t == nil {
		return
	}
	delete(t.watchers, ch)
	delete(t.sess, sw)
	if len(t.watchers) > 0 || len(t.sess) > 0 {
		return
	}
	delete(h.subs, name)
	if h.closed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
	defer cancel()
	// go-redis forgets the channel before writing, so a failed write is
	// healed by the next reconnect (which does not resubscribe it).
	_ = h.ps.Unsubscribe(ctx, name)
}

// start creates the PubSub and the fan-out goroutine; h.mu is held. The
// goroutine ends when Close closes the PubSub (go-redis then closes the
// message channel).
func (h *hub) start() {
	h.ps = h.rdb.Subscribe(context.Background())
	h.subs = map[string]*topic{}
	h.pending = map[string]int{}
	h.done = make(chan struct{})
	msgs := h.ps.ChannelWithSubscriptions(redis.WithChannelSize(256))
	if h.register != nil {
		h.kick = make(chan struct{}, 1)
		h.stopLoop = make(chan struct{})
		h.loopDone = make(chan struct{})
		go h.renewLoop()
	}
	go func() {
		defer close(h.done)
		for m := range msgs {
			switch m := m.(type) {
			case *redis.Message:
				h.signal(m.Channel, m.Payload)
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					h.confirmed(m.Channel)
				}
			}
		}
	}()
}

// signal fans a message out: Watch channels get an empty signal (the
// payload is ignored), session watchers the parsed event (unparsable
// payloads are dropped).
func (h *hub) signal(name, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.subs[name]
	if t == nil {
		return
	}
	kind := payloadKind(payload)
	for w, kinds := range t.watchers {
		if kinds.has(kind) {
			w.signal()
		}
	}
	if len(t.sess) == 0 {
		return
	}
	if ev, ok := parseSessionEvent(payload); ok {
		for w := range t.sess {
			w.deliver(ev)
		}
	}
}

// confirmed handles a subscribe confirmation: the reply to our SUBSCRIBE
// (the topic becomes ready) or go-redis's resubscription after a reconnect
// (the topic was ready: wake its watchers, events may have been lost).
// pending keeps a late confirmation of an earlier, already unsubscribed
// incarnation of the channel from making a new topic ready too early.
func (h *hub) confirmed(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.pending[name]; n > 1 {
		h.pending[name] = n - 1
		return
	}
	delete(h.pending, name)
	t := h.subs[name]
	if t == nil {
		return
	}
	if !t.isReady {
		t.isReady = true
		close(t.ready)
		return
	}
	t.notify()
	if t.session != "" && h.kick != nil {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// renewLoop renews the registry entries of the hub's session channels
// every sessListenRefresh, and when kicked after a reconnect, until close.
func (h *hub) renewLoop() {
	defer close(h.loopDone)
	tick := time.NewTicker(sessListenRefresh)
	defer tick.Stop()
	for {
		select {
		case <-h.stopLoop:
			return
		case <-tick.C:
		case <-h.kick:
		}
		h.mu.Lock()
		byOwner := map[string][]string{}
		for _, t := range h.subs {
			if t.session != "" && t.isReady {
				byOwner[t.owner] = append(byOwner[t.owner], t.session)
			}
		}
		h.mu.Unlock()
		for owner, sessions := range byOwner {
			ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
			// A failed renewal is retried at the next tick; entries
			// outlive two missed ones.
			_ = h.register(ctx, owner, sessions)
			cancel()
		}
	}
}

// notify wakes every watcher after a reconnect or at Close: a signal for
// Watch, an 'r' for WatchSession.
func (t *topic) notify() {
	for w := range t.watchers {
		w.signal()
	}
	for w := range t.sess {
		w.deliver(SessionEvent{Kind: SessionRescan})
	}
}

// close stops the fan-out and signals all watchers once.
func (h *hub) close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	ps, done, stopLoop, loopDone := h.ps, h.done, h.stopLoop, h.loopDone
	for _, t := range h.subs {
		t.notify()
	}
	h.mu.Unlock()
	if ps == nil {
		return nil
	}
	if stopLoop != nil {
		close(stopLoop)
		<-loopDone
	}
	err := ps.Close()
	<-done
	if err != nil {
		return fmt.Errorf("taskstore: close pubsub: %w", err)
	}
	return nil
}
