package upstream

import (
	"bufio"
	"net"
	"sync"
	"time"
)

// conn is an upstream connection with its buffers, for background calls
// (bgPool) and pass-through (passPool).
type conn struct {
	net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

func newConn(c net.Conn) *conn {
	return &conn{Conn: c, br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriter(c)}
}

// BackgroundReadBuf is the size of a background call's read buffer.
// Background calls wait on their connection for as long as the call runs
// (minutes, for thousands of tasks at once), so what they hold while they
// wait is what an in-flight task costs: no writer of their own (a pooled
// one writes the request) and no reader either until the answer starts to
// arrive (see RoundTrip); then a 4 KiB reader from bgReaders (response
// headers and the stream), given back at Done. Readers of such a call's
// body (an SSE line reader) should use the same size.
const BackgroundReadBuf = 4 << 10

// newBgConn wraps a connection for background calls (bgPool); its bw is
// nil (RoundTrip writes with a writer from bgWriters) and so is its br
// while no call reads it.
func newBgConn(c net.Conn) *conn { return &conn{Conn: c} }

// bgWriters and bgReaders hold the writers of background requests and the
// readers of their answers.
var (
	bgWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
	bgReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, BackgroundReadBuf) }}
)

// takeReader gives c a pooled reader (background connections).
func (c *conn) takeReader() {
	if c.br == nil {
		c.br = bgReaders.Get().(*bufio.Reader)
		c.br.Reset(c.Conn)
	}
}

// dropReader gives c's pooled reader back and reports whether it held no
// unread bytes (background connections).
func (c *conn) dropReader() bool {
	if c.br == nil {
		return true
	}
	clean := c.br.Buffered() == 0
	c.br.Reset(nil)
	bgReaders.Put(c.br)
	c.br = nil
	return clean
}

// pool keeps idle upstream connections (LIFO): get takes the newest, and a
// connection idle for maxIdle is closed by a timer, not only when get
// meets it, so connections opened for a burst do not stay open after the
// traffic stops (an upstream keeps a socket and often a goroutine or
// process per connection). The timer is armed while the pool holds a
// connection and fires when the oldest one reaches maxIdle; no goroutine
// runs in between. Safe for concurrent use.
type pool struct {
	mu      sync.Mutex
	idle    []*conn // oldest first
	max     int
	maxIdle time.Duration
	closed  bool
	timer   *time.Timer // armed while idle is not empty
}

func (p *pool) get() *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		if time.Since(c.idleSince) < p.maxIdle {
			return c
		}
		_ = c.Close()
	}
	return nil
}

func (p *pool) put(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.max {
		_ = c.Close()
		return
	}
	c.idleSince = time.Now()
	p.idle = append(p.idle, c)
	if len(p.idle) == 1 {
		p.arm(p.maxIdle)
	}
}

// arm sets the timer to prune after d. Callers hold mu.
func (p *pool) arm(d time.Duration) {
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.prune)
		return
	}
	p.timer.Reset(d)
}

// prune closes the connections idle for maxIdle and re-arms the timer for
// the oldest one left. A timer that fires while the pool is empty (its
// connections were taken since) is not re-armed: the next put arms it.
func (p *pool) prune() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	now := time.Now()
	n := 0
	for n < len(p.idle) && now.Sub(p.idle[n].idleSince) >= p.maxIdle {
		_ = p.idle[n].Close()
		p.idle[n] = nil
		n++
	}
	if n > 0 {
		p.idle = append(p.idle[:0], p.idle[n:]...)
	}
	if len(p.idle) > 0 {
		p.arm(p.maxIdle - now.Sub(p.idle[0].idleSince))
	}
}

func (p *pool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	for _, c := range p.idle {
		_ = c.Close()
	}
	p.idle = nil
}
