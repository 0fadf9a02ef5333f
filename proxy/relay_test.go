package proxy

import (
	"bufio"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/sse"
)

func TestChunkedComplete(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"0\r\n\r\n", true},
		{"5\r\nhello\r\n0\r\n\r\n", true},
		{"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n", true},
		{"1A\r\n" + strings.Repeat("x", 26) + "\r\n0\r\n\r\n", true},
		{"5;ext=1\r\nhello\r\n0;last\r\n\r\n", true},
		{"5\r\nhello\r\n0\r\nTrailer: v\r\n\r\n", true},
		{"5\nhello\r\n0\n\n", true}, // bare LF line ends
		{"", false},
		{"5\r\nhel", false},
		{"5\r\nhello\r\n", false},
		{"5\r\nhello\r\n0\r\n", false},               // no end of the trailer section
		{"5\r\nhello\r\n0\r\nTrailer: v\r\n", false}, // trailer not ended
		{"zz\r\nhello\r\n0\r\n\r\n", false},          // not a size
		{"\r\n", false},
		{"123456789\r\nx\r\n0\r\n\r\n", false}, // absurd size
		{"5\r\nhello0\r\n\r\n", false},         // data runs into the size line
	}
	for _, tc := range tests {
		if got := chunkedComplete([]byte(tc.in)); got != tc.want {
			t.Errorf("chunkedComplete(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

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
			}, withTCP(), withHandler(func(h *Handler) { h.endWait = tc.wait }))
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
				waitFor(t, 5*time.Second, "the upstream connection back in the pool", func() bool { return tp.h.passPool.len() == 1 })
			}
			if a := seen.get(); len(a) != 2 || a[0] != a[1] {
				t.Errorf("upstream connections %v: want one, reused", a)
			}
		})
	}
}
