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

// Both wires report a running task's pollInterval (engine.PollInterval):
// short for a young task, so a client that follows it learns of a short
// call's end within milliseconds, not after the policy's bound (1500 ms
// here). On the process that runs the call, where tasks/get is held, the
// CreateTaskResult and tasks/get report the held interval (the bound less
// the margin for round trips: 25 ms); with --poll-hold off, the whole
// bound (100 ms).
func TestPollIntervalGrows2026(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pollHold time.Duration
		want     int64
	}{
		{"held", 0, heldYoungPoll},
		{"at once", -1, engine.PollMin.Milliseconds()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTaskEnv(t, "", Config{PromoteWindow: time.Millisecond, PollHold: tc.pollHold})
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
			// Younger than 2 s: the bound is PollMin.
			if p := poll("CreateTaskResult", created); p != tc.want {
				t.Errorf("2026 CreateTaskResult pollIntervalMs = %d, want %d", p, tc.want)
			}
			if p := poll("tasks/get", do(post2026("tasks/get", `{"taskId":"`+id+`"}`, caps, id))); p != tc.want {
				t.Errorf("2026 tasks/get pollIntervalMs = %d, want %d", p, tc.want)
			}
			task := e.createTask(alice, "block", `{}`, `{}`)
			if task.PollInterval != tc.want {
				t.Errorf("2025 CreateTaskResult pollInterval = %d, want %d", task.PollInterval, tc.want)
			}
			if wt, r := e.get(alice, task.TaskID); r.Error != nil || wt.Status != "working" || wt.PollInterval != tc.want {
				t.Errorf("2025 tasks/get = %+v, %s; want working, pollInterval %d", wt, r.raw, tc.want)
			}
			e.up.releaseAll()
		})
	}
}

// heldYoungPoll is the pollInterval (ms) a young working task reports on
// the process that runs its call, where its polls are held: PollMin less
// the margin left for the round trips (engine.PollInterval).
const heldYoungPoll = int64((engine.PollMin - engine.PollMargin) / time.Millisecond)
