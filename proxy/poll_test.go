package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/wire"
)

// The 2026 wire reports a running task's pollIntervalMs as the 2025 wire
// reports pollInterval (engine.PollInterval): short for a young task, so
// a client that follows it learns of a short call's end within
// milliseconds, not after the policy's bound (1500 ms here).
func TestPollIntervalGrows2026(t *testing.T) {
	e := newTaskEnv(t, "", Config{PromoteWindow: time.Millisecond})
	const caps = `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
	do := func(req *fasthttp.Request) map[string]any {
		t.Helper()
		req.Header.Set("Authorization", alice["Authorization"])
		resp := new(fasthttp.Response)
		if err := e.c.DoTimeout(req, resp, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		body := string(resp.Body())
		if wire.IsEventStream(resp.Header.ContentType()) {
			i := strings.LastIndex(body, "data: ")
			if i < 0 {
				t.Fatalf("SSE answer without data: %s", body)
			}
			body = strings.TrimSpace(body[i+len("data: "):])
		}
		var msg struct {
			Result map[string]any `json:"result"`
		}
		if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.Result == nil {
			t.Fatalf("answer %s: %v", body, err)
		}
		return msg.Result
	}
	poll := func(what string, res map[string]any) int64 {
		t.Helper()
		if res["status"] != "working" {
			t.Fatalf("%s: %v, want a working task", what, res)
		}
		p, ok := res["pollIntervalMs"].(float64)
		if !ok {
			t.Fatalf("%s: %v, want pollIntervalMs", what, res)
		}
		return int64(p)
	}
	created := do(post2026("tools/call", `{"name":"block","arguments":{}}`, caps, "block"))
	id, _ := created["taskId"].(string)
	if id == "" {
		t.Fatalf("tools/call = %v, want a task", created)
	}
	if p := poll("CreateTaskResult", created); p < engine.PollMin.Milliseconds() || p >= 1000 {
		t.Errorf("CreateTaskResult pollIntervalMs = %d, want a young task's short one (from %d ms)", p, engine.PollMin.Milliseconds())
	}
	if p := poll("tasks/get", do(post2026("tasks/get", `{"taskId":"`+id+`"}`, caps, id))); p < engine.PollMin.Milliseconds() || p >= 1000 {
		t.Errorf("tasks/get pollIntervalMs = %d, want a young task's short one (from %d ms)", p, engine.PollMin.Milliseconds())
	}
	e.up.releaseAll()
}
