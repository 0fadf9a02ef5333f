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
)

// post2026 is a 2026 request: header and _meta at version, the given
// capabilities (raw JSON; "" = none), Mcp-Method and Mcp-Name.
func post2026(method, params, caps, name string, headers ...string) *fasthttp.Request {
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

// TestEraClassifier: the errors of the era check, before the upstream is
// contacted (M-02, M-07, M-08, M-29).
func TestEraClassifier(t *testing.T) {
	tp := newTestProxy(t, jsonAnswer(`{"jsonrpc":"2.0","id":7,"result":{}}`))
	const tasksCaps = `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
	tests := []struct {
		name     string
		req      *fasthttp.Request
		status   int
		code     int
		dataPart string
	}{
		{"header mismatch", post2026("tools/call", `{"name":"x"}`, `{}`, "x", "Mcp-Protocol-Version", "2025-11-25"), 400, -32020, ""},
		{"no capabilities", post2026("tools/call", `{"name":"x"}`, "", "x"), 400, -32602, ""},
		{"method header mismatch", post2026("tools/call", `{"name":"x"}`, `{}`, "x", "Mcp-Method", "tools/list"), 400, -32020, ""},
		{"name header mismatch", post2026("tools/call", `{"name":"x"}`, `{}`, "y"), 400, -32020, ""},
		{"tasks/get without the extension", post2026("tasks/get", `{"taskId":"abc"}`, `{}`, "abc"), 400, -32021, `"requiredCapabilities"`},
		{"tasks/get without Mcp-Name", post2026("tasks/get", `{"taskId":"abc"}`, tasksCaps, ""), 400, -32020, ""},
		{"tasks/get unknown", post2026("tasks/get", `{"taskId":"abc"}`, tasksCaps, "abc"), 200, -32602, ""},
		{"tasks/result", post2026("tasks/result", `{"taskId":"abc"}`, tasksCaps, ""), 404, -32601, ""},
		{"tasks/list", post2026("tasks/list", ``, tasksCaps, ""), 404, -32601, ""},
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
	req := post2026("tools/call", `{"name":"x"}`, `{}`, "x", "Mcp-Protocol-Version", "2099-01-01")
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
		{"2026-07-28", post2026("tasks/get", `{"taskId":"`+id+`"}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, id,
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
		{"2026-07-28", post2026("tools/call", `{"name":"echo","arguments":{}}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, "echo",
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

// The bridge's upstream session declares the client capabilities the 2026
// request declares, no more: a request without any gets a session
// initialised with none (a 2025 server then neither lists what needs them
// nor asks for roots), and one owner's requests that declare different
// sets get different sessions, those that declare the same set one (the
// shared sessions all stay open: none is closed upstream).
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
		resp := tp.do(post2026("tools/list", "", caps, "", "Authorization", "Bearer alice"))
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
	for _, r := range tp.up.requests() {
		if string(r.Header.Method()) == fasthttp.MethodDelete {
			t.Errorf("shared session %s closed upstream, want all four kept", r.Header.Peek("Mcp-Session-Id"))
		}
	}
}
