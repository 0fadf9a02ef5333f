package sysconn

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// WatchClose calls gone, from another goroutine, as soon as the peer of c
// closes the connection or resets it, while nobody reads c: a server
// streaming an answer learns that its client left without waiting for a
// write to fail (which, with keep-alive comments, takes one keep-alive
// interval or more). Data the peer sends meanwhile (a pipelined request)
// is left unread for the next reader and does not count as a close.
//
// stop ends the watch and returns once it has ended; gone is not called
// after stop returns, and c may be read again. stop must be called, once,
// before anyone reads c again: the watch holds c's read side (it briefly
// sets a read deadline in the past to end, then clears the deadline). On
// connections without a socket (test pipes) and on systems where the
// close cannot be seen without reading (see peerClosed), WatchClose does
// nothing and stop returns at once.
func WatchClose(c net.Conn, gone func()) (stop func()) {
	raw := rawOf(c)
	if raw == nil || !canWatch {
		return func() {}
	}
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		closed := false
		check := func(fd uintptr) bool {
			if stopping.Load() {
				return true
			}
			closed = peerClosed(fd)
			return closed // false: wait until the socket changes state
		}
		// The server's read deadline for the request would end the watch
		// early: the watch clears it (the server sets its own before it
		// reads again), and again if a lazily armed one fires.
		for range 3 {
			if c.SetReadDeadline(time.Time{}) != nil {
				return
			}
			err := raw.Read(check)
			if err == nil || stopping.Load() || !errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
		}
		if closed && !stopping.Load() {
			gone()
		}
	}()
	return func() {
		stopping.Store(true)
		_ = c.SetReadDeadline(time.Unix(1, 0)) // wakes the poller wait
		<-done
		_ = c.SetReadDeadline(time.Time{})
	}
}

// rawOf returns the socket under c: through a TLS connection, a *Conn or
// any syscall.Conn; nil when there is none.
func rawOf(c net.Conn) syscall.RawConn {
	for range 4 {
		switch v := c.(type) {
		case *Conn:
			if v.raw != nil {
				return v.raw
			}
			c = v.Conn
		case interface{ NetConn() net.Conn }: // *tls.Conn
			c = v.NetConn()
		case syscall.Conn:
			raw, err := v.SyscallConn()
			if err != nil {
				return nil
			}
			return raw
		default:
			return nil
		}
	}
	return nil
}
