package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/wire"
)

const (
	initRequest = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`
	initResult  = `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"legacy","version":"1.0"}}}`
)

// initAnswer returns an upstream handler answering initialize with result
// (as JSON) and a session id, and everything else with an empty result.
func initAnswer(result, session string) fasthttp.RequestHandler {
	return func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("application/json")
		if session != "" {
			rc.Response.Header.Set("Mcp-Session-Id", session)
		}
		env, err := wire.ParseEnvelope(rc.PostBody())
		if err == nil && env.Method == wire.MethodInitialize {
			rc.SetBodyString(result)
			return
		}
		if err == nil && env.ID == nil {
			rc.SetStatusCode(fasthttp.StatusAccepted)
			return
		}
		rc.SetBodyString(`{"jsonrpc":"2.0","id":` + string(env.ID) + `,"result":{}}`)
	}
}

// initView is the part of an InitializeResult the rewrite touches.
type initView struct {
	ProtocolVersion string                     `json:"protocolVersion"`
	Capabilities    map[string]json.RawMessage `json:"capabilities"`
	ServerInfo      json.RawMessage            `json:"serverInfo"`
}

func decodeResult[T any](tb testing.TB, msg []byte) T {
	tb.Helper()
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  T               `json:"result"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		tb.Fatalf("answer %q: %v", msg, err)
	}
	return m.Result
}

// TestInitializeJSON (E-01, P-01, T-76): a legacy upstream's initialize
// result gains the tasks capability; tasks.list only when requestors can be
// identified (session id or Authorization).
func TestInitializeJSON(t *testing.T) {
	tests := []struct {
		name      string
		session   string
		headers   []string
		wantTasks string
	}{
		{name: "session id", session: "sess-1", wantTasks: `{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`},
		{name: "authorization", headers: []string{"Authorization", "Bearer x"}, wantTasks: `{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`},
		{name: "anonymous", wantTasks: `{"cancel":{},"requests":{"tools":{"call":{}}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestProxy(t, initAnswer(initResult, tc.session))
			resp := tp.do(newPost(initRequest, tc.headers...))
			if resp.StatusCode() != 200 || string(resp.Header.ContentType()) != "application/json" {
				t.Fatalf("answer %d %q", resp.StatusCode(), resp.Header.ContentType())
			}
			if got := string(resp.Header.Peek("Mcp-Session-Id")); got != tc.session {
				t.Errorf("Mcp-Session-Id = %q, want %q", got, tc.session)
			}
			res := decodeResult[initView](t, resp.Body())
			if got := string(res.Capabilities["tasks"]); got != tc.wantTasks {
				t.Errorf("capabilities.tasks = %s, want %s", got, tc.wantTasks)
			}
			if got := string(res.Capabilities["tools"]); got != `{"listChanged":true}` {
				t.Errorf("capabilities.tools = %s, want it unchanged", got)
			}
			if res.ProtocolVersion != "2025-11-25" || string(res.ServerInfo) != `{"name":"legacy","version":"1.0"}` {
				t.Errorf("result = %+v, want version and serverInfo unchanged", res)
			}
			if got := string(tp.up.lastRequest(t).Body()); got != initRequest {
				t.Errorf("upstream got %q, want the request unchanged", got)
			}
		})
	}
}

// TestInitializeSSE (E-01, H-06, H-08): in SSE framing, events before and
// after the response are forwarded byte for byte; the response event is
// re-emitted rewritten with its id, event name and retry.
func TestInitializeSSE(t *testing.T) {
	before := ": stream open\n\n" +
		"event: message\nid: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"hi\"}}\n\n" +
		"id: e2\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"method\":\"ping\"}\r\n\r\n"
	response := "event: message\nid: e3\nretry: 500\ndata: " + initResult + "\n\n"
	after := "id: e4\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n"
	tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("text/event-stream")
		rc.Response.Header.Set("Mcp-Session-Id", "sess-sse")
		rc.SetBodyString(before + response + after)
	})
	resp := tp.do(newPost(initRequest))
	if ct := string(resp.Header.ContentType()); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	body := string(resp.Body())
	if !strings.HasPrefix(body, before) {
		t.Fatalf("events before the response not verbatim:\n got %q\nwant prefix %q", body, before)
	}
	if !strings.HasSuffix(body, after) {
		t.Fatalf("events after the response not verbatim:\n got %q\nwant suffix %q", body, after)
	}
	mid := strings.TrimSuffix(strings.TrimPrefix(body, before), after)
	r := sse.NewReader(strings.NewReader(mid), 0)
	ev, err := r.Next()
	if err != nil {
		t.Fatalf("rewritten response event %q: %v", mid, err)
	}
	if string(ev.ID) != "e3" || string(ev.Name) != "message" || ev.Retry != 500 {
		t.Errorf("rewritten event id %q name %q retry %d, want e3, message, 500", ev.ID, ev.Name, ev.Retry)
	}
	res := decodeResult[initView](t, ev.Data)
	if _, ok := res.Capabilities["tasks"]; !ok {
		t.Errorf("rewritten result has no tasks capability: %s", ev.Data)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("more than one event in place of the response: %q", mid)
	}
}

// TestUpstreamDeclaresTasks (E-02, P-01): an upstream with its own tasks
// capability gets everything passed through untouched, tasks/* included.
func TestUpstreamDeclaresTasks(t *testing.T) {
	native := `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"list":{}},"tools":{}},"serverInfo":{"name":"native"}}}`
	toolsList := `{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"build_x","inputSchema":{"type":"object"}}]}}`
	taskGet := `{"jsonrpc":"2.0","id":3,"result":{"taskId":"up-1","status":"working"}}`
	tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("application/json")
		rc.Response.Header.Set("Mcp-Session-Id", "s")
		env, _ := wire.ParseEnvelope(rc.PostBody())
		switch env.Method {
		case wire.MethodInitialize:
			rc.SetBodyString(native)
		case wire.MethodToolsList:
			rc.SetBodyString(toolsList)
		default:
			rc.SetBodyString(taskGet)
		}
	})
	resp := tp.do(newPost(initRequest))
	if string(resp.Body()) != native {
		t.Fatalf("initialize answer = %q, want it byte for byte %q", resp.Body(), native)
	}
	hdr := []string{"Mcp-Session-Id", "s", "Mcp-Protocol-Version", "2025-11-25"}
	if got := string(tp.do(newPost(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, hdr...)).Body()); got != toolsList {
		t.Errorf("tools/list answer = %q, want it unchanged", got)
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"up-1"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","task":{"ttl":1000}}}`,
	} {
		resp := tp.do(newPost(body, hdr...))
		if string(resp.Body()) != taskGet {
			t.Errorf("answer to %s = %q, want the upstream's", body, resp.Body())
		}
		if got := string(tp.up.lastRequest(t).Body()); got != body {
			t.Errorf("upstream got %q, want %q", got, body)
		}
	}
	// Only the session's owner binding, which is no task feature.
	if n := tp.store.callsExcept("Recover", "BindSession"); len(n) != 0 {
		t.Errorf("store used: %v", n)
	}
}

