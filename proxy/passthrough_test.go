package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/wire"
)

// rpcErrorBody is a JSON-RPC error response as the proxy writes it.
type rpcErrorBody struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeRPCError(tb testing.TB, body []byte) rpcErrorBody {
	tb.Helper()
	var e rpcErrorBody
	if err := json.Unmarshal(body, &e); err != nil {
		tb.Fatalf("answer %q is not a JSON-RPC error: %v", body, err)
	}
	if e.JSONRPC != "2.0" || e.Error.Code == 0 {
		tb.Fatalf("answer %q is not a JSON-RPC error", body)
	}
	return e
}

// TestPassThroughRequestUnchanged: everything taskgate does not intercept
// reaches the upstream as the client sent it (method, path, query, body,
// end-to-end headers incl. Host and Origin: H-02 checks stay the
// upstream's), and the answer comes back unchanged (H-05, H-06, H-13, H-17).
func TestPassThroughRequestUnchanged(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		uri        string
		body       string
		headers    []string
		status     int
		respHeader []string
		respBody   string
	}{
		{
			name:   "tools/call without task, JSON answer",
			method: "POST", uri: "http://gw.test/mcp",
			body:       `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`,
			headers:    []string{"Mcp-Session-Id", "sess-1", "Mcp-Protocol-Version", "2025-11-25", "Authorization", "Bearer tok", "Origin", "https://app.example", "X-Custom", "a, b"},
			status:     200,
			respHeader: []string{"Content-Type", "application/json", "Mcp-Session-Id", "sess-1", "X-Upstream", "yes"},
			respBody:   `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}`,
		},
		{
			name:   "unknown method, body bytes kept (whitespace, key order, escapes)",
			method: "POST", uri: "http://gw.test/mcp",
			body:       " {\"params\" : {\"x\":\"\\u00e9\"}, \"method\":\"resources/read\",\"id\":\"r\",\"jsonrpc\":\"2.0\"}\n",
			status:     200,
			respHeader: []string{"Content-Type", "application/json"},
			respBody:   `{"jsonrpc":"2.0","id":"r","result":{"contents":[]}}`,
		},
		{
			name:   "notification answered 202 (H-05)",
			method: "POST", uri: "http://gw.test/mcp",
			body:   `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			status: 202,
		},
		{
			name:   "client response answered 202 (H-05)",
			method: "POST", uri: "http://gw.test/mcp",
			body:   `{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept"}}`,
			status: 202,
		},
		{
			name:   "unauthorized with WWW-Authenticate (H-17)",
			method: "POST", uri: "http://gw.test/mcp",
			body:       `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			status:     401,
			respHeader: []string{"WWW-Authenticate", `Bearer resource_metadata="https://gw.test/.well-known/oauth-protected-resource"`, "Content-Type", "text/plain"},
			respBody:   "unauthorized",
		},
		{
			name:   "forbidden (H-17)",
			method: "POST", uri: "http://gw.test/mcp",
			body:       `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			status:     403,
			respHeader: []string{"WWW-Authenticate", `Bearer error="insufficient_scope"`},
		},
		{
			name:   "missing session 400 (H-13)",
			method: "POST", uri: "http://gw.test/mcp",
			body:       `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			status:     400,
			respHeader: []string{"Content-Type", "application/json"},
			respBody:   `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: missing session"}}`,
		},
		{
			name:   "ended session 404 (H-13)",
			method: "POST", uri: "http://gw.test/mcp",
			body:    `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			headers: []string{"Mcp-Session-Id", "gone"},
			status:  404,
		},
		{
			name:   "upstream error 500",
			method: "POST", uri: "http://gw.test/mcp",
			body:     `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			status:   500,
			respBody: "boom",
		},
		{
			name:   "GET stream 405 (H-10)",
			method: "GET", uri: "http://gw.test/mcp",
			headers: []string{"Accept", "text/event-stream", "Mcp-Session-Id", "s"},
			status:  405,
		},
		{
			name:   "GET stream resumed with Last-Event-ID (H-12)",
			method: "GET", uri: "http://gw.test/mcp",
			headers:    []string{"Accept", "text/event-stream", "Mcp-Session-Id", "s", "Last-Event-ID", "stream-3_17"},
			status:     200,
			respHeader: []string{"Content-Type", "text/event-stream", "Cache-Control", "no-cache"},
			respBody:   "id: stream-3_18\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n",
		},
		{
			name:   "DELETE session (H-13)",
			method: "DELETE", uri: "http://gw.test/mcp",
			headers: []string{"Mcp-Session-Id", "sess-9", "Mcp-Protocol-Version", "2025-11-25"},
			status:  200,
		},
		{
			name:   "other path with query passes untouched",
			method: "POST", uri: "http://gw.test/other/p%2Fq?x=1&y=%20z",
			body:       `not json at all`,
			headers:    []string{"Content-Type", "text/plain"},
			status:     200,
			respHeader: []string{"Content-Type", "text/plain"},
			respBody:   "ok",
		},
		{
			name:   "query on the MCP path",
			method: "POST", uri: "http://gw.test/mcp?tenant=a",
			body:   `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}`,
			status: 202,
		},
		{
			name:   "OAuth metadata GET on another path",
			method: "GET", uri: "http://gw.test/.well-known/oauth-protected-resource",
			status:     200,
			respHeader: []string{"Content-Type", "application/json"},
			respBody:   `{"resource":"https://gw.test/mcp"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
				rc.SetStatusCode(tc.status)
				for i := 0; i+1 < len(tc.respHeader); i += 2 {
					rc.Response.Header.Set(tc.respHeader[i], tc.respHeader[i+1])
				}
				rc.SetBodyString(tc.respBody)
			})
			r := newRequest(tc.method, tc.body, tc.headers...)
			r.SetRequestURI(tc.uri)
			resp := tp.do(r)

			got := tp.up.lastRequest(t)
			if diff := cmp.Diff(requestView(r), requestView(got)); diff != "" {
				t.Errorf("upstream request differs from the client's (-client +upstream):\n%s", diff)
			}
			if resp.StatusCode() != tc.status {
				t.Errorf("status = %d, want %d", resp.StatusCode(), tc.status)
			}
			for i := 0; i+1 < len(tc.respHeader); i += 2 {
				if v := string(resp.Header.Peek(tc.respHeader[i])); v != tc.respHeader[i+1] {
					t.Errorf("answer header %s = %q, want %q", tc.respHeader[i], v, tc.respHeader[i+1])
				}
			}
			if string(resp.Body()) != tc.respBody {
				t.Errorf("answer body = %q, want %q", resp.Body(), tc.respBody)
			}
		})
	}
}

// reqView is what must reach the upstream unchanged.
type reqView struct {
	Method  string
	URI     string
	Host    string
	Body    string
	Headers map[string]string
}

func requestView(r *fasthttp.Request) reqView {
	v := reqView{
		Method:  string(r.Header.Method()),
		URI:     string(r.Header.RequestURI()),
		Host:    string(r.Header.Host()),
		Body:    string(r.Body()),
		Headers: map[string]string{},
	}
	for k, val := range r.Header.All() {
		switch string(k) {
		case "Host", "Content-Length", "User-Agent":
			continue // compared separately, or set by the client library
		}
		v.Headers[string(k)] = string(val)
	}
	return v
}

// TestRewriteHost: Host reaches the upstream as sent, unless RewriteHost.
func TestRewriteHost(t *testing.T) {
	tests := []struct {
		name     string
		rewrite  bool
		wantHost string
	}{
		{name: "default keeps the client's Host", wantHost: "gw.test"},
		{name: "RewriteHost sends the upstream's", rewrite: true, wantHost: "upstream.test"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestProxy(t, jsonAnswer(`{}`), withConfig(func(c *Config) { c.RewriteHost = tc.rewrite }))
			tp.do(newPost(`{"jsonrpc":"2.0","id":1,"method":"ping"}`, "Origin", "http://gw.test"))
			got := tp.up.lastRequest(t)
			if h := string(got.Header.Host()); h != tc.wantHost {
				t.Errorf("upstream Host = %q, want %q", h, tc.wantHost)
			}
			if o := string(got.Header.Peek("Origin")); o != "http://gw.test" {
				t.Errorf("upstream Origin = %q, want it unchanged", o)
			}
		})
	}
}

// rawUpstream is a hand-written HTTP/1.1 server on loopback TCP: serve gets
// each accepted connection (closed after serve returns).
func rawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return "http://" + ln.Addr().String() + "/mcp"
}

// readRawRequest reads one request (headers and a Content-Length body).
func readRawRequest(br *bufio.Reader) (head string, body []byte, err error) {
	var sb strings.Builder
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return sb.String(), nil, err
		}
		sb.WriteString(line)
		if line == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Length") {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	body = make([]byte, n)
	_, err = io.ReadFull(br, body)
	return sb.String(), body, err
}

// TestHopByHopStripped: connection-specific headers (RFC 9110 §7.6.1 and
// names listed in Connection) are not forwarded either way: a copied Connection: close would end the
// client's keep-alive connection, and Transfer-Encoding or TE invite request
// smuggling.
func TestHopByHopStripped(t *testing.T) {
	hop := []string{"X-Hop", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te", "Trailer", "Upgrade", "X-Resp-Hop", "Proxy-Authenticate", "Transfer-Encoding"}
	reqHead := make(chan string, 1)
	respBody := `{"jsonrpc":"2.0","id":1,"result":{}}`
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, _, err := readRawRequest(br)
			if err != nil {
				return
			}
			reqHead <- head
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"+
				"Connection: keep-alive, X-Resp-Hop\r\nX-Resp-Hop: 1\r\nKeep-Alive: timeout=5\r\n"+
				"Proxy-Authenticate: Basic\r\nUpgrade: h2c\r\nProxy-Connection: keep-alive\r\n"+
				"X-Kept: yes\r\nMcp-Session-Id: s-1\r\nContent-Length: %d\r\n\r\n%s", len(respBody), respBody)
		}
	})
	tp := newTestProxy(t, nil, withUpstreamURL(url))
	c, br := tp.rawConn()
	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: gw.test\r\nContent-Type: application/json\r\n"+
		"Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=9\r\nProxy-Connection: keep-alive\r\n"+
		"Proxy-Authorization: Basic eA==\r\nTE: trailers\r\nTrailer: X-T\r\nUpgrade: websocket\r\n"+
		"X-Kept: yes\r\nAuthorization: Bearer t\r\nContent-Length: %d\r\n\r\n%s", len(body), body)

	var head string
	select {
	case head = <-reqHead:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream got no request")
	}
	upHeaders := parseHeaderNames(head)
	for _, h := range hop {
		if _, ok := upHeaders[strings.ToLower(h)]; ok {
			t.Errorf("upstream received hop-by-hop header %s:\n%s", h, head)
		}
	}
	for _, h := range []string{"X-Kept", "Authorization", "Content-Type"} {
		if _, ok := upHeaders[strings.ToLower(h)]; !ok {
			t.Errorf("upstream did not receive %s:\n%s", h, head)
		}
	}
	if v := upHeaders["connection"]; v != "" && !strings.EqualFold(v, "keep-alive") {
		t.Errorf("upstream Connection = %q", v)
	}

	resp := new(fasthttp.Response)
	if err := resp.Read(br); err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	var respHead []string
	for k := range resp.Header.All() {
		respHead = append(respHead, strings.ToLower(string(k)))
	}
	for _, h := range hop {
		if resp.Header.Peek(h) != nil {
			t.Errorf("client received hop-by-hop header %s: %q", h, respHead)
		}
	}
	if resp.ConnectionClose() {
		t.Errorf("client connection closed: %q", respHead)
	}
	if v := string(resp.Header.Peek("X-Kept")); v != "yes" {
		t.Errorf("X-Kept = %q, want yes", v)
	}
	if v := string(resp.Header.Peek("Mcp-Session-Id")); v != "s-1" {
		t.Errorf("Mcp-Session-Id = %q, want s-1", v)
	}
	if string(resp.Body()) != respBody {
		t.Errorf("body = %q, want %q", resp.Body(), respBody)
	}

	// The client connection stays usable (no Connection: close leaked).
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: gw.test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	<-reqHead
	resp.Reset()
	if err := resp.Read(br); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("second request on the same connection: %v, status %d", err, resp.StatusCode())
	}
}

func parseHeaderNames(head string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(head, "\r\n")[1:] {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	return out
}

// TestChunkedRequestBody: a chunked client body reaches the upstream whole,
// with a length and without Transfer-Encoding (no smuggling through).
func TestChunkedRequestBody(t *testing.T) {
	tp := newTestProxy(t, jsonAnswer(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	c, br := tp.rawConn()
	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: gw.test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	resp := new(fasthttp.Response)
	if err := resp.Read(br); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("answer: %v, status %d", err, resp.StatusCode())
	}
	got := tp.up.lastRequest(t)
	if string(got.Body()) != body {
		t.Errorf("upstream body = %q, want %q", got.Body(), body)
	}
	if te := got.Header.Peek("Transfer-Encoding"); len(te) > 0 && !strings.EqualFold(string(te), "identity") {
		t.Errorf("upstream Transfer-Encoding = %q", te)
	}
}

// TestStreamingPassThrough (H-06, H-08, H-10: SSE answers and their event
// framing as the 2025-11-25 transport defines them): an SSE answer
// is relayed event by event: the client reads the first event while the
// upstream still holds the stream open.
func TestStreamingPassThrough(t *testing.T) {
	tests := []struct {
		name string
		req  func() *fasthttp.Request
		tcp  bool
	}{
		{name: "POST answered with SSE", req: func() *fasthttp.Request {
			return newPost(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}`, "Mcp-Protocol-Version", "2025-06-18")
		}},
		{name: "GET stream", req: func() *fasthttp.Request {
			return newRequest("GET", "", "Accept", "text/event-stream", "Mcp-Session-Id", "s")
		}},
		{name: "POST on loopback TCP", tcp: true, req: func() *fasthttp.Request {
			return newPost(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{}}`)
		}},
	}
	const first = "id: 1\nretry: 100\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n"
	const second = "id: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var closing <-chan struct{}
			var opts []proxyOpt
			if tc.tcp {
				opts = append(opts, withTCP())
			}
			tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
				rc.SetContentType("text/event-stream")
				rc.SetBodyStreamWriter(func(w *bufio.Writer) {
					_, _ = w.WriteString(first)
					_ = w.Flush()
					select {
					case <-release:
					case <-closing:
						return
					}
					_, _ = w.WriteString(second)
				})
			}, opts...)
			closing = tp.up.closing
			resp := tp.doStream(tc.req())
			if ct := string(resp.Header.ContentType()); ct != "text/event-stream" {
				t.Fatalf("Content-Type = %q", ct)
			}
			r := sse.NewReader(resp.BodyStream(), 0)
			ev, err := r.Next()
			if err != nil {
				t.Fatalf("reading the first event while the upstream blocks: %v", err)
			}
			if string(ev.Raw) != first {
				t.Fatalf("first event = %q, want %q", ev.Raw, first)
			}
			close(release)
			ev, err = r.Next()
			if err != nil || string(ev.Raw) != second {
				t.Fatalf("second event = %v, %v; want %q", ev, err, second)
			}
			if _, err := r.Next(); !errors.Is(err, io.EOF) {
				t.Fatalf("after the last event: %v, want io.EOF", err)
			}
		})
	}
}

// TestUpstreamFailures: transport failures answer 502 (504 on timeouts)
// with a JSON-RPC error echoing the request id.
func TestUpstreamFailures(t *testing.T) {
	refused := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr + "/mcp"
	}
	reset := func(t *testing.T) string {
		return rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			_, _, _ = readRawRequest(br)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // RST
			}
		})
	}
	halfAnswer := func(t *testing.T) string {
		return rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			_, _, _ = readRawRequest(br)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: appl")
		})
	}
	tests := []struct {
		name       string
		upstream   func(t *testing.T) string
		body       string
		method     string
		wantStatus int
		wantID     string
	}{
		{name: "refused, numeric id", upstream: refused, method: "POST", body: `{"jsonrpc":"2.0","id":42,"method":"ping"}`, wantStatus: 502, wantID: "42"},
		{name: "refused, string id", upstream: refused, method: "POST", body: `{"jsonrpc":"2.0","id":"req-7","method":"tools/call","params":{"name":"x"}}`, wantStatus: 502, wantID: `"req-7"`},
		{name: "refused, notification", upstream: refused, method: "POST", body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`, wantStatus: 502, wantID: "null"},
		{name: "refused, GET", upstream: refused, method: "GET", wantStatus: 502, wantID: "null"},
		{name: "connection reset", upstream: reset, method: "POST", body: `{"jsonrpc":"2.0","id":3,"method":"ping"}`, wantStatus: 502, wantID: "3"},
		{name: "closed mid-headers", upstream: halfAnswer, method: "POST", body: `{"jsonrpc":"2.0","id":4,"method":"ping"}`, wantStatus: 502, wantID: "4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestProxy(t, nil, withUpstreamURL(tc.upstream(t)))
			resp := tp.do(newRequest(tc.method, tc.body))
			if resp.StatusCode() != tc.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", resp.StatusCode(), tc.wantStatus, resp.Body())
			}
			if ct := string(resp.Header.ContentType()); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			e := decodeRPCError(t, resp.Body())
			if string(e.ID) != tc.wantID || e.Error.Code != wire.CodeInternalError {
				t.Errorf("error = id %s code %d, want id %s code %d", e.ID, e.Error.Code, tc.wantID, wire.CodeInternalError)
			}
		})
	}
}

