package stdio

import "sync"

// queue holds messages from the child for one HTTP stream: a request's
// answer stream or a session's GET stream. The child's reader pushes (it
// never blocks on a slow client); the stream's writer takes. Safe for
// concurrent use.
type queue struct {
	mu   sync.Mutex
	msgs []queued
	// final: the last message pushed ends the stream. closed: the stream
	// ends after what is queued (cancelled, session over).
	final, closed bool
	// status, when set with a final message that ends the stream before
	// anything was sent, is the HTTP status to answer with.
	status int
	wake   chan struct{} // capacity 1: something changed
	max    int           // notifications kept at most (0: unbounded)
}

// queued is one message and whether it may be dropped when the queue is
// full (notifications may; requests and responses never).
type queued struct {
	msg       []byte
	droppable bool
}

func newQueue(max int) *queue { return &queue{wake: make(chan struct{}, 1), max: max} }

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// push adds msg; final marks it as the stream's last. It reports how many
// old notifications were dropped to make room, and false when the queue
// is already closed (msg is then not kept).
func (q *queue) push(msg []byte, droppable, final bool) (dropped int, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.final {
		return 0, false
	}
	q.msgs = append(q.msgs, queued{msg: msg, droppable: droppable})
	q.final = final
	if q.max > 0 && len(q.msgs) > q.max {
		dropped = q.dropOldest()
	}
	q.signal()
	return dropped, true
}

// dropOldest removes the oldest droppable messages until the queue fits.
func (q *queue) dropOldest() int {
	n := 0
	kept := q.msgs[:0]
	over := len(q.msgs) - q.max
	for _, m := range q.msgs {
		if over > 0 && m.droppable {
			over--
			n++
			continue
		}
		kept = append(kept, m)
	}
	clear(q.msgs[len(kept):])
	q.msgs = kept
	return n
}

// fail ends the stream with msg as its last message (a JSON-RPC error the
// proxy made) unless it has ended; status is the HTTP status to use if the
// answer has not started.
func (q *queue) fail(msg []byte, status int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.final {
		return
	}
	q.msgs = append(q.msgs, queued{msg: msg})
	q.final, q.status = true, status
	q.signal()
}

// close ends the stream after what is queued.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.signal()
}

// take returns the queued messages and whether the stream ends with them.
func (q *queue) take(dst [][]byte) ([][]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.msgs {
		dst = append(dst, m.msg)
	}
	clear(q.msgs)
	q.msgs = q.msgs[:0]
	return dst, q.final || q.closed
}

// peekSingleFinal reports whether the queue holds exactly the stream's
// final message and nothing else, with the HTTP status set by fail.
func (q *queue) peekSingleFinal() (msg []byte, status int, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.final && len(q.msgs) == 1 {
		return q.msgs[0].msg, q.status, true
	}
	return nil, 0, false
}

// empty reports whether nothing is queued and the stream goes on.
func (q *queue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs) > 0 || q.final || q.closed
}
