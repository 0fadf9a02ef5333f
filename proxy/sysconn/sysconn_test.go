//go:build linux

package sysconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pair returns a wrapped client connection and the plain server end.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	w, ok := Wrap(c).(*Conn)
	if !ok {
		t.Fatalf("Wrap(%T) did not give a *Conn", c)
	}
	t.Cleanup(func() { w.Close(); srv.Close() })
	return w, srv
}

func TestReadWriteEOF(t *testing.T) {
	c, srv := pair(t)
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(srv, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("server read %q, %v", buf, err)
	}
	if _, err := srv.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("Read %q, %v", buf, err)
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Errorf("Read(nil) = %d, %v", n, err)
	}
	srv.Close()
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("Read after peer close = %d, %v; want 0, io.EOF", n, err)
	}
}

// A read that would block waits in the poller and honours the deadline
// like net.Conn: a timeout error that matches os.ErrDeadlineExceeded and
// leaves the connection usable.
func TestReadDeadline(t *testing.T) {
	c, srv := pair(t)
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past deadline: %v; want a timeout", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Errorf("error %v: want a *net.OpError with Op read", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	go srv.Write([]byte("late"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "late" {
		t.Fatalf("Read after a timeout = %q, %v", buf, err)
	}
}

// armed returns the read deadline the poller has.
func (s *Conn) armed() time.Time {
	s.rdMu.Lock()
	defer s.rdMu.Unlock()
	return s.rdArmed
}

// waitArmed polls until the armed read deadline is want (Read re-arms it
// after a lazily armed one fired).
func waitArmed(t *testing.T, c *Conn, want time.Time) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !c.armed().Equal(want); {
		if time.Now().After(end) {
			t.Fatalf("armed deadline %v, want %v", c.armed(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Read deadlines are armed lazily: a later deadline than the armed one
// (far away) only records what is wanted, and the count of timer updates
// stays at one for a server that moves its deadline on every request.
func TestReadDeadlineLazy(t *testing.T) {
	c, _ := pair(t)
	first := time.Now().Add(time.Hour)
	if err := c.SetReadDeadline(first); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := c.SetReadDeadline(time.Now().Add(2*time.Hour + time.Duration(i))); err != nil {
			t.Fatal(err)
		}
	}
	if !c.armed().Equal(first) {
		t.Errorf("armed %v after later deadlines, want the first, %v", c.armed(), first)
	}
	// An earlier deadline is armed at once.
	earlier := time.Now().Add(time.Minute)
	if err := c.SetReadDeadline(earlier); err != nil || !c.armed().Equal(earlier) {
		t.Errorf("armed %v, %v after an earlier deadline, want %v", c.armed(), err, earlier)
	}
}

// A lazily armed deadline that fires before the one asked for does not end
// the Read: it re-arms and waits on, for data or for the deadline asked
// for (zero: none).
func TestReadDeadlineFiresEarly(t *testing.T) {
	defer func(v time.Duration) { lazyNear = v }(lazyNear)
	lazyNear = 0 // leave even a near deadline armed, so that it fires early
	for _, later := range []time.Time{time.Now().Add(time.Hour), {}} {
		c, srv := pair(t)
		if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if err := c.SetReadDeadline(later); err != nil {
			t.Fatal(err)
		}
		type res struct {
			b   string
			err error
		}
		got := make(chan res, 1)
		go func() {
			b := make([]byte, 4)
			n, err := c.Read(b)
			got <- res{string(b[:n]), err}
		}()
		waitArmed(t, c, later) // the 20 ms deadline fired and Read re-armed
		select {
		case r := <-got:
			t.Fatalf("later %v: Read ended early: %q, %v", later, r.b, r.err)
		default:
		}
		if _, err := srv.Write([]byte("data")); err != nil {
			t.Fatal(err)
		}
		if r := <-got; r.err != nil || r.b != "data" {
			t.Errorf("later %v: Read = %q, %v; want data", later, r.b, r.err)
		}
	}
}

// An earlier deadline set while a Read waits ends it, as with net.Conn;
// a deadline asked for that has passed when the armed one fires is a
// timeout.
func TestReadDeadlineInterrupts(t *testing.T) {
	c, _ := pair(t)
	if err := c.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 4))
		errc <- err
	}()
	if err := c.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Read after an earlier deadline: %v, want a timeout", err)
	}

	defer func(v time.Duration) { lazyNear = v }(lazyNear)
	lazyNear = 0
	c2, _ := pair(t)
	start := time.Now()
	_ = c2.SetReadDeadline(start.Add(10 * time.Millisecond))
	_ = c2.SetReadDeadline(start.Add(40 * time.Millisecond)) // lazy: fires at 10 ms, re-armed to 40
	_, err := c2.Read(make([]byte, 4))
	if !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) < 40*time.Millisecond {
		t.Errorf("Read = %v after %v; want a timeout at the later deadline, 40 ms", err, time.Since(start))
	}
}

// Writes larger than the socket buffers and than maxWrite wait for the
// reader (EAGAIN, then the poller) and arrive whole and in order.
func TestLargeWriteWaitsForReader(t *testing.T) {
	c, srv := pair(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // let the writer fill the buffers first
		b, _ := io.ReadAll(io.LimitReader(srv, int64(len(data))))
		got <- b
	}()
	n, err := c.Write(data)
	if err != nil || n != len(data) {
		t.Fatalf("Write = %d, %v; want %d", n, err, len(data))
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("server got %d bytes, not the data written", len(b))
	}
}

// Close wakes a goroutine blocked in Read, as with net.Conn.
func TestCloseUnblocksRead(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // let the reader park (either way the test holds)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read after Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked 5s after Close")
	}
}

