package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/sse"
)

// connTracker records the remote address of each upstream request, to see
// whether the proxy reused its connection.
type connTracker struct {
	mu    sync.Mutex
	addrs []string
}

func (c *connTracker) add(rc *fasthttp.RequestCtx) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addrs = append(c.addrs, rc.RemoteAddr().String())
}

func (c *connTracker) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.addrs...)
}

// An SSE answer that has arrived whole goes to the client in one piece
// with a Content-Length (H-06: still text/event-stream, same bytes), and
// the upstream connection is reused. The upstream writes each answer,
// headers and chunked body, in one write, so the whole answer is there
// when its header is read.
func TestRelayBufferedAnswer(t *testing.T) {
	const event = "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	var conns atomic.Int32
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		for {
			if _, _, err := readRawRequest(br); err != nil {
				return
			}
			answer := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(event), event)
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
	tp := newTestProxy(t, nil, withTCP(), withUpstreamURL(url))
	for i := range 3 {
		resp := tp.do(newPost(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{}}`))
		if resp.StatusCode() != fasthttp.StatusOK || string(resp.Body()) != event {
			t.Fatalf("answer %d: %d %q, want 200 %q", i, resp.StatusCode(), resp.Body(), event)
		}
		if ct := string(resp.Header.ContentType()); ct != "text/event-stream" {
			t.Errorf("answer %d: Content-Type %q", i, ct)
		}
		if cl := resp.Header.ContentLength(); cl != len(event) {
			t.Errorf("answer %d: Content-Length %d, want %d (sent whole, not chunked)", i, cl, len(event))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("upstream connections: %d, want one, reused", n)
	}
}

// An SSE answer whose end comes after its event is streamed: the event
// reaches the client at once, before the upstream ends the body, whether
// the end follows soon (no watch on the client) or late (the client's
// connection is watched meanwhile, and the watch ends cleanly with the
// answer); either way the upstream connection is reused (H-06).
func TestRelayStreamsUnfinishedAnswer(t *testing.T) {
	const event = "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	for _, gap := range []time.Duration{5 * time.Millisecond, 300 * time.Millisecond} {
		t.Run(gap.String(), func(t *testing.T) {
			var seen connTracker
			tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
				seen.add(rc)
				rc.SetContentType("text/event-stream")
				rc.SetBodyStreamWriter(func(w *bufio.Writer) {
					_, _ = w.WriteString(event)
					_ = w.Flush()
					time.Sleep(gap) // the end of the body comes this much later
				})
			}, withTCP())
			for i := range 2 {
				start := time.Now()
				resp := tp.doStream(newPost(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{}}`))
				if cl := resp.Header.ContentLength(); cl != -1 {
					t.Errorf("answer %d: Content-Length %d, want a chunked stream", i, cl)
				}
				r := sse.NewReader(resp.BodyStream(), 0)
				ev, err := r.Next()
				if err != nil || string(ev.Raw) != event {
					t.Fatalf("answer %d: event %v, %v", i, ev, err)
				}
				if gap > 100*time.Millisecond && time.Since(start) >= gap {
					t.Errorf("answer %d: event arrived after %v, not before the end of the body", i, time.Since(start))
				}
				if _, err := r.Next(); err == nil {
					t.Fatalf("answer %d: more than one event", i)
				}
				_ = resp.CloseBodyStream()
				waitFor(t, 5*time.Second, "the upstream connection back in the pool", func() bool { n, _ := tp.h.idleConns(); return n == 1 })
			}
			if a := seen.get(); len(a) != 2 || a[0] != a[1] {
				t.Errorf("upstream connections %v: want one, reused", a)
			}
		})
	}
}
