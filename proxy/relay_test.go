package proxy

import (
	"bufio"
	"sync"
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
// the upstream connection is reused.
func TestRelayBufferedAnswer(t *testing.T) {
	const event = "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	var seen connTracker
	tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
		seen.add(rc)
		rc.SetContentType("text/event-stream")
		rc.SetBodyStreamWriter(func(w *bufio.Writer) { _, _ = w.WriteString(event) }) // one flush at the end
	}, withTCP())
	for i := range 2 {
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
	if a := seen.get(); len(a) != 2 || a[0] != a[1] {
		t.Errorf("upstream connections %v: want one, reused", a)
	}
}

// An SSE answer whose end follows its event within the wait is joined
// with it; one whose end comes later streams, the event first (H-06).
func TestRelayEndWait(t *testing.T) {
	const event = "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	for _, tc := range []struct {
		name     string
		wait     time.Duration
		gap      time.Duration
		buffered bool
	}{
		{"end within the wait", 10 * time.Second, 20 * time.Millisecond, true},
		{"end after the wait", time.Millisecond, 300 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen connTracker
			tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
				seen.add(rc)
				rc.SetContentType("text/event-stream")
				rc.SetBodyStreamWriter(func(w *bufio.Writer) {
					_, _ = w.WriteString(event)
					_ = w.Flush()
					time.Sleep(tc.gap) // the end of the body comes this much later
				})
			}, withTCP(), withHandler(func(h *Handler) { h.upClient().SetEndWait(tc.wait) }))
			for i := range 2 {
				start := time.Now()
				resp := tp.doStream(newPost(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{}}`))
				chunked := resp.Header.ContentLength() == -1
				r := sse.NewReader(resp.BodyStream(), 0)
				ev, err := r.Next()
				if err != nil || string(ev.Raw) != event {
					t.Fatalf("answer %d: event %v, %v", i, ev, err)
				}
				if !tc.buffered && time.Since(start) >= tc.gap {
					t.Errorf("answer %d: event arrived after %v, not before the end of the body", i, time.Since(start))
				}
				if chunked == tc.buffered {
					t.Errorf("answer %d: chunked = %v, want %v", i, chunked, !tc.buffered)
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
