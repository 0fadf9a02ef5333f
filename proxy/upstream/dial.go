package upstream

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/taskgate/taskgate/proxy/sysconn"
)

// tlsConfig completes base (nil: defaults) for an https upstream named
// host: the URL's host as ServerName unless set, TLS 1.2 or newer unless a
// minimum is set.
func tlsConfig(base *tls.Config, host string) *tls.Config {
	c := &tls.Config{}
	if base != nil {
		c = base.Clone()
	}
	if c.ServerName == "" {
		c.ServerName = host
	}
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS12
	}
	return c
}

// dialSocket is the default dial: a TCP connection whose reads and writes
// are direct system calls unless Options.NetIO.
func (c *Client) dialSocket(ctx context.Context) (net.Conn, error) {
	conn, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	if !c.o.NetIO {
		conn = sysconn.Wrap(conn)
	}
	return conn, nil
}

// dialIdle dials the upstream and wraps the connection so that every read
// waits at most StreamIdleTimeout (fasthttp's own ReadTimeout would cover
// the whole body and cut long SSE streams). addr is ignored: there is one
// upstream (it is HostClient.Dial's signature). The dial is bounded by
// DialTimeout, not by the caller's life: messages to the upstream at
// shutdown (notifications/cancelled) still need one.
func (c *Client) dialIdle(string) (net.Conn, error) {
	conn, err := c.dial(context.Background())
	if err != nil {
		return nil, err
	}
	return &idleConn{Conn: conn, idle: c.o.StreamIdleTimeout, lifetime: c.o.StreamMaxLifetime}, nil
}

// dialPass opens a pass-through connection: idle and lifetime limits on
// every read (dialIdle), TLS when the upstream is https.
func (c *Client) dialPass() (*conn, error) {
	nc, err := c.dialIdle("")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.o.DialTimeout)
	defer cancel()
	if nc, err = c.handshake(ctx, nc); err != nil {
		return nil, err
	}
	return newConn(nc), nil
}

// dialBackground opens a connection for background calls.
func (c *Client) dialBackground(ctx context.Context) (net.Conn, error) {
	nc, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	return c.handshake(ctx, nc)
}

// handshake returns nc as is for an http upstream, and nc after a TLS
// handshake for an https one (nc is closed if the handshake fails).
func (c *Client) handshake(ctx context.Context, nc net.Conn) (net.Conn, error) {
	if !c.isTLS {
		return nc, nil
	}
	tc := tls.Client(nc, c.tlsConf)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return tc, nil
}

// idleConn bounds reads on an upstream connection: each read waits at most
// idle, and an answer may last at most lifetime from the moment its request
// was written (HTTP/1.1 without pipelining: a write starts a new exchange).
// It is used by one goroutine at a time, as fasthttp uses connections.
type idleConn struct {
	net.Conn
	idle, lifetime time.Duration
	start          time.Time
	// until, when set, is an earlier deadline for reads (a streamed
	// answer's short wait before it watches its client, Relayed.Read).
	until time.Time
	// deadline is the read deadline fasthttp sets for a request with a
	// timeout (DoTimeout: Post, Delete, DeleteSession); zero when none.
	// Read keeps it: the idle bound alone would let an upstream that never
	// answers hold such a request for StreamIdleTimeout.
	deadline time.Time
	// holdWrite makes the next write a sysconn WriteLater: Relay reads the
	// answer right after writing a request.
	holdWrite bool
}

func (c *idleConn) Write(p []byte) (int, error) {
	c.start = time.Now()
	if c.holdWrite {
		c.holdWrite = false
		if sc, ok := c.Conn.(*sysconn.Conn); ok {
			return sc.WriteLater(p)
		}
	}
	return c.Conn.Write(p)
}

// SetReadDeadline records t for Read, which applies the earliest of its
// bounds before each read.
func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines, the read one as SetReadDeadline does.
func (c *idleConn) SetDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetDeadline(t)
}

func (c *idleConn) Read(p []byte) (int, error) {
	now := time.Now()
	dl := now.Add(c.idle)
	if end := c.start.Add(c.lifetime); !c.start.IsZero() && end.Before(dl) {
		dl = end
	}
	if !c.until.IsZero() && c.until.Before(dl) {
		dl = c.until
	}
	if !c.deadline.IsZero() && c.deadline.Before(dl) {
		dl = c.deadline
	}
	if err := c.Conn.SetReadDeadline(dl); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}
