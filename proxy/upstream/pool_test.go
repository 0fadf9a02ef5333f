package upstream

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestPoolClosesIdleOnTimer: connections idle for maxIdle are closed by
// the pool's timer without anyone asking the pool for one; a connection
// put back later re-arms it; close stops it.
func TestPoolClosesIdleOnTimer(t *testing.T) {
	p := &pool{max: 8, maxIdle: 50 * time.Millisecond}
	defer p.close()
	var peers []net.Conn
	putN := func(n int) {
		for range n {
			a, b := net.Pipe()
			peers = append(peers, b)
			p.put(newBgConn(a))
		}
	}
	waitClosed := func(peers []net.Conn) {
		t.Helper()
		for i, b := range peers {
			_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := b.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("idle connection %d: read %v, want EOF (closed by the pool)", i, err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for p.len() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still pooled", p.len())
			}
			time.Sleep(5 * time.Millisecond) // polling interval, not synchronization
		}
	}
	putN(3)
	waitClosed(peers)
	// Taken and put back: the timer is armed again.
	putN(1)
	if c := p.get(); c == nil {
		t.Fatal("get: no connection")
	} else {
		p.put(c)
	}
	waitClosed(peers[3:])
}
