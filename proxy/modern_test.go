package proxy

import (
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/taskstore"
)

func TestParseModernMeta(t *testing.T) {
	tests := []struct {
		name   string
		params string
		want   modernMeta
		err    bool
	}{
		{name: "no params", params: ``, want: modernMeta{}},
		{name: "no _meta", params: `{"name":"x"}`, want: modernMeta{}},
		{name: "version only", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, want: modernMeta{version: "2026-07-28"}},
		{
			name:   "tasks and elicitation",
			params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`,
			want:   modernMeta{version: "2026-07-28", hasCaps: true, tasks: true, elicitation: true, elicitForm: true},
		},
		{
			name:   "elicitation modes",
			params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}}`,
			want:   modernMeta{version: "2026-07-28", hasCaps: true, elicitation: true, elicitURL: true},
		},
		{
			name:   "empty capabilities",
			params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`,
			want:   modernMeta{version: "2026-07-28", hasCaps: true},
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
			got, err := parseModernMeta(p)
			if (err != nil) != tt.err || (!tt.err && got != tt.want) {
				t.Fatalf("parseModernMeta(%s) = %+v, %v; want %+v, error %v", tt.params, got, err, tt.want, tt.err)
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
	h := &Handler{}
	h.okey.Store(&ownerKey{key: []byte("0123456789abcdef")})
	w := &modernWire{h: h}
	state := w.signState("owner-a", "task1", "tool", false, time.Now().Add(time.Minute))
	if id, plain, ok := w.verifyState("owner-a", "tool", state); !ok || id != "task1" || plain {
		t.Fatalf("verifyState(own state) = %q, %v, %v", id, plain, ok)
	}
	if _, plain, ok := w.verifyState("owner-a", "tool", w.signState("owner-a", "task1", "tool", true, time.Now().Add(time.Minute))); !ok || !plain {
		t.Fatalf("verifyState(plain state) = %v, %v", plain, ok)
	}
	tampered := strings.Replace(state, "task1", "task2", 1)
	expired := w.signState("owner-a", "task1", "tool", false, time.Now().Add(-time.Second))
	for name, tc := range map[string]struct{ owner, tool, state string }{
		"foreign owner": {"owner-b", "tool", state},
		"other tool":    {"owner-a", "other", state},
		"tampered":      {"owner-a", "tool", tampered},
		"expired":       {"owner-a", "tool", expired},
		"garbage":       {"owner-a", "tool", requestStatePrefix + "x"},
	} {
		if _, _, ok := w.verifyState(tc.owner, tc.tool, tc.state); ok {
			t.Errorf("verifyState accepted a %s state", name)
		}
	}
}

// modernPost is a 2026 request: header and _meta at version, the given
// capabilities (raw JSON; "" = none), Mcp-Method and Mcp-Name.
func modernPost(method, params, caps, name string, headers ...string) *fasthttp.Request {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"`
	if caps != "" {
		meta += `,"io.modelcontextprotocol/clientCapabilities":` + caps
	}
	meta += `}`
	if params == "" {
		params = "{" + meta + "}"
	} else {
		params = strings.TrimSuffix(params, "}") + "," + meta + "}"
	}
	h := []string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", method}
	if name != "" {
		h = append(h, "Mcp-Name", name)
	}
	return newPost(`{"jsonrpc":"2.0","id":7,"method":"`+method+`","params":`+params+`}`, append(h, headers...)...)
}

// TestModernClassifier: the errors of the era check, before the upstream is
// contacted (M-02, M-07, M-08, M-29).
func TestModernClassifier(t *testing.T) {
	tp := newTestProxy(t, jsonAnswer(`{"jsonrpc":"2.0","id":7,"result":{}}`))
	const tasksCaps = `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
	tests := []struct {
		name     string
		req      *fasthttp.Request
		status   int
		code     int
		dataPart string
	}{
		{"header mismatch", modernPost("tools/call", `{"name":"x"}`, `{}`, "x", "Mcp-Protocol-Version", "2025-11-25"), 400, -32020, ""},
		{"no capabilities", modernPost("tools/call", `{"name":"x"}`, "", "x"), 400, -32602, ""},
		{"method header mismatch", modernPost("tools/call", `{"name":"x"}`, `{}`, "x", "Mcp-Method", "tools/list"), 400, -32020, ""},
		{"name header mismatch", modernPost("tools/call", `{"name":"x"}`, `{}`, "y"), 400, -32020, ""},
		{"tasks/get without the extension", modernPost("tasks/get", `{"taskId":"abc"}`, `{}`, "abc"), 400, -32021, `"requiredCapabilities"`},
		{"tasks/get without Mcp-Name", modernPost("tasks/get", `{"taskId":"abc"}`, tasksCaps, ""), 400, -32020, ""},
		{"tasks/get unknown", modernPost("tasks/get", `{"taskId":"abc"}`, tasksCaps, "abc"), 200, -32602, ""},
		{"tasks/result", modernPost("tasks/result", `{"taskId":"abc"}`, tasksCaps, ""), 404, -32601, ""},
		{"tasks/list", modernPost("tasks/list", ``, tasksCaps, ""), 404, -32601, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := tp.do(tt.req)
			var m struct {
				Error struct {
					Code int             `json:"code"`
					Data json.RawMessage `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal(resp.Body(), &m); err != nil || resp.StatusCode() != tt.status || m.Error.Code != tt.code ||
				!strings.Contains(string(m.Error.Data), tt.dataPart) {
				t.Fatalf("HTTP %d %s; want HTTP %d, code %d, data with %q", resp.StatusCode(), resp.Body(), tt.status, tt.code, tt.dataPart)
			}
		})
	}
	// An unknown version echoes what it supports (M-02).
	req := modernPost("tools/call", `{"name":"x"}`, `{}`, "x", "Mcp-Protocol-Version", "2099-01-01")
	req.SetBodyString(strings.Replace(string(req.Body()), "2026-07-28", "2099-01-01", 1))
	resp := tp.do(req)
	if resp.StatusCode() != 400 || !strings.Contains(string(resp.Body()), `"data":{"supported":["2026-07-28","2025-11-25"],"requested":"2099-01-01"}`) {
		t.Errorf("unsupported version: HTTP %d %s", resp.StatusCode(), resp.Body())
	}
	// None of these reached the upstream (the era probe is the only request).
	for _, r := range tp.up.requests() {
		if !strings.Contains(string(r.Body()), "server/discover") {
			t.Errorf("upstream got %s", r.Body())
		}
	}
}