// TestStreamIdleTimeout: StreamIdleTimeout cuts an upstream that goes
// silent: before the headers (504) and in the middle of an SSE stream
// (the client's stream ends after the events already sent).
func TestStreamIdleTimeout(t *testing.T) {
	const idle = 200 * time.Millisecond
	t.Run("no headers", func(t *testing.T) {
		var closing <-chan struct{}
		tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) { <-closing }, withTCP(),
			withConfig(func(c *Config) { c.StreamIdleTimeout = idle }))
		closing = tp.up.closing
		start := time.Now()
		resp := tp.do(newPost(`{"jsonrpc":"2.0","id":5,"method":"ping"}`))
		if resp.StatusCode() != fasthttp.StatusGatewayTimeout {
			t.Fatalf("status = %d, want 504 (body %q)", resp.StatusCode(), resp.Body())
		}
		if e := decodeRPCError(t, resp.Body()); string(e.ID) != "5" {
			t.Errorf("error id = %s, want 5", e.ID)
		}
		if d := time.Since(start); d < idle || d > 5*time.Second {
			t.Errorf("answered after %v, want about %v", d, idle)
		}
	})
	t.Run("silent SSE stream", func(t *testing.T) {
		const first = "id: 1\ndata: {}\n\n"
		var closing <-chan struct{}
		tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
			rc.SetContentType("text/event-stream")
			rc.SetBodyStreamWriter(func(w *bufio.Writer) {
				_, _ = w.WriteString(first)
				_ = w.Flush()
				<-closing
			})
		}, withTCP(), withConfig(func(c *Config) { c.StreamIdleTimeout = idle }))
		closing = tp.up.closing
		resp := tp.doStream(newRequest("GET", "", "Accept", "text/event-stream"))
		r := sse.NewReader(resp.BodyStream(), 0)
		ev, err := r.Next()
		if err != nil || string(ev.Raw) != first {
			t.Fatalf("first event = %v, %v", ev, err)
		}
		start := time.Now()
		if _, err := r.Next(); err == nil {
			t.Fatalf("stream went on after the upstream went silent")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("stream cut after %v, want about %v", d, idle)
		}
	})
}