// One reader and one writer may run at once.
func TestConcurrentReadWrite(t *testing.T) {
	c, srv := pair(t)
	go io.Copy(srv, srv) // echo
	const total = 1 << 20
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		chunk := bytes.Repeat([]byte{'x'}, 1000)
		for sent := 0; sent < total; sent += len(chunk) {
			if _, err := c.Write(chunk[:min(len(chunk), total-sent)]); err != nil {
				t.Errorf("Write: %v", err)
				return
			}
		}
	}()
	n, err := io.Copy(io.Discard, io.LimitReader(c, total))
	wg.Wait()
	if err != nil || n != total {
		t.Fatalf("read back %d bytes, %v; want %d", n, err, total)
	}
}

func TestWriteToResetPeer(t *testing.T) {
	c, srv := pair(t)
	srv.(*net.TCPConn).SetLinger(0)
	srv.Close() // RST
	var err error
	for range 100 { // the first writes may still be accepted locally
		if _, err = c.Write([]byte("x")); err != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write to a reset peer: %v; want ECONNRESET or EPIPE", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Errorf("error %v: want a *net.OpError with Op write", err)
	}
}

func TestWrapLeavesOtherConns(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Error("Wrap changed a net.Pipe connection")
	}
}

func TestListenerWraps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listener{Listener: ln}
	defer l.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*Conn); !ok {
		t.Fatalf("Accept gave %T, want *Conn", c)
	}
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "hi" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// A read and a write with nothing to wait for make no allocation.
func TestAllocs(t *testing.T) {
	c, srv := pair(t)
	buf := make([]byte, 64)
	msg := []byte("hello")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(srv, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("%.1f allocations per round trip, want 0", allocs)
	}
}

// A write held by WriteLater goes out with the next Read, which then waits
// for the answer; the peer sees writes in order.
func TestWriteLater(t *testing.T) {
	c, srv := pair(t)
	go func() { // answers each 4-byte request after a pause, upper-cased
		buf := make([]byte, 4)
		for {
			if _, err := io.ReadFull(srv, buf); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
			if _, err := srv.Write(bytes.ToUpper(buf)); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 4)
	for _, req := range []string{"abcd", "efgh", "ijkl"} {
		if n, err := c.WriteLater([]byte(req)); n != 4 || err != nil {
			t.Fatalf("WriteLater = %d, %v", n, err)
		}
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != strings.ToUpper(req) {
			t.Fatalf("answer to %s = %q, %v", req, buf, err)
		}
	}
	// Held, then a plain Write: both go out, in order, before the Read.
	c.WriteLater([]byte("mnop"))
	if _, err := c.Write([]byte("qrst")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MNOP", "QRST"} {
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
			t.Fatalf("answer = %q, %v; want %s", buf, err, want)
		}
	}
	// Larger than maxHeld: written at once, no Read needed.
	big := bytes.Repeat([]byte("x"), maxHeld+1)
	got := make(chan int, 1)
	srv2c, srv2 := pair(t)
	go func() {
		n, _ := io.ReadFull(srv2, make([]byte, len(big)))
		got <- n
	}()
	if n, err := srv2c.WriteLater(big); n != len(big) || err != nil {
		t.Fatalf("WriteLater(big) = %d, %v", n, err)
	}
	if n := <-got; n != len(big) {
		t.Fatalf("peer got %d bytes of a large WriteLater without a Read", n)
	}
}

// A held write to a reset peer fails the Read with the write's error.
func TestWriteLaterToResetPeer(t *testing.T) {
	c, srv := pair(t)
	srv.(*net.TCPConn).SetLinger(0)
	srv.Close()
	var err error
	for range 100 { // the first writes may still be accepted locally
		c.WriteLater([]byte("x"))
		if _, err = c.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Read after a held write to a reset peer: %v; want ECONNRESET or EPIPE", err)
	}
}

func TestWriteLaterAllocs(t *testing.T) {
	c, srv := pair(t)
	go io.Copy(srv, srv) // echo
	buf := make([]byte, 5)
	msg := []byte("hello")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.WriteLater(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("%.1f allocations per held write and read, want 0", allocs)
	}
}

// HoldNextWrite holds one write for the next Read; Close sends what is
// still held (a server that answers, then closes).
func TestHoldNextWrite(t *testing.T) {
	c, srv := pair(t)
	c.HoldNextWrite()
	if n, err := c.Write([]byte("answer")); n != 6 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if _, err := c.Write([]byte("!")); err != nil { // not held: sends the held write first
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(srv, buf); err != nil || string(buf) != "answer!" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
	c.HoldNextWrite()
	c.Write([]byte("bye"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(srv)
	if err != nil || string(b) != "bye" {
		t.Fatalf("after Close the peer read %q, %v; want the held write", b, err)
	}
}

// WaitReadable returns once data is there without consuming it, at the end
// of the stream, and with a timeout at the read deadline; a Close from
// another goroutine unblocks it.
func TestWaitReadable(t *testing.T) {
	c, srv := pair(t)
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReadable(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WaitReadable with nothing to read = %v, want a timeout", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.WaitReadable() }()
	if _, err := srv.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitReadable = %v", err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("Read after WaitReadable = %q, %v; want the bytes it saw", buf, err)
	}
	srv.Close()
	if err := c.WaitReadable(); err != nil {
		t.Fatalf("WaitReadable at the end of the stream = %v, want nil (the Read tells the end)", err)
	}
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("Read = %v, want io.EOF", err)
	}

	c2, _ := pair(t)
	go func() { done <- c2.WaitReadable() }()
	c2.Close()
	if err := <-done; err == nil {
		t.Fatal("WaitReadable on a closed connection = nil, want an error")
	}
}
