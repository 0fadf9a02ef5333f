//go:build linux

package sysconn

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// A watch sees the peer's close while nobody reads; stop then returns,
// and the connection can still be used.
func TestWatchCloseSeesPeerClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(c *Conn) net.Conn
		data string // sent by the peer before closing
	}{
		{name: "sysconn", wrap: func(c *Conn) net.Conn { return c }},
		{name: "plain TCP", wrap: func(c *Conn) net.Conn { return c.Conn }},
		{name: "pending data first", wrap: func(c *Conn) net.Conn { return c }, data: "GET / HTTP/1.1\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			gone := make(chan struct{})
			stop := WatchClose(tc.wrap(c), func() { close(gone) })
			defer stop()
			if tc.data != "" {
				if _, err := io.WriteString(peer, tc.data); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-gone:
				t.Fatal("gone was called before the peer closed")
			case <-time.After(50 * time.Millisecond):
			}
			peer.Close()
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatal("the peer's close was not seen")
			}
		})
	}
}

// Data from the peer is not a close and is not consumed: after stop, the
// next reader reads it, without a deadline left over.
func TestWatchCloseLeavesData(t *testing.T) {
	c, peer := pair(t)
	called := false
	stop := WatchClose(c, func() { called = true })
	if _, err := io.WriteString(peer, "next request"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let the data arrive while watched
	stop()
	if called {
		t.Fatal("gone called for data")
	}
	buf := make([]byte, 12)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "next request" {
		t.Fatalf("read after stop: %q, %v", buf, err)
	}
	go func() { time.Sleep(20 * time.Millisecond); _, _ = io.WriteString(peer, "x") }()
	if _, err := c.Read(buf[:1]); err != nil {
		t.Fatalf("a read after stop timed out (deadline left over?): %v", err)
	}
}

// Connections without a socket are not watched; stop returns at once.
func TestWatchCloseNoSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	WatchClose(a, func() { t.Error("gone called on a pipe") })()
	WatchClose(tls.Server(a, &tls.Config{}), func() { t.Error("gone called on TLS over a pipe") })()
}
