//go:build !linux

package sysconn

import (
	"errors"
	"net"
	"syscall"
)

// Conn is a TCP connection whose Read and Write would be direct system
// calls; off Linux, Wrap never makes one, and its methods only forward.
type Conn struct {
	net.Conn
	raw syscall.RawConn
}

// Wrap returns c unchanged off Linux.
func Wrap(c net.Conn) net.Conn { return c }

// WriteLater writes p at once off Linux.
func (s *Conn) WriteLater(p []byte) (int, error) { return s.Conn.Write(p) }

// WaitReadable returns at once off Linux (the caller then reads as usual).
func (s *Conn) WaitReadable() error { return nil }

// HoldNextWrite does nothing off Linux.
func (s *Conn) HoldNextWrite() {}

// CloseWrite shuts down the writing side of the connection.
func (s *Conn) CloseWrite() error {
	if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// Listener wraps a listener; off Linux its connections stay as accepted.
type Listener struct{ net.Listener }

// Accept accepts the next connection.
func (l Listener) Accept() (net.Conn, error) { return l.Listener.Accept() }
