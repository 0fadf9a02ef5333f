package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// lockedBuffer is a log sink safe for the handler's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// methodRecorder is an upstream that answers every request with a result
// naming itself and records the JSON-RPC methods it saw.
type methodRecorder struct {
	mu      sync.Mutex
	methods []string
}

func (m *methodRecorder) serve(rc *fasthttp.RequestCtx) {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	_ = json.Unmarshal(rc.PostBody(), &msg)
	m.mu.Lock()
	m.methods = append(m.methods, string(rc.Method())+" "+msg.Method)
	m.mu.Unlock()
	rc.Response.Header.SetContentType("application/json")
	if msg.ID == nil {
		msg.ID = json.RawMessage("null")
	}
	rc.SetBodyString(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"result":{"from":"upstream"}}`)
}

func (m *methodRecorder) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.methods...)
}

// tasks/* on a session that is not at 2025-11-25 go to the upstream
// untouched (T-11): taskgate serves tasks only to sessions that negotiated
// them. At 2025-11-25 taskgate answers them itself.
func TestTasksMethodsPassOnOlderSessions(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		wantUpstream  bool
	}{
		{"2025-06-18", "2025-06-18", true},
		{"no version header", "", true},
		{"2025-11-25", "2025-11-25", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &methodRecorder{}
			tp := newTestProxy(t, up.serve)
			for _, body := range []string{
				`{"jsonrpc":"2.0","id":1,"method":"tasks/list"}`,
				`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"x"}}`,
				`[{"jsonrpc":"2.0","id":3,"method":"tasks/list"}]`,
			} {
				hdr := []string{"Mcp-Session-Id", "s1", "Authorization", "Bearer a"}
				if tc.version != "" {
					hdr = append(hdr, "Mcp-Protocol-Version", tc.version)
				}
				resp := tp.do(newPost(body, hdr...))
				got := strings.Contains(string(resp.Body()), `"from":"upstream"`)
				if got != tc.wantUpstream {
					t.Errorf("%s at %q: answered by the upstream = %v, want %v (HTTP %d %s)", body, tc.version, got, tc.wantUpstream, resp.StatusCode(), resp.Body())
				}
			}
		})
	}
}

// Two Authorization or two Mcp-Session-Id headers are ambiguous
// credentials: 400, and the upstream never sees the request. CONNECT is
// answered 405, not forwarded.
func TestAmbiguousHeadersAndConnect(t *testing.T) {
	up := &methodRecorder{}
	tp := newTestProxy(t, up.serve)
	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	for _, tc := range []struct {
		name       string
		method     string
		add        []string // headers added (not set), name value pairs
		wantStatus int
	}{
		{"two Authorization", "POST", []string{"Authorization", "Bearer a", "Authorization", "Bearer b"}, 400},
		{"two Authorization on GET", "GET", []string{"Authorization", "Bearer a", "authorization", "Bearer b"}, 400},
		{"two Mcp-Session-Id", "POST", []string{"Mcp-Session-Id", "s1", "mcp-session-id", "s2"}, 400},
		{"two Mcp-Session-Id on DELETE", "DELETE", []string{"Mcp-Session-Id", "s1", "Mcp-Session-Id", "s1"}, 400},
		{"CONNECT", "CONNECT", nil, 405},
		{"one of each", "POST", []string{"Authorization", "Bearer a", "Mcp-Session-Id", "s1"}, 200},
	} {
		req := newRequest(tc.method, body)
		for i := 0; i+1 < len(tc.add); i += 2 {
			req.Header.Add(tc.add[i], tc.add[i+1])
		}
		before := len(up.seen())
		resp := tp.do(req)
		if resp.StatusCode() != tc.wantStatus {
			t.Errorf("%s: HTTP %d %s; want %d", tc.name, resp.StatusCode(), resp.Body(), tc.wantStatus)
		}
		if reached := len(up.seen()) > before; reached != (tc.wantStatus == 200) {
			t.Errorf("%s: reached the upstream = %v", tc.name, reached)
		}
	}
}

// A task-augmented call without MCP-Protocol-Version is served as a plain
// call (the request is at 2025-03-26, without tasks), with one warning per
// session saying so, and counted with its own outcome.
func TestTaskCallWithoutVersionWarnsOnce(t *testing.T) {
	up := &methodRecorder{}
	var logs lockedBuffer
	tp := newTestProxy(t, up.serve, withLogger(zerolog.New(&logs)))
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"task":{"ttl":60000}}}`
	for range 3 {
		resp := tp.do(newPost(call, "Mcp-Session-Id", "s1"))
		if !strings.Contains(string(resp.Body()), `"from":"upstream"`) {
			t.Fatalf("task call without version: %s; want the upstream's plain answer", resp.Body())
		}
	}
	tp.do(newPost(call, "Mcp-Session-Id", "s2"))
	tp.do(newPost(strings.Replace(call, `,"task":{"ttl":60000}`, "", 1), "Mcp-Session-Id", "s3"))
	if n := strings.Count(logs.String(), "without the MCP-Protocol-Version header"); n != 2 {
		t.Errorf("%d warnings; want 2 (once for s1, once for s2, none for a plain call):\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), `"outcome":"task_without_version"`); n != 4 {
		t.Errorf("%d requests logged with outcome task_without_version; want 4", n)
	}
}