// TestOlderUpstreamVersion (E-03, Q-12, L-05): an upstream answering an
// older version gets no tasks injected unless bridging is on; with bridging
// the client sees 2025-11-25 and later requests of the session reach the
// upstream with the version it negotiated, on any replica.
func TestOlderUpstreamVersion(t *testing.T) {
	old := `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"old"}}}`
	tests := []struct {
		name        string
		bridge      bool
		request     string
		wantVersion string // "" = answer byte for byte
	}{
		{name: "bridging on", bridge: true, request: initRequest, wantVersion: "2025-11-25"},
		{name: "bridging off", bridge: false, request: initRequest},
		{name: "client asked the old version", bridge: true, request: strings.Replace(initRequest, "2025-11-25", "2025-06-18", 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy.Default()
			pol.BridgeProtocolVersion = tc.bridge
			st := newTestStore(t)
			tp := newTestProxy(t, initAnswer(old, "sess-old"), withPolicy(pol), withStore(st))
			resp := tp.do(newPost(tc.request))
			if tc.wantVersion == "" {
				if string(resp.Body()) != old {
					t.Fatalf("initialize answer = %q, want it unchanged", resp.Body())
				}
				if n := tp.store.callsExcept("Recover", "BindSession"); len(n) != 0 {
					t.Errorf("store used: %v", n)
				}
				return
			}
			res := decodeResult[initView](t, resp.Body())
			if res.ProtocolVersion != tc.wantVersion || res.Capabilities["tasks"] == nil {
				t.Fatalf("initialize result = %s, want version %s with tasks", resp.Body(), tc.wantVersion)
			}
			if n := tp.store.callsExcept("Recover"); n["SetSessionVersion"] != 1 {
				t.Errorf("store calls = %v, want one SetSessionVersion", n)
			}

			// This replica remembers the version; another one asks the store once.
			replica := newTestProxy(t, initAnswer(old, "sess-old"), withPolicy(pol), withStore(st))
			for _, p := range []*testProxy{tp, replica, replica} {
				p.do(newPost(`{"jsonrpc":"2.0","id":1,"method":"ping"}`, "Mcp-Session-Id", "sess-old", "Mcp-Protocol-Version", "2025-11-25"))
				if v := string(p.up.lastRequest(t).Header.Peek("Mcp-Protocol-Version")); v != "2025-06-18" {
					t.Errorf("upstream MCP-Protocol-Version = %q, want 2025-06-18", v)
				}
			}
			// (and the session's owner binding, once)
			if n := replica.store.callsExcept("Recover"); n["SessionVersion"] != 1 || n["Session"] != 1 || len(n) != 2 {
				t.Errorf("replica store calls = %v, want one SessionVersion and one Session", n)
			}
			// GET and DELETE of the session are bridged too.
			for _, m := range []string{"GET", "DELETE"} {
				tp.do(newRequest(m, "", "Mcp-Session-Id", "sess-old", "Mcp-Protocol-Version", "2025-11-25"))
				if v := string(tp.up.lastRequest(t).Header.Peek("Mcp-Protocol-Version")); v != "2025-06-18" {
					t.Errorf("%s: upstream MCP-Protocol-Version = %q, want 2025-06-18", m, v)
				}
			}
		})
	}
}