// BenchmarkTaskGetByEra measures tasks/get of one stored task on each
// wire, through ServeFastHTTP: the per-poll cost of a client of each era.
func BenchmarkTaskGetByEra(b *testing.B) {
	tp := newTestProxy(b, jsonAnswer(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}]}}`), withTCP(),
		withConfig(func(c *Config) { c.TaskRate = -1 }))
	create := newPost(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"task":{}}}`,
		"Mcp-Protocol-Version", "2025-11-25", "Authorization", "Bearer bench")
	resp := tp.do(create)
	var cr struct {
		Result struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		} `json:"result"`
	}
	if err := json.Unmarshal(resp.Body(), &cr); err != nil || cr.Result.Task.TaskID == "" {
		b.Fatalf("create: %s", resp.Body())
	}
	id := cr.Result.Task.TaskID
	waitFor(b, 10*time.Second, "the task to complete", func() bool {
		return strings.Contains(string(tp.do(newPost(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"`+id+`"}}`,
			"Mcp-Protocol-Version", "2025-11-25", "Authorization", "Bearer bench")).Body()), `"completed"`)
	})
	for _, bc := range []struct {
		name string
		req  *fasthttp.Request
	}{
		{"2025-11-25", newPost(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"`+id+`"}}`,
			"Mcp-Protocol-Version", "2025-11-25", "Authorization", "Bearer bench")},
		{"2026-07-28", modernPost("tasks/get", `{"taskId":"`+id+`"}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, id,
			"Authorization", "Bearer bench")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var rc fasthttp.RequestCtx
			rc.Init(bc.req, nil, nil)
			b.ReportAllocs()
			for b.Loop() {
				bc.req.CopyTo(&rc.Request)
				tp.h.ServeFastHTTP(&rc)
				if rc.Response.StatusCode() != fasthttp.StatusOK || !strings.Contains(string(rc.Response.Body()), id) {
					b.Fatalf("status %d: %s", rc.Response.StatusCode(), rc.Response.Body())
				}
				if err := rc.Response.BodyWriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
				rc.Response.Reset()
			}
		})
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
	tp := newTestProxy(t, init)
	b := &tp.h.w26.sessions
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
		for _, r := range tp.up.requests() {
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

func TestModernErrorCode(t *testing.T) {
	for in, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"no such resource"}}`: `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no such resource"}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"open a URL"}}`:       `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"open a URL"}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`:               `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`:                                          `{"jsonrpc":"2.0","id":1,"result":{}}`,
	} {
		if got := string(modernErrorCode([]byte(in))); got != want {
			t.Errorf("modernErrorCode(%s) = %s, want %s", in, got, want)
		}
	}
}

// BenchmarkTaskCreateByEra measures a task-creating tools/call on each wire
// through ServeFastHTTP (the answer, not the background call; the 2026
// promote window is 1ns so the CreateTaskResult comes at once).
func BenchmarkTaskCreateByEra(b *testing.B) {
	tp := newTestProxy(b, jsonAnswer(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}]}}`), withTCP(),
		withConfig(func(c *Config) { c.TaskRate, c.MaxTasksPerOwner, c.PromoteWindow = -1, -1, time.Nanosecond }))
	for _, bc := range []struct {
		name string
		req  *fasthttp.Request
	}{
		{"2025-11-25", newPost(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"task":{}}}`,
			"Mcp-Protocol-Version", "2025-11-25", "Authorization", "Bearer bench")},
		{"2026-07-28", modernPost("tools/call", `{"name":"echo","arguments":{}}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, "echo",
			"Authorization", "Bearer bench")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var rc fasthttp.RequestCtx
			rc.Init(bc.req, nil, nil)
			b.ReportAllocs()
			for b.Loop() {
				bc.req.CopyTo(&rc.Request)
				tp.h.ServeFastHTTP(&rc)
				// A call that ended before the 1ns window fired is answered
				// plainly (same store work: the task was created).
				if body := string(rc.Response.Body()); rc.Response.StatusCode() != fasthttp.StatusOK ||
					!strings.Contains(body, `"taskId"`) && !strings.Contains(body, `"resultType":"complete"`) {
					b.Fatalf("status %d: %s", rc.Response.StatusCode(), rc.Response.Body())
				}
				rc.Response.Reset()
			}
		})
	}
}

// TestAppendGetInlineResult: a completed task's inline result is a 2026
// CallToolResult, which requires resultType "complete" (M-24): a 2025
// upstream's stored result gets it, a 2026 upstream's keeps its own, and
// the rest of the result is unchanged. The same holds for a tool result
// with isError true, which the 2025 view stores as failed.
func TestAppendGetInlineResult(t *testing.T) {
	tp := newTestProxy(t, jsonAnswer(`{"jsonrpc":"2.0","id":7,"result":{}}`))
	// (One request, so the test server runs before its cleanup stops it.)
	if r := tp.do(modernPost("tasks/get", `{"taskId":"none"}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, "none")); !strings.Contains(string(r.Body()), "-32602") {
		t.Fatalf("tasks/get of an unknown task: %s", r.Body())
	}
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
			got := tp.h.w26.appendGet(nil, task, &taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: []byte(tt.raw)}, nil)
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
	tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
		if rc.IsPost() && strings.Contains(string(rc.PostBody()), `"initialize"`) {
			rc.Response.Header.Set("Mcp-Session-Id", "s"+strconv.Itoa(int(n.Add(1))))
			rc.SetContentType("application/json")
			rc.SetBodyString(`{"jsonrpc":"2.0","id":"taskgate-bridge-init","result":{"protocolVersion":"2025-11-25","capabilities":{}}}`)
			return
		}
		rc.SetStatusCode(fasthttp.StatusAccepted)
	})
	// (One request, so the test server runs before its cleanup stops it.)
	tp.do(modernPost("tasks/get", `{"taskId":"none"}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, "none"))
	w := tp.h.w26
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
	for _, r := range tp.up.requests() {
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

// The bridge's upstream session declares the client capabilities the 2026
// request declares, no more: a request without any gets a session
// initialised with none (a 2025 server then neither lists what needs them
// nor asks for roots), and one owner's requests that declare different
// sets get different sessions, those that declare the same set one.
func TestBridgeSessionCapabilities(t *testing.T) {
	var n atomic.Int32
	tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
		if rc.IsPost() && strings.Contains(string(rc.PostBody()), `"initialize"`) {
			rc.Response.Header.Set("Mcp-Session-Id", "s"+strconv.Itoa(int(n.Add(1))))
			rc.SetContentType("application/json")
			rc.SetBodyString(`{"jsonrpc":"2.0","id":"taskgate-bridge-init","result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}}`)
			return
		}
		rc.SetContentType("application/json")
		rc.SetBodyString(`{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}`)
	})
	initCaps := func() []string {
		var out []string
		for _, r := range tp.up.requests() {
			var msg struct {
				Method string `json:"method"`
				Params struct {
					Capabilities json.RawMessage `json:"capabilities"`
				} `json:"params"`
			}
			if json.Unmarshal(r.Body(), &msg) == nil && msg.Method == "initialize" {
				out = append(out, string(msg.Params.Capabilities))
			}
		}
		return out
	}
	list := func(caps string) {
		t.Helper()
		resp := tp.do(modernPost("tools/list", "", caps, "", "Authorization", "Bearer alice"))
		if resp.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("tools/list: HTTP %d %s", resp.StatusCode(), resp.Body())
		}
	}
	list(`{}`)
	list(`{"roots":{"listChanged":true}}`)
	list(`{}`)
	list(`{"roots":{},"sampling":{},"elicitation":{}}`)
	list(`{"elicitation":{"form":{},"url":{}}}`)
	want := []string{`{}`, `{"roots":{}}`, `{"elicitation":{"form":{}},"sampling":{},"roots":{}}`, `{"elicitation":{"form":{},"url":{}}}`}
	if got := initCaps(); !slices.Equal(got, want) {
		t.Errorf("upstream sessions initialised with capabilities %q, want %q", got, want)
	}
	if got := len(tp.h.w26.sessions.m); got != 4 {
		t.Errorf("%d shared sessions for one owner and four capability sets, want 4", got)
	}
}
