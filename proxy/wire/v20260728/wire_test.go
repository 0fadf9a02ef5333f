package v20260728

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

func TestParseMeta(t *testing.T) {
	tests := []struct {
		name   string
		params string
		want   reqMeta
		err    bool
	}{
		{name: "no params", params: ``, want: reqMeta{}},
		{name: "no _meta", params: `{"name":"x"}`, want: reqMeta{}},
		{name: "version only", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, want: reqMeta{version: "2026-07-28"}},
		{
			name:   "tasks and elicitation",
			params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`,
			want:   reqMeta{version: "2026-07-28", hasCaps: true, tasks: true, elicitation: true, elicitForm: true},
		},
		{
			name:   "elicitation modes",
			params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}}`,
			want:   reqMeta{version: "2026-07-28", hasCaps: true, elicitation: true, elicitURL: true},
		},
		{
			name:   "empty capabilities",
			params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`,
			want:   reqMeta{version: "2026-07-28", hasCaps: true},
		},
		{name: "version not a string", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}`, err: true},
		{name: "capabilities not an object", params: `{"_meta":{"io.modelcontextprotocol/clientCapabilities":[]}}`, err: true},
		{name: "duplicate version", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"a","io.modelcontextprotocol/protocolVersion":"b"}}`, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p []byte
			if tt.params != "" {
				p = []byte(tt.params)
			}
			got, err := parseMeta(p)
			if (err != nil) != tt.err || (!tt.err && got != tt.want) {
				t.Fatalf("parseMeta(%s) = %+v, %v; want %+v, error %v", tt.params, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestHeaderName(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"greet", "greet", true},
		{"  greet \t", "greet", true},
		{"=?base64?w6lsw6h2ZQ==?=", "élève", true},
		{"=?base64?not base64?=", "", false},
		{"=?base64?Zm9v", "", false},
	}
	for _, tt := range tests {
		got, ok := headerName([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("headerName(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestRequestState(t *testing.T) {
	w := &Wire{Front: &wire.Front{KeyedHash: testKeyedHash([]byte("0123456789abcdef"))}}
	state := signState(w.KeyedHash, "owner-a", "task1", "tool", false, time.Now().Add(time.Minute))
	if id, plain, ok := verifyState(w.KeyedHash, "owner-a", "tool", state); !ok || id != "task1" || plain {
		t.Fatalf("verifyState(own state) = %q, %v, %v", id, plain, ok)
	}
	if _, plain, ok := verifyState(w.KeyedHash, "owner-a", "tool", signState(w.KeyedHash, "owner-a", "task1", "tool", true, time.Now().Add(time.Minute))); !ok || !plain {
		t.Fatalf("verifyState(plain state) = %v, %v", plain, ok)
	}
	tampered := strings.Replace(state, "task1", "task2", 1)
	expired := signState(w.KeyedHash, "owner-a", "task1", "tool", false, time.Now().Add(-time.Second))
	for name, tc := range map[string]struct{ owner, tool, state string }{
		"foreign owner": {"owner-b", "tool", state},
		"other tool":    {"owner-a", "other", state},
		"tampered":      {"owner-a", "tool", tampered},
		"expired":       {"owner-a", "tool", expired},
		"garbage":       {"owner-a", "tool", requestStatePrefix + "x"},
	} {
		if _, _, ok := verifyState(w.KeyedHash, tc.owner, tc.tool, tc.state); ok {
			t.Errorf("verifyState accepted a %s state", name)
		}
	}
}

// TestBridgeSessions: one upstream session per owner, bounded (the least
// recently used idle one is closed for a new owner; none when all are in
// use), closed with DELETE when idle too long.
func TestBridgeSessions(t *testing.T) {
	init := func(rc *fasthttp.RequestCtx) {
		if rc.IsPost() && strings.Contains(string(rc.PostBody()), `"initialize"`) {
			rc.Response.Header.Set("Mcp-Session-Id", "s-"+strings.TrimPrefix(string(rc.Request.Header.Peek("Authorization")), "Bearer "))
			rc.SetContentType("application/json")
			rc.SetBodyString(`{"jsonrpc":"2.0","id":"taskgate-bridge-init","result":{"protocolVersion":"2025-06-18","capabilities":{}}}`)
			return
		}
		rc.SetStatusCode(fasthttp.StatusAccepted)
	}
	tw := newTestWire(t, init)
	b := &tw.w.sessions
	b.max, b.idle = 1, time.Minute
	hdr := func(who string) *fasthttp.RequestHeader {
		var h fasthttp.RequestHeader
		h.Set("Authorization", "Bearer "+who)
		return &h
	}
	a, err := b.get("a", 0, hdr("a"))
	if err != nil || a.sid != "s-a" || a.version != "2025-06-18" {
		t.Fatalf("get(a) = %+v, %v", a, err)
	}
	if _, err := b.get("b", 0, hdr("b")); err == nil {
		t.Fatal("a second owner got a session while the only one is in use")
	}
	a.done()
	s, err := b.get("b", 0, hdr("b"))
	if err != nil || s.sid != "s-b" {
		t.Fatalf("get(b) after a was released = %+v, %v", s, err)
	}
	s.done()
	deleted := func(sid string) bool {
		for _, r := range tw.requests() {
			if string(r.Header.Method()) == fasthttp.MethodDelete && string(r.Header.Peek("Mcp-Session-Id")) == sid {
				return true
			}
		}
		return false
	}
	if !deleted("s-a") {
		t.Error("the evicted session was not closed upstream")
	}
	b.reap(time.Now().Add(2 * time.Minute))
	if !deleted("s-b") {
		t.Error("the idle session was not closed upstream")
	}
	if len(b.m) != 0 {
		t.Errorf("%d sessions left after reaping", len(b.m))
	}
}

func TestMapErrorCode(t *testing.T) {
	for in, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"no such resource"}}`: `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no such resource"}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"open a URL"}}`:       `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"open a URL"}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`:               `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`:                                          `{"jsonrpc":"2.0","id":1,"result":{}}`,
	} {
		if got := string(mapErrorCode([]byte(in))); got != want {
			t.Errorf("mapErrorCode(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestAppendGetInlineResult: a completed task's inline result is a 2026
// CallToolResult, which requires resultType "complete" (M-24): a 2025
// upstream's stored result gets it, a 2026 upstream's keeps its own, and
// the rest of the result is unchanged. The same holds for a tool result
// with isError true, which the 2025 view stores as failed.
func TestAppendGetInlineResult(t *testing.T) {
	tw := newTestWire(t, func(rc *fasthttp.RequestCtx) { rc.SetStatusCode(fasthttp.StatusAccepted) })
	now := time.Now()
	tests := []struct {
		name, raw, want string
		status          taskstore.Status
	}{
		{"2025 result", `{"content":[{"type":"text","text":"hi"}]}`,
			`{"resultType":"complete","content":[{"type":"text","text":"hi"}]}`, taskstore.Completed},
		{"2025 isError result", `{"content":[{"type":"text","text":"no"}],"isError":true}`,
			`{"resultType":"complete","content":[{"type":"text","text":"no"}],"isError":true}`, taskstore.Failed},
		{"2026 result", `{"content":[],"resultType":"complete"}`, `{"content":[],"resultType":"complete"}`, taskstore.Completed},
		{"empty object", `{ }`, `{"resultType":"complete"}`, taskstore.Completed},
		{"leading space", ` {"content":[]}`, `{"resultType":"complete","content":[]}`, taskstore.Completed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := &taskstore.Task{ID: "t1", Status: tt.status, CreatedAt: now, UpdatedAt: now, TTL: time.Minute}
			got := tw.w.appendGet(nil, task, &taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: []byte(tt.raw)}, nil)
			var res struct {
				ResultType string          `json:"resultType"`
				Status     string          `json:"status"`
				Result     json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(got, &res); err != nil {
				t.Fatalf("appendGet = %s: %v", got, err)
			}
			if res.ResultType != "complete" || res.Status != "completed" || string(res.Result) != tt.want {
				t.Errorf("appendGet(%s) = %s; want resultType complete, status completed, result %s", tt.raw, got, tt.want)
			}
		})
	}
}

// TestBridgeSessionsAnonymous (M-35): a bridged request without credentials gets
// an upstream session of its own, in no map, closed (DELETE) once released;
// requests with the same credentials share one session.
func TestBridgeSessionsAnonymous(t *testing.T) {
	var n atomic.Int32
	tw := newTestWire(t, func(rc *fasthttp.RequestCtx) {
		if rc.IsPost() && strings.Contains(string(rc.PostBody()), `"initialize"`) {
			rc.Response.Header.Set("Mcp-Session-Id", "s"+strconv.Itoa(int(n.Add(1))))
			rc.SetContentType("application/json")
			rc.SetBodyString(`{"jsonrpc":"2.0","id":"taskgate-bridge-init","result":{"protocolVersion":"2025-11-25","capabilities":{}}}`)
			return
		}
		rc.SetStatusCode(fasthttp.StatusAccepted)
	})
	w := tw.w
	var anon fasthttp.RequestHeader
	a, err := w.session(&anon, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.session(&anon, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a == b || a.sid == b.sid {
		t.Fatalf("two requests without credentials share the upstream session %q", a.sid)
	}
	if len(w.sessions.m) != 0 {
		t.Errorf("%d shared sessions after anonymous requests, want none", len(w.sessions.m))
	}
	a.done()
	b.done()
	w.sessions.closing.Wait()
	deleted := map[string]bool{}
	for _, r := range tw.requests() {
		if string(r.Header.Method()) == fasthttp.MethodDelete {
			deleted[string(r.Header.Peek("Mcp-Session-Id"))] = true
		}
	}
	if !deleted[a.sid] || !deleted[b.sid] {
		t.Errorf("released private sessions %q and %q: DELETEs seen for %v, want both", a.sid, b.sid, deleted)
	}

	var alice fasthttp.RequestHeader
	alice.Set("Authorization", "Bearer alice")
	c, err := w.session(&alice, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.done()
	d, err := w.session(&alice, 0)
	if err != nil {
		t.Fatal(err)
	}
	d.done()
	if c != d {
		t.Errorf("two requests with the same credentials got sessions %q and %q, want one", c.sid, d.sid)
	}
}

// testWire is a Wire in front of an in-memory upstream that records the
// requests it receives.
type testWire struct {
	w    *Wire
	mu   sync.Mutex
	reqs []*fasthttp.Request
}

func (tw *testWire) requests() []*fasthttp.Request {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return append([]*fasthttp.Request(nil), tw.reqs...)
}

// newTestWire returns a Wire whose front reaches upstreamHandler in
// process, with an engine on an embedded store.
func newTestWire(tb testing.TB, upstreamHandler fasthttp.RequestHandler) *testWire {
	tb.Helper()
	tw := &testWire{}
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) {
		req := new(fasthttp.Request)
		rc.Request.CopyTo(req)
		tw.mu.Lock()
		tw.reqs = append(tw.reqs, req)
		tw.mu.Unlock()
		upstreamHandler(rc)
	}}
	go func() { _ = srv.Serve(ln) }()
	u, err := url.Parse("http://upstream.test/mcp")
	if err != nil {
		tb.Fatal(err)
	}
	up := upstream.New(upstream.Options{URL: u, NetIO: true, DialTimeout: 5 * time.Second, IdleConn: 3 * time.Second,
		StreamIdleTimeout: 10 * time.Minute, StreamMaxLifetime: time.Hour, Dial: func(context.Context) (net.Conn, error) { return ln.Dial() }})
	log := zerolog.Nop()
	store, closeStore, err := taskstore.NewEmbedded(taskstore.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	hash := testKeyedHash([]byte("test owner key"))
	f := &wire.Front{
		Config: wire.Config{MaxResultSize: 32 << 20, KeepAlive: 15 * time.Second, StoreTimeout: 3 * time.Second, StreamMaxLifetime: time.Hour, ProcessID: "test"},
		Up:     up, Store: store, Log: &log, KeyedHash: hash, Policy: policy.Default,
		HashShort: func(v []byte) string { return hash("log", v)[:12] },
		Owner: func(hdr *fasthttp.RequestHeader) (string, bool) {
			if a := hdr.Peek(fasthttp.HeaderAuthorization); len(a) > 0 {
				return "a" + hash("authorization", a), true
			}
			return wire.OwnerAnonymous, false
		},
	}
	f.Eng = engine.New(engine.Config{ProcessID: "test", Lease: 15 * time.Second, StoreTimeout: 3 * time.Second,
		QueueMax: 256, KeepAlive: 15 * time.Second, ListPageSize: 50, TaskRate: 100, TaskBurst: 500, MaxTasksPerOwner: 100}, store, &log, &wire.Runner{F: f}, engine.Hooks{})
	f.Root = f.Eng.Root()
	tw.w = newWire(f)
	tb.Cleanup(func() {
		_ = f.Eng.Close(context.Background())
		tw.w.sessions.closeAll()
		up.Close()
		_ = srv.Shutdown()
		closeStore()
	})
	return tw
}

// testKeyedHash is the front's keyed hash (HMAC-SHA256 of domain NUL v,
// 16 bytes in hex) under key.
func testKeyedHash(key []byte) func(domain string, v []byte) string {
	return func(domain string, v []byte) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(domain))
		m.Write([]byte{0})
		m.Write(v)
		return hex.EncodeToString(m.Sum(nil)[:16])
	}
}
