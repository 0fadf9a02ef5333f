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
// (minutes, for thousands of tasks at once), so their buffers are what an
// in-flight task costs: a 4 KiB reader (response headers and the stream)
// and no writer of their own (a pooled one writes the request). Readers of
// such a call's body (an SSE line reader) should use the same size.
const BackgroundReadBuf = 4 << 10

// newBgConn wraps a connection for background calls (bgPool); its bw is
// nil: RoundTrip writes with a writer from bgWriters.
func newBgConn(c net.Conn) *conn {
	return &conn{Conn: c, br: bufio.NewReaderSize(c, BackgroundReadBuf)}
}

// bgWriters holds the writers of background requests.
var bgWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}

// pool keeps idle upstream connections (LIFO). Safe for concurrent use.
type pool struct {
	mu      sync.Mutex
	idle    []*conn
	max     int
	maxIdle time.Duration
	closed  bool
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
	for _, c := range p.idle {
		_ = c.Close()
	}
	p.idle = nil
}
