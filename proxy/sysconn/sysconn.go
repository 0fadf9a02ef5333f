//go:build linux

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
//
// The direct calls are built on Linux only. Elsewhere Wrap returns the
// connection unchanged (Conn's methods exist but are never reached) and
// WatchClose does nothing: taskgate builds and works there with the
// runtime's usual calls.
package sysconn

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// maxWrite bounds one write(2), so that no single call holds the
// goroutine's processor for long (a loopback write of 64 KiB takes tens of
// microseconds).
const maxWrite = 64 << 10

// maxHeld bounds what WriteLater copies (a request's headers and a small
// body); larger writes go out at once.
const maxHeld = 16 << 10

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

	// held is the unsent part of a write kept by WriteLater (in heldBuf)
	// for the next Read; heldFn sends it from within that Read.
	held     []byte
	heldBuf  []byte
	heldLeft bool          // the held write could not finish inside the Read
	heldErr  syscall.Errno // why, if it failed
	heldFn   func(fd uintptr) bool
	holdNext bool // HoldNextWrite was called
	// peekFn and peekBuf serve WaitReadable.
	peekFn  func(fd uintptr) bool
	peekBuf [1]byte
	// heldMu guards held against a Close from another goroutine.
	heldMu sync.Mutex

	// Read deadlines are armed lazily (SetReadDeadline). rdMu guards them:
	// a deadline may be set from another goroutine during a Read.
	rdMu    sync.Mutex
	rdWant  time.Time // the deadline asked for; zero: none
	rdArmed time.Time // the deadline the poller has; zero: none
}

// lazyNear: an armed read deadline closer than this is replaced at once
// by a later one (it would soon fire for nothing); a farther one is left to
// fire early. A variable for tests.
var lazyNear = time.Second

// SetReadDeadline sets the read deadline like net.Conn's, but updates the
// poller's timer only when the new deadline is earlier than the armed one,
// or the armed one is near (lazyNear). Servers set a read deadline before
// every request (fasthttp: the idle timeout, then the read timeout) and a
// proxy before every read from its upstream, each time a timer update in
// the runtime. A later deadline left unarmed makes the armed one fire
// early; Read then arms the deadline asked for and waits on, so reads time
// out exactly as with net.Conn.
func (s *Conn) SetReadDeadline(t time.Time) error {
	s.rdMu.Lock()
	defer s.rdMu.Unlock()
	s.rdWant = t
	if t.Equal(s.rdArmed) || !s.rdArmed.IsZero() && (t.IsZero() || t.After(s.rdArmed)) && time.Until(s.rdArmed) > lazyNear {
		return nil
	}
	if err := s.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	s.rdArmed = t
	return nil
}

// SetDeadline sets the read (see SetReadDeadline) and write deadlines.
func (s *Conn) SetDeadline(t time.Time) error {
	if err := s.SetReadDeadline(t); err != nil {
		return err
	}
	return s.Conn.SetWriteDeadline(t)
}

// rearm handles a read timeout: when the deadline asked for is later than
// the armed one that fired, it arms it and reports true (read again).
func (s *Conn) rearm(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	s.rdMu.Lock()
	defer s.rdMu.Unlock()
	want := s.rdWant
	if want.Equal(s.rdArmed) || !want.IsZero() && !time.Now().Before(want) {
		return false // the deadline asked for has passed
	}
	if s.Conn.SetReadDeadline(want) != nil {
		return false
	}
	s.rdArmed = want
	return true
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
	s.heldFn = s.doHeldWrite
	s.peekFn = s.doPeek
	return s
}

// rawIO makes one read(2) or write(2) (trap) of b on fd, again after
// EINTR. ok is false when the call would block (EAGAIN).
func rawIO(trap, fd uintptr, b []byte) (n int, e syscall.Errno, ok bool) {
	for {
		r, _, e := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, 0, false
		}
		return int(r), e, true
	}
}

func (s *Conn) doRead(fd uintptr) bool {
	n, e, ok := rawIO(syscall.SYS_READ, fd, s.rbuf)
	if ok {
		s.rn, s.rerr = n, e
	}
	return ok
}

func (s *Conn) doWrite(fd uintptr) bool {
	n, e, ok := rawIO(syscall.SYS_WRITE, fd, s.wbuf)
	if ok {
		s.wn, s.werr = n, e
	}
	return ok
}

// WriteLater keeps a copy of p to be written by the next Read, right before
// it waits for the answer, and reports p as written. It is for a request
// whose answer is read at once: a Read that follows a Write must first try
// the read system call (the poller only reports data arriving after its
// readiness was reset at the start of the Read), which fails with EAGAIN
// when the peer needs time to answer; written from inside the Read, after
// that reset, the request cannot be answered unnoticed, so the Read waits
// at once and saves that call. A write that cannot finish there (full
// socket buffer) finishes as a normal Write before the Read. A Write or a
// Close sends what is held first (Close waits at most closeWait). No other
// goroutine may write meanwhile. A p larger than maxHeld is written at
// once.
func (s *Conn) WriteLater(p []byte) (int, error) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if err := s.sendHeld(); err != nil {
		return 0, err
	}
	if len(p) > maxHeld {
		return s.write(p)
	}
	s.heldBuf = append(s.heldBuf[:0], p...)
	s.held = s.heldBuf
	return len(p), nil
}

