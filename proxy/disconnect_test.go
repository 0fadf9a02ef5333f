package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"
)

// streamingUpstream is a hand-made upstream on loopback TCP: it answers
// every request with the headers of an SSE stream and one event, then
// reads its connection until the proxy closes it, which it reports on
// closed. It stands for an upstream that routes notifications to an open
// stream (mcp-go servers do) and must learn at once that nobody reads it.
type streamingUpstream struct {
	ln     net.Listener
	closed chan string // the request line of each stream whose connection closed
	wg     sync.WaitGroup
}

func newStreamingUpstream(t *testing.T) *streamingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &streamingUpstream{ln: ln, closed: make(chan string, 16)}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				u.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); u.wg.Wait() })
	return u
}

func (u *streamingUpstream) url() string { return "http://" + u.ln.Addr().String() + "/mcp" }

func (u *streamingUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	n := 0
	for { // headers; the body (if any) is small and left unread
		l, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(strings.ToLower(l), "content-length:") {
			_, _ = fmt.Sscan(strings.TrimSpace(l[len("content-length:"):]), &n)
		}
		if l == "\r\n" {
			break
		}
	}
	if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
		return
	}
	ev := "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"hi\"}}\n\n"
	if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev); err != nil {
		return
	}
	// Block until the proxy closes the connection (or the test ends).
	_ = c.SetReadDeadline(time.Now().Add(8 * time.Second))
	_, _ = io.Copy(io.Discard, br)
	u.closed <- strings.TrimSpace(line)
}

// A client that closes a streamed answer (a GET stream, passed through or
// merged with task messages, and a POST's SSE answer) makes taskgate close
// its upstream connection at once, not when a later write to the client
// fails: the upstream then stops sending into a stream nobody reads.
func TestClientDisconnectReachesUpstream(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  string
	}{
		{"GET stream passed through", "GET /mcp HTTP/1.1\r\nHost: gw\r\nAccept: text/event-stream\r\nMcp-Session-Id: s1\r\n\r\n"},
		{"GET stream of a tasks session", "GET /mcp HTTP/1.1\r\nHost: gw\r\nAccept: text/event-stream\r\nMcp-Session-Id: s1\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"},
		{"POST answer streamed", "POST /mcp HTTP/1.1\r\nHost: gw\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nMcp-Session-Id: s1\r\nContent-Length: 58\r\n\r\n" +
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newStreamingUpstream(t)
			// Keep-alive comments far away: only the disconnect itself
			// can close the upstream stream within the test.
			tp := newTestProxy(t, nil, withTCP(), withUpstreamURL(up.url()),
				withConfig(func(c *Config) { c.KeepAlive = time.Hour }))
			c, err := tp.dial()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.req); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			for { // read up to the upstream's event
				l, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("reading the stream: %v", err)
				}
				if strings.Contains(l, "notifications/message") {
					break
				}
			}
			select {
			case l := <-up.closed:
				t.Fatalf("upstream stream %q closed while the client still reads", l)
			default:
			}
			c.Close()
			select {
			case <-up.closed:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream stream stayed open after the client closed its connection")
			}
		})
	}
}

// A tasks/result waiting for a JSON answer ends when its client leaves
// (instead of waiting for the task, which may run for hours).
func TestClientDisconnectEndsResultWait(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "block", `{}`, `{}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: e.h.ServeFastHTTP}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		// The Handler first (a wait still blocked ends with it), then the
		// server waiting for that request.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.h.Close(ctx)
		_ = srv.Shutdown()
	})
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tasks/result","params":{"taskId":%q}}`, task.TaskID)
	req := "POST /mcp HTTP/1.1\r\nHost: gw\r\nAccept: application/json\r\nContent-Type: application/json\r\nMcp-Protocol-Version: 2025-11-25\r\n"
	for k, v := range alice {
		req += k + ": " + v + "\r\n"
	}
	req += fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
	before := testutil.ToFloat64(e.h.m.waiters)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 5*time.Second, func() bool { return testutil.ToFloat64(e.h.m.waiters) == before+1 }, "the tasks/result wait")
	c.Close()
	pollUntil(t, 5*time.Second, func() bool { return testutil.ToFloat64(e.h.m.waiters) == before }, "the wait to end after the client left")
}
