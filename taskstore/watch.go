package taskstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	return s.WatchKinds(ctx, owner, id, "")
}

// WatchKinds implements Store: Watch, signalled only for task events whose
// kind is in kinds ("" = all; reconnects and Close always signal).
func (s *Redis) WatchKinds(ctx context.Context, owner, id, kinds string) (<-chan struct{}, func(), error) {
	if !validOwner(owner) || !validID(id) {
		return nil, nil, ErrNotFound
	}
	ch := make(chan struct{}, 1)
	ready, stop, err := s.hub.add(ctx, s.k.events(owner, id), ch, nil, kinds)
	if err != nil {
		return nil, nil, fmt.Errorf("taskstore: watch %s: %w", id, err)
	}
	select {
	case <-ready:
		return ch, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("taskstore: watch %s: %w: %w", id, ErrUnavailable, context.Cause(ctx))
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
	w := &sessWatcher{ch: make(chan SessionEvent, sessionBuffer)}
	ready, stop, err := s.hub.add(ctx, s.k.sessEvents(owner, session), nil, w, "")
	if err != nil {
		return nil, nil, fmt.Errorf("taskstore: watch session: %w", err)
	}
	select {
	case <-ready:
		return w.ch, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("taskstore: watch session: %w: %w", ErrUnavailable, context.Cause(ctx))
	}
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
	if ev.Kind == 'r' || len(w.ch) >= cap(w.ch)-1 {
		ev, w.rescan = SessionEvent{Kind: 'r'}, true
	}
	select {
	case w.ch <- ev:
	default:
	}
}

// parseSessionEvent reads a session channel payload "<kind>:<task id>".
func parseSessionEvent(p string) (SessionEvent, bool) {
	if len(p) < 3 || p[1] != ':' || (p[0] != 'q' && p[0] != 's') || !validID(p[2:]) {
		return SessionEvent{}, false
	}
	return SessionEvent{Kind: p[0], TaskID: p[2:]}, true
}

// hub is a Redis value's pub/sub fan-out: one *redis.PubSub, created on
// first use, channels subscribed and unsubscribed as watchers come and go.
type hub struct {
	rdb redis.UniversalClient

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
	watchers map[chan struct{}]string // watcher -> event kinds it wants ("" = all)
	sess     map[*sessWatcher]struct{}
	ready    chan struct{} // closed once Redis confirmed the subscription
	isReady  bool
}

// add registers ch or sw (one of them non-nil) for channel name,
// subscribing when it is the first watcher. ready is closed once the
// subscription is confirmed.
func (h *hub) add(ctx context.Context, name string, ch chan struct{}, sw *sessWatcher, kinds string) (ready <-chan struct{}, stop func(), err error) {
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
		t = &topic{watchers: map[chan struct{}]string{}, sess: map[*sessWatcher]struct{}{}, ready: make(chan struct{})}
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
	var once sync.Once
	return t.ready, func() { once.Do(func() { h.remove(name, ch, sw) }) }, nil
}

func (h *hub) remove(name string, ch chan struct{}, sw *sessWatcher) {
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
	for ch, kinds := range t.watchers {
		if kinds != "" && (payload == "" || !strings.ContainsRune(kinds, rune(payload[0]))) {
			continue
		}
		select {
		case ch <- struct{}{}:
		default:
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
}

// notify wakes every watcher after a reconnect or at Close: a signal for
// Watch, an 'r' for WatchSession.
func (t *topic) notify() {
	for ch := range t.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	for w := range t.sess {
		w.deliver(SessionEvent{Kind: 'r'})
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
	ps, done := h.ps, h.done
	for _, t := range h.subs {
		t.notify()
	}
	h.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	if err != nil {
		return fmt.Errorf("taskstore: close pubsub: %w", err)
	}
	return nil
}
