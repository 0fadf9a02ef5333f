// Package sysconn wraps TCP connections so that their reads and writes are
// direct system calls on the non-blocking socket.
//
// A net.Conn read or write goes through the Go runtime's system-call
// protocol (entersyscall/exitsyscall): before the call the runtime may wake
// its monitor thread, and a call that lasts more than a few tens of
// microseconds (a loopback write does the receiver's TCP work inline) lets
// the monitor hand the processor to another thread. For a proxy that makes
// four to six short socket calls per request, this protocol costs more than
// the calls themselves on virtual machines where a thread switch is dear:
// measured on taskgate's 2-core test machine, a plain Go TCP relay went from
// 2.9 to 1.5 context switches and from 98 to 61-70 µs of CPU per proxied MCP
// request with Conn.
//
// Conn makes the same read(2) and write(2) calls through syscall.RawConn:
// a call that would block still parks the goroutine in the runtime's network
// poller and honours the connection's deadlines exactly as net.Conn does;
// only a call that can proceed skips the protocol. Socket calls on a
// non-blocking descriptor never sleep in the kernel; a write is split into
// pieces of at most maxWrite bytes so that none holds its processor long.
package sysconn

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// maxWrite bounds one write(2), so that no single call holds the
// goroutine's processor for long (a loopback write of 64 KiB takes tens of
// microseconds).
const maxWrite = 64 << 10

// Conn is a TCP connection whose Read and Write are direct system calls.
// Deadlines, addresses and Close are those of the wrapped connection. Like
// net.Conn, one Read and one Write may run at the same time, from
// different goroutines.
type Conn struct {
	net.Conn
	raw syscall.RawConn

	// Read state, used by one reader at a time (the poller's read lock).
	rbuf    []byte
	rn      int
	rerr    syscall.Errno
	readFn  func(fd uintptr) bool
	wbuf    []byte
	wn      int
	werr    syscall.Errno
	writeFn func(fd uintptr) bool
}

// Wrap returns c as a *Conn when c is a *net.TCPConn, and c itself
// otherwise (TLS, unix sockets, test pipes).
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	s := &Conn{Conn: c, raw: raw}
	s.readFn = s.doRead
	s.writeFn = s.doWrite
	return s
}

func (s *Conn) doRead(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.rbuf[0])), uintptr(len(s.rbuf)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.rn, s.rerr = int(n), e
		return true
	}
}

func (s *Conn) doWrite(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&s.wbuf[0])), uintptr(len(s.wbuf)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.wn, s.werr = int(n), e
		return true
	}
}

// Read reads like net.Conn.Read: io.EOF at the end of the stream, an
// *net.OpError otherwise (a timeout satisfies os.ErrDeadlineExceeded).
func (s *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rbuf = p
	err := s.raw.Read(s.readFn)
	s.rbuf = nil
	if err != nil {
		return 0, s.opError("read", err)
	}
	if s.rerr != 0 {
		return 0, s.opError("read", os.NewSyscallError("read", s.rerr))
	}
	if s.rn == 0 {
		return 0, io.EOF
	}
	return s.rn, nil
}

// Write writes all of p like net.Conn.Write, or returns the count written
// and an *net.OpError.
func (s *Conn) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		s.wbuf = p[:min(len(p), maxWrite)]
		err := s.raw.Write(s.writeFn)
		s.wbuf = nil
		if err != nil {
			return total, s.opError("write", err)
		}
		if s.werr != 0 {
			return total, s.opError("write", os.NewSyscallError("write", s.werr))
		}
		total += s.wn
		p = p[s.wn:]
	}
	return total, nil
}

// opError names the operation as net.Conn does ("read", not the raw
// connection's "raw-read"), keeping the cause for errors.Is.
func (s *Conn) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
}

// Listener wraps a listener so that the TCP connections it accepts are
// Conns.
type Listener struct{ net.Listener }

// Accept accepts the next connection and wraps it.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}