// HoldNextWrite makes the next Write a WriteLater: for a server that
// writes a whole answer and then reads the next request (or closes).
func (s *Conn) HoldNextWrite() { s.holdNext = true }

// sendHeld writes what WriteLater still holds, the usual way. heldMu is
// held.
func (s *Conn) sendHeld() error {
	if len(s.held) == 0 {
		return nil
	}
	rest := s.held
	s.held = nil
	_, err := s.write(rest)
	return err
}

// Close sends a write still held (waiting at most closeWait for the
// peer to take it), then closes the connection.
func (s *Conn) Close() error {
	s.heldMu.Lock()
	if len(s.held) > 0 {
		_ = s.SetWriteDeadline(time.Now().Add(closeWait))
		_ = s.sendHeld()
	}
	s.heldMu.Unlock()
	return s.Conn.Close()
}

// closeWait bounds Close's wait to send a held write.
const closeWait = time.Second

func (s *Conn) doHeldWrite(fd uintptr) bool {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if len(s.held) == 0 {
		return s.doRead(fd)
	}
	for len(s.held) > 0 {
		n, e, ok := rawIO(syscall.SYS_WRITE, fd, s.held)
		switch {
		case !ok:
			s.heldLeft = true
			return true
		case e != 0:
			s.heldErr, s.heldLeft = e, true
			return true
		}
		s.held = s.held[n:]
	}
	s.held = nil
	return false // sent: wait for the answer without trying to read first
}

// Read reads like net.Conn.Read: io.EOF at the end of the stream, an
// *net.OpError otherwise (a timeout satisfies os.ErrDeadlineExceeded).
func (s *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rbuf = p
	err, werr := s.rawRead()
	s.rbuf = nil
	if werr != nil {
		return 0, werr
	}
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

// rawRead runs the read system call through the poller into s.rbuf,
// sending a held write first. It returns the read's error, or the error of
// a held write that failed.
func (s *Conn) rawRead() (err, werr error) {
	for {
		s.heldMu.Lock()
		fn := s.readFn
		if len(s.held) > 0 {
			fn = s.heldFn
		}
		s.heldMu.Unlock()
		err = s.raw.Read(fn)
		switch {
		case err == nil && s.heldLeft:
			// The held write did not finish inside the read: finish it
			// the usual way, then read the usual way.
			s.heldLeft = false
			s.heldMu.Lock()
			if e := s.heldErr; e != 0 {
				s.heldErr, s.held = 0, nil
				werr = s.opError("write", os.NewSyscallError("write", e))
			} else {
				werr = s.sendHeld()
			}
			s.heldMu.Unlock()
			if werr != nil {
				return nil, werr
			}
		case err != nil && s.rearm(err):
			// a lazily armed deadline fired early: wait on
		default:
			return err, nil
		}
	}
}

// WaitReadable waits, under the read deadline, until a Read would not
// block (data, the end of the stream or an error is there), without
// reading anything. A caller that waits long for an answer (a background
// call that runs for minutes) takes its read buffer only then. A write
// held by WriteLater is not sent: call it after a plain Write.
func (s *Conn) WaitReadable() error {
	for {
		err := s.raw.Read(s.peekFn)
		switch {
		case err == nil:
			return nil
		case s.rearm(err):
			// a lazily armed deadline fired early: wait on
		default:
			return s.opError("read", err)
		}
	}
}

// doPeek reports whether a read of fd would not block (recv with MSG_PEEK
// of one byte leaves the byte in the socket).
func (s *Conn) doPeek(fd uintptr) bool {
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.peekBuf[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true
	}
}

// Write writes all of p like net.Conn.Write, or returns the count written
// and an *net.OpError. A write held by WriteLater goes first.
func (s *Conn) Write(p []byte) (int, error) {
	if s.holdNext {
		s.holdNext = false
		return s.WriteLater(p)
	}
	s.heldMu.Lock()
	err := s.sendHeld()
	s.heldMu.Unlock()
	if err != nil {
		return 0, err
	}
	return s.write(p)
}

func (s *Conn) write(p []byte) (int, error) {
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

// CloseWrite sends a write still held, then shuts down the writing side
// of the connection (the peer reads the end of the stream).
func (s *Conn) CloseWrite() error {
	s.heldMu.Lock()
	err := s.sendHeld()
	s.heldMu.Unlock()
	if err != nil {
		return err
	}
	if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
