package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// E-12, E-13, Q-04, Q-05, T-28, T-29: params.task.ttl values are clamped or
// defaulted, and the reported ttl is the effective one.
func TestTaskTTLValues_E12_E13(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	pol := writePolicy(t, "defaults:\n  ttl: {default: 1h, min: 2s, max: 24h}\n")
	gw := startTaskgate(t, up.URL, "--config", pol)
	c := newRawClient(t, gw.URL)
	c.initialize()
	for _, tc := range []struct {
		ttl  any // nil: params.task is {}
		want string
	}{
		{nil, "3600000"},
		{0, "2000"},
		{-5, "2000"},
		{2500.5, "2501"},
		{"60000", "3600000"},
		{1e12, "86400000"},
		{90000, "90000"},
	} {
		task := map[string]any{}
		if tc.ttl != nil {
			task["ttl"] = tc.ttl
		}
		tk := c.createTask("echo", map[string]any{"text": "x"}, task)
		if string(tk.TTL) != tc.want {
			t.Errorf("task.ttl %v: CreateTaskResult ttl %s, want %s", tc.ttl, tk.TTL, tc.want)
		}
		if g := c.getTask(tk.TaskID); string(g.TTL) != tc.want {
			t.Errorf("task.ttl %v: tasks/get ttl %s, want %s", tc.ttl, g.TTL, tc.want)
		}
	}
}

// E-31, T-30: a task whose ttl passes while it is still working is purged
// and its upstream call is cancelled.
func TestTaskTTLExpiresWhileWorking_E31(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	stats := newStatsReader(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()
	before := stats.get()
	tk := c.createTask("slow", map[string]any{"seconds": 5, "steps": 50}, map[string]any{"ttl": 1000})
	waitUpstreamRunning(t, stats, 1)
	waitFor(t, 5*time.Second, "the working task to expire", func() bool {
		r := c.call("tasks/get", map[string]any{"taskId": tk.TaskID})
		return r.Msg.Error != nil && r.Msg.Error.Code == -32602
	})
	waitFor(t, 5*time.Second, "the upstream call to be cancelled", func() bool {
		return stats.get().Cancelled > before.Cancelled
	})
}

// T-34, P-03: CreateTaskResult and tasks/get answer application/json even
// when the client accepts SSE; tasks/get has no related-task _meta (T-44).
func TestTaskAnswersAreJSON_T34(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()
	body, _ := c.marshalRequest("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}})
	r := c.postRaw(body)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("CreateTaskResult Content-Type %q, want application/json", ct)
	}
	var created struct {
		Task wireTask `json:"task"`
	}
	if r.Msg == nil || json.Unmarshal(r.Msg.Result, &created) != nil {
		t.Fatalf("create: %q", r.Body)
	}
	body, _ = c.marshalRequest("tasks/get", map[string]any{"taskId": created.Task.TaskID,
		"_meta": map[string]any{relatedTaskKey: map[string]any{"taskId": strings.Repeat("f", 32)}}})
	r = c.postRaw(body)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("tasks/get Content-Type %q, want application/json", ct)
	}
	var got map[string]json.RawMessage
	if r.Msg == nil || r.Msg.Error != nil || json.Unmarshal(r.Msg.Result, &got) != nil {
		t.Fatalf("tasks/get with a misleading related-task _meta (E-17): %q", r.Body)
	}
	if string(got["taskId"]) != `"`+created.Task.TaskID+`"` {
		t.Errorf("tasks/get returned task %s, want params.taskId %s (E-17)", got["taskId"], created.Task.TaskID)
	}
	if _, ok := got["_meta"]; ok {
		t.Errorf("tasks/get result carries _meta %s (T-44)", got["_meta"])
	}
}

// E-16, E-28, T-67: unknown task ids are -32602 for get, result and cancel.
func TestUnknownTaskID_E16_E28(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		for _, id := range []any{strings.Repeat("a", 32), "", 42, "../x"} {
			if e := c.rpcErr(m, map[string]any{"taskId": id}); e.Code != -32602 {
				t.Errorf("%s taskId %v: %d %q, want -32602", m, id, e.Code, e.Message)
			}
		}
	}
}