// TestPlainRequestsSkipTheStore (pass-through stays cheap): requests that do not
// carry MCP-Protocol-Version 2025-11-25 never touch the task store, once
// the replica knows who owns their session (it saw the initialize, or read
// the binding once; sessions.go).
func TestPlainRequestsSkipTheStore(t *testing.T) {
	tp := newTestProxy(t, initAnswer(initResult, "s"))
	tp.do(newPost(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"0"}}}`))
	if n := tp.store.callsExcept("Recover"); n["BindSession"] != 1 || len(n) != 1 {
		t.Errorf("initialize used the store for %v, want one BindSession", n)
	}
	before := tp.store.callsExcept("Recover")
	for _, r := range []*fasthttp.Request{
		newPost(`{"jsonrpc":"2.0","id":1,"method":"ping"}`, "Mcp-Session-Id", "s"),
		newPost(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`, "Mcp-Session-Id", "s"),
		newPost(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`, "Mcp-Session-Id", "s", "Mcp-Protocol-Version", "2025-06-18"),
		newPost(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "Mcp-Session-Id", "s", "Mcp-Protocol-Version", "2025-03-26"),
		newPost(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", "s"),
		newRequest("GET", "", "Mcp-Session-Id", "s", "Last-Event-ID", "e-1"),
		newRequest("DELETE", "", "Mcp-Session-Id", "s"),
	} {
		tp.do(r)
	}
	if n := tp.store.callsExcept("Recover"); !maps.Equal(n, before) {
		t.Errorf("store used: %v, before the plain requests %v", n, before)
	}
	// A session this replica has not seen costs one read of its binding.
	for range 3 {
		tp.do(newPost(`{"jsonrpc":"2.0","id":1,"method":"ping"}`, "Mcp-Session-Id", "other"))
	}
	if n := tp.store.callsExcept("Recover"); n["Session"] != 1 || len(n) != 2 {
		t.Errorf("store used: %v, want one Session read beside the BindSession", n)
	}
}

// toolsView is a ListToolsResult as the rewrite tests compare it.
type toolsView struct {
	Tools []struct {
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		Execution    json.RawMessage `json:"execution"`
		OutputSchema json.RawMessage `json:"outputSchema"`
		Meta         json.RawMessage `json:"_meta"`
	} `json:"tools"`
	NextCursor string `json:"nextCursor"`
}

const toolsListResult = `{"jsonrpc":"2.0","id":2,"result":{"tools":[` +
	`{"name":"build_app","description":"d","inputSchema":{"type":"object"}},` +
	`{"name":"drop_db","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional","x":1}},` +
	`{"name":"search","inputSchema":{"type":"object"},"outputSchema":{"type":"object"},"_meta":{"k":"v"},"execution":null}` +
	`],"nextCursor":"page-2"}}`

// TestToolsList (E-04, P-02): execution.taskSupport is set per policy for
// sessions at 2025-11-25, in JSON and SSE framing; everything else,
// nextCursor included, is kept. Sessions at older versions are untouched.
func TestToolsList(t *testing.T) {
	pol, err := policy.Parse([]byte("rules:\n  - match: \"build_*\"\n    taskSupport: required\n  - match: drop_db\n    taskSupport: forbidden\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"build_app": `{"taskSupport":"required"}`,
		"drop_db":   `{"taskSupport":"forbidden","x":1}`,
		"search":    `{"taskSupport":"optional"}`,
	}
	tests := []struct {
		name      string
		sse       bool
		version   string
		untouched bool
	}{
		{name: "JSON", version: "2025-11-25"},
		{name: "SSE", sse: true, version: "2025-11-25"},
		{name: "older session", version: "2025-06-18", untouched: true},
		{name: "no version header", untouched: true},
		{name: "older session SSE", sse: true, version: "2025-06-18", untouched: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "id: p\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n"
			stream := prefix + "id: r\ndata: " + toolsListResult + "\n\n"
			h := jsonAnswer(toolsListResult)
			if tc.sse {
				h = sseAnswer(stream)
			}
			tp := newTestProxy(t, h, withPolicy(pol))
			var hdr []string
			if tc.version != "" {
				hdr = []string{"Mcp-Protocol-Version", tc.version}
			}
			resp := tp.do(newPost(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"page-1"}}`, hdr...))
			body := resp.Body()
			if tc.untouched {
				wantBody := toolsListResult
				if tc.sse {
					wantBody = stream
				}
				if string(body) != wantBody {
					t.Fatalf("answer = %q, want it unchanged", body)
				}
				return
			}
			if tc.sse {
				if !strings.HasPrefix(string(body), prefix) {
					t.Fatalf("event before the response not verbatim: %q", body)
				}
				r := sse.NewReader(strings.NewReader(strings.TrimPrefix(string(body), prefix)), 0)
				ev, err := r.Next()
				if err != nil || string(ev.ID) != "r" {
					t.Fatalf("response event: %v, %v", ev, err)
				}
				body = ev.Data
			}
			res := decodeResult[toolsView](t, body)
			got := map[string]string{}
			for _, tl := range res.Tools {
				got[tl.Name] = string(tl.Execution)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("execution per tool mismatch (-want +got):\n%s", diff)
			}
			if res.NextCursor != "page-2" {
				t.Errorf("nextCursor = %q, want page-2", res.NextCursor)
			}
			s := res.Tools[2]
			if string(s.OutputSchema) != `{"type":"object"}` || string(s.Meta) != `{"k":"v"}` || res.Tools[0].Description != "d" {
				t.Errorf("other fields changed: %s", body)
			}
		})
	}
}