// TestRequestRefusals: what the proxy answers itself, never contacting the
// upstream: too large (413), malformed JSON (-32700), invalid messages and
// intercepted methods in batches (-32600, H-04), foreign Origins (403, H-02).
func TestRequestRefusals(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		headers    []string
		wantStatus int
		wantCode   int
	}{
		{name: "body over MaxBodySize", body: `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 8192) + `"}}`, wantStatus: 413, wantCode: wire.CodeInvalidRequest},
		{name: "malformed JSON", body: `{"jsonrpc":"2.0","id":1,`, wantStatus: 400, wantCode: wire.CodeParseError},
		{name: "not JSON", body: `hello`, wantStatus: 400, wantCode: wire.CodeParseError},
		{name: "empty body", body: ``, wantStatus: 400, wantCode: wire.CodeParseError},
		{name: "trailing data", body: `{"jsonrpc":"2.0","method":"x"} {}`, wantStatus: 400, wantCode: wire.CodeParseError},
		{name: "too deep", body: `{"jsonrpc":"2.0","method":"x","params":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, wantStatus: 400, wantCode: wire.CodeParseError},
		{name: "duplicate method", body: `{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}`, wantStatus: 400, wantCode: wire.CodeInvalidRequest},
		{name: "odd-cased Method", body: `{"jsonrpc":"2.0","id":1,"Method":"tools/call"}`, wantStatus: 400, wantCode: wire.CodeInvalidRequest},
		{name: "wrong jsonrpc", body: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, wantStatus: 400, wantCode: wire.CodeInvalidRequest},
		{name: "null id request", body: `{"jsonrpc":"2.0","id":null,"method":"ping"}`, wantStatus: 400, wantCode: wire.CodeInvalidRequest},
		{name: "not an object", body: `[1]`, wantStatus: 400, wantCode: wire.CodeInvalidRequest},
		{name: "empty batch", body: `[]`, wantStatus: 400, wantCode: wire.CodeInvalidRequest},
		{name: "batch with tools/call", body: `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}]`, headers: []string{"Mcp-Protocol-Version", "2025-11-25"}, wantStatus: 400, wantCode: wire.CodeInvalidRequest},
		{name: "batch with initialize", body: `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}]`, wantStatus: 400, wantCode: wire.CodeInvalidRequest},
		{name: "batch with tasks/get", body: `[{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x"}}]`, headers: []string{"Mcp-Protocol-Version", "2025-11-25"}, wantStatus: 400, wantCode: wire.CodeInvalidRequest},
		{name: "foreign Origin (H-02)", body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`, headers: []string{"Origin", "https://evil.example"}, wantStatus: 403, wantCode: wire.CodeInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestProxy(t, jsonAnswer(`{}`), withConfig(func(c *Config) {
				c.MaxBodySize = 4096
				c.AllowedOrigins = []string{"https://app.example/"}
			}))
			req := newPost(tc.body, tc.headers...)
			var resp *fasthttp.Response
			if len(tc.body) > 4096 {
				resp = tp.doRefused(req) // answered before its body is read
			} else {
				resp = tp.do(req)
			}
			if resp.StatusCode() != tc.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", resp.StatusCode(), tc.wantStatus, resp.Body())
			}
			e := decodeRPCError(t, resp.Body())
			if e.Error.Code != tc.wantCode || string(e.ID) != "null" {
				t.Errorf("error = id %s code %d (%s), want id null code %d", e.ID, e.Error.Code, e.Error.Message, tc.wantCode)
			}
			if n := len(tp.up.requests()); n != 0 {
				t.Errorf("upstream contacted %d times", n)
			}
		})
	}
}

// TestAllowedOrigins (H-02): only a present Origin outside the list is
// refused; the check runs before anything else.
func TestAllowedOrigins(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		origin     string
		wantStatus int
	}{
		{name: "listed", method: "POST", origin: "https://app.example", wantStatus: 200},
		{name: "listed without the configured slash", method: "POST", origin: "http://localhost:5173", wantStatus: 200},
		{name: "absent", method: "POST", wantStatus: 200},
		{name: "other scheme", method: "POST", origin: "http://app.example", wantStatus: 403},
		{name: "suffix attack", method: "POST", origin: "https://app.example.evil", wantStatus: 403},
		{name: "null origin", method: "POST", origin: "null", wantStatus: 403},
		{name: "GET refused too", method: "GET", origin: "https://evil.example", wantStatus: 403},
		{name: "DELETE refused too", method: "DELETE", origin: "https://evil.example", wantStatus: 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestProxy(t, jsonAnswer(`{"jsonrpc":"2.0","id":1,"result":{}}`), withConfig(func(c *Config) {
				c.AllowedOrigins = []string{"https://app.example", "http://localhost:5173/"}
			}))
			var hdr []string
			if tc.origin != "" {
				hdr = []string{"Origin", tc.origin}
			}
			body := ""
			if tc.method == "POST" {
				body = `{"jsonrpc":"2.0","id":1,"method":"ping"}`
			}
			resp := tp.do(newRequest(tc.method, body, hdr...))
			if resp.StatusCode() != tc.wantStatus {
				t.Fatalf("status = %d, want %d", resp.StatusCode(), tc.wantStatus)
			}
			contacted := len(tp.up.requests()) > 0
			if contacted != (tc.wantStatus == 200) {
				t.Errorf("upstream contacted = %v", contacted)
			}
		})
	}
}

// TestBatchOfPingsPasses: a batch of methods taskgate does not intercept
// passes through as sent (the upstream decides, H-04).
func TestBatchOfPingsPasses(t *testing.T) {
	body := `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`
	answer := `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]`
	tp := newTestProxy(t, jsonAnswer(answer))
	resp := tp.do(newPost(body))
	if resp.StatusCode() != 200 || string(resp.Body()) != answer {
		t.Fatalf("answer = %d %q, want 200 %q", resp.StatusCode(), resp.Body(), answer)
	}
	if got := string(tp.up.lastRequest(t).Body()); got != body {
		t.Errorf("upstream body = %q, want %q", got, body)
	}
}

// TestErrorHandler: fasthttp's own refusals get a JSON-RPC body.
func TestErrorHandler(t *testing.T) {
	tp := newTestProxy(t, jsonAnswer(`{}`))
	c, br := tp.rawConn()
	_, _ = io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: gw.test\r\nContent-Length: x\r\n\r\n")
	resp := new(fasthttp.Response)
	if err := resp.Read(br); err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if resp.StatusCode() != 400 {
		t.Fatalf("status = %d, want 400", resp.StatusCode())
	}
	if e := decodeRPCError(t, resp.Body()); e.Error.Code != wire.CodeInvalidRequest {
		t.Errorf("code = %d, want %d", e.Error.Code, wire.CodeInvalidRequest)
	}
}

// TestStreamMaxLifetime (issue 5 item 5): an SSE answer that keeps sending
// is cut once it reaches StreamMaxLifetime, although it is never idle; the
// client then resumes with Last-Event-ID (H-07).
func TestStreamMaxLifetime(t *testing.T) {
	const lifetime = 300 * time.Millisecond
	var closing <-chan struct{}
	tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("text/event-stream")
		rc.SetBodyStreamWriter(func(w *bufio.Writer) {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-closing:
					return
				case <-tick.C:
					if _, err := fmt.Fprintf(w, "id: %d\ndata: {}\n\n", i); err != nil || w.Flush() != nil {
						return
					}
				}
			}
		})
	}, withTCP(), withConfig(func(c *Config) { c.StreamIdleTimeout = 10 * time.Second; c.StreamMaxLifetime = lifetime }))
	closing = tp.up.closing
	start := time.Now()
	resp := tp.doStream(newRequest("GET", "", "Accept", "text/event-stream"))
	r := sse.NewReader(resp.BodyStream(), 0)
	events := 0
	for {
		if _, err := r.Next(); err != nil {
			break
		}
		events++
		if time.Since(start) > 10*time.Second {
			t.Fatal("stream still open after 10 s")
		}
	}
	if d := time.Since(start); d < lifetime || events < 2 {
		t.Errorf("stream ended after %v with %d events, want a cut at about %v after several events", d, events, lifetime)
	}
}