// E-33: notifications/cancelled for the original tools/call id after
// CreateTaskResult does not affect the task.
func TestCancelledNotificationIgnored_E33(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()
	body, id := c.marshalRequest("tools/call", map[string]any{"name": "slow",
		"arguments": map[string]any{"seconds": 1, "steps": 2}, "task": map[string]any{}})
	r := c.postRaw(body)
	var created struct {
		Task wireTask `json:"task"`
	}
	if r.Msg == nil || json.Unmarshal(r.Msg.Result, &created) != nil {
		t.Fatalf("create: %q", r.Body)
	}
	if st := c.notify("notifications/cancelled", map[string]any{"requestId": id, "reason": "changed my mind"}); st != http.StatusAccepted {
		t.Errorf("notifications/cancelled: HTTP %d, want 202", st)
	}
	if g := c.waitStatus(created.Task.TaskID, "completed", 10*time.Second); g.StatusMessage != "" && strings.Contains(g.StatusMessage, "cancel") {
		t.Errorf("task ended with %q", g.StatusMessage)
	}
}

// E-45, P-07, L-09, T-61: the upstream request id of a background call
// must not collide with ids the client uses in the same session. The
// client cannot know which ids taskgate uses upstream ("taskgate-" and 128
// random bits, unrelated to the task id); the tests try the id a client
// could guess from the CreateTaskResult.
//   - A client request with that id must still be served (the upstream
//     refuses a duplicate in-flight id with 400).
//   - A client notifications/cancelled naming that id must not end the
//     task (tasks are cancelled with tasks/cancel only, T-61).
func TestUpstreamIDNamespace_E45(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	stats := newStatsReader(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()

	t.Run("request id", func(t *testing.T) {
		// Long enough to be seen running on a loaded machine, where the
		// test's requests came seconds apart.
		tk := c.createTask("slow", map[string]any{"seconds": 8, "steps": 2}, nil)
		waitUpstreamRunning(t, stats, 1)
		body := []byte(`{"jsonrpc":"2.0","id":"taskgate-` + tk.TaskID + `","method":"tools/call","params":{"name":"echo","arguments":{"text":"mine"}}}`)
		r := c.postRaw(body)
		var res toolResult
		if r.Status != http.StatusOK || r.Msg == nil || r.Msg.Error != nil || json.Unmarshal(r.Msg.Result, &res) != nil || res.text() != "mine" {
			t.Errorf("client tools/call with id taskgate-<taskId>: HTTP %d %s; want its echo result", r.Status, r.Body)
		}
		c.waitStatus(tk.TaskID, "completed", time.Minute)
	})
	t.Run("notifications/cancelled", func(t *testing.T) {
		tk := c.createTask("slow", map[string]any{"seconds": 8, "steps": 10}, nil)
		waitUpstreamRunning(t, stats, 1)
		if st := c.notify("notifications/cancelled", map[string]any{"requestId": "taskgate-" + tk.TaskID}); st != http.StatusAccepted {
			t.Errorf("notifications/cancelled: HTTP %d, want 202", st)
		}
		var g wireTask
		waitFor(t, time.Minute, "the task to finish", func() bool {
			g = c.getTask(tk.TaskID)
			return g.Status != "working"
		})
		if g.Status != "completed" {
			t.Errorf("task after a client notifications/cancelled naming taskgate's upstream id: %s %q; want completed", g.Status, g.StatusMessage)
		}
	})
}

// E-03, Q-12, T-11: a client that negotiates an older version sees no tasks
// and its params.task is ignored (the call runs normally).
func TestOlderClientVersionNoTasks_E03(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c := newRawClient(t, gw.URL)
	body, _ := c.marshalRequest("initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "old", "version": "0"}})
	r := c.postRaw(body)
	var init initResult
	if r.Msg == nil || json.Unmarshal(r.Msg.Result, &init) != nil {
		t.Fatalf("initialize: %q", r.Body)
	}
	if init.ProtocolVersion != "2025-06-18" {
		t.Errorf("protocolVersion %q, want 2025-06-18", init.ProtocolVersion)
	}
	if _, ok := init.Capabilities["tasks"]; ok {
		t.Errorf("capabilities.tasks advertised on a 2025-06-18 session: %s", init.Capabilities["tasks"])
	}
	c.session, c.version = r.Header.Get("Mcp-Session-Id"), init.ProtocolVersion
	c.notify("notifications/initialized", nil)
	var res toolResult
	c.result("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "old"}, "task": map[string]any{}}, &res)
	if res.text() != "old" {
		t.Errorf("tools/call with task on an old session = %+v, want the plain echo result", res)
	}
}

// E-06, T-76: without an Authorization header and without a session
// (stateless upstream), tasks.list is not advertised and tasks/list is
// -32601; tasks still work through their unguessable ids. Also E-24: the
// upstream answers application/json.
func TestStatelessJSONUpstream_E06_E24(t *testing.T) {
	t.Parallel()
	up := startLegacy(t, "--stateless", "--json")
	gw := startTaskgate(t, up.URL)
	c := newRawClient(t, gw.URL)
	init := c.initialize()
	var caps map[string]json.RawMessage
	_ = json.Unmarshal(init.Capabilities["tasks"], &caps)
	if caps == nil {
		t.Fatalf("no tasks capability: %s", init.Capabilities["tasks"])
	}
	if _, ok := caps["list"]; ok {
		t.Errorf("tasks.list advertised to an anonymous caller")
	}
	if e := c.rpcErr("tasks/list", nil); e.Code != -32601 {
		t.Errorf("tasks/list anonymous: %d %q, want -32601", e.Code, e.Message)
	}
	tk := c.createTask("slow", map[string]any{"seconds": 0.5}, nil)
	var res toolResult
	c.result("tasks/result", map[string]any{"taskId": tk.TaskID}, &res)
	if res.text() != "slept 0.5 seconds" {
		t.Errorf("task result %q", res.text())
	}
}

// E-46, Q-23: over --max-tasks-per-owner, creation fails synchronously and
// leaves no task behind.
func TestOwnerTaskLimit_E46(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--max-tasks-per-owner", "2")
	c := newRawClient(t, gw.URL)
	c.header.Set("Authorization", "Bearer limited")
	c.initialize()
	// The two must still run when the third is asked for: on a loaded CI
	// machine 2 s tasks ended first (its requests came 1-5 s apart).
	for range 2 {
		c.createTask("slow", map[string]any{"seconds": 300, "steps": 1}, nil)
	}
	e := c.rpcErr("tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"seconds": 0}, "task": map[string]any{}})
	if e.Code != -32603 && e.Code != -32600 {
		t.Errorf("third task: %d %q, want a synchronous -32603 or -32600", e.Code, e.Message)
	}
	list := c.listTasks()
	if len(list.Tasks) != 2 {
		t.Errorf("tasks/list shows %d tasks, want the 2 accepted ones", len(list.Tasks))
	}
}

// H-02, E-43: with --allowed-origins, a foreign Origin gets 403, also on
// the methods taskgate answers itself.
func TestOriginCheck_E43(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--allowed-origins", "http://good.example")
	c := newRawClient(t, gw.URL)
	c.initialize()
	tk := c.createTask("echo", map[string]any{"text": "x"}, nil)
	c.header.Set("Origin", "http://evil.example")
	for _, m := range []string{"tasks/get", "tasks/list", "tools/list"} {
		body, _ := c.marshalRequest(m, map[string]any{"taskId": tk.TaskID})
		if r := c.postRaw(body); r.Status != http.StatusForbidden {
			t.Errorf("%s with a foreign Origin: HTTP %d, want 403", m, r.Status)
		}
	}
	c.header.Set("Origin", "http://good.example")
	c.getTask(tk.TaskID)
}

// H-04: tasks/* inside a batch are refused with 400 rather than forwarded.
func TestBatchWithTasksRefused(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	tp := startTap(t, up.URL)
	gw := startTaskgate(t, tp.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()
	n := len(tp.messages())
	r := c.postRaw([]byte(`[{"jsonrpc":"2.0","id":1,"method":"tasks/list"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`))
	if r.Status != http.StatusBadRequest {
		t.Errorf("batch with tasks/list: HTTP %d %q, want 400", r.Status, r.Body)
	}
	if len(tp.messages()) != n {
		t.Errorf("the batch reached the upstream")
	}
}