// TestRewriteNonOKUntouched: error statuses and other content types of
// intercepted methods are relayed as they are.
func TestRewriteNonOKUntouched(t *testing.T) {
	tests := []struct {
		name   string
		status int
		ct     string
		body   string
	}{
		{name: "400", status: 400, ct: "application/json", body: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad"}}`},
		{name: "401", status: 401, ct: "text/plain", body: "no"},
		{name: "text/html 200", status: 200, ct: "text/html", body: "<p>hi</p>"},
		{name: "JSON-RPC error", status: 200, ct: "application/json", body: `{"jsonrpc":"2.0","id":0,"error":{"code":-32602,"message":"Unsupported protocol version"}}`},
		{name: "malformed JSON", status: 200, ct: "application/json", body: `{"jsonrpc":"2.0","id":0,"result":{`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
				rc.SetStatusCode(tc.status)
				rc.SetContentType(tc.ct)
				rc.SetBodyString(tc.body)
			})
			resp := tp.do(newPost(initRequest))
			if resp.StatusCode() != tc.status || string(resp.Header.ContentType()) != tc.ct || string(resp.Body()) != tc.body {
				t.Errorf("answer = %d %q %q, want %d %q %q", resp.StatusCode(), resp.Header.ContentType(), resp.Body(), tc.status, tc.ct, tc.body)
			}
		})
	}
}

// TestInitializeSSEStreams: the rewriting SSE path streams too: the client
// reads the first event while the upstream still holds the stream.
func TestInitializeSSEStreams(t *testing.T) {
	const first = "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n"
	release := make(chan struct{})
	var closing <-chan struct{}
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
			_, _ = w.WriteString("id: 2\ndata: " + initResult + "\n\n")
		})
	})
	closing = tp.up.closing
	resp := tp.doStream(newPost(initRequest))
	r := sse.NewReader(resp.BodyStream(), 0)
	ev, err := r.Next()
	if err != nil || string(ev.Raw) != first {
		t.Fatalf("first event = %v, %v; want %q before the upstream continues", ev, err, first)
	}
	close(release)
	ev, err = r.Next()
	if err != nil {
		t.Fatalf("response event: %v", err)
	}
	if res := decodeResult[initView](t, ev.Data); res.Capabilities["tasks"] == nil {
		t.Errorf("response not rewritten: %s", ev.Data)
	}
}
