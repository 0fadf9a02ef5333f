package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

const relatedTaskKey = "io.modelcontextprotocol/related-task"

var taskIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// relatedTaskID returns _meta[related-task].taskId of a result's _meta.
func relatedTaskID(meta *mcp.Meta) string {
	if meta == nil {
		return ""
	}
	rel, _ := meta.AdditionalFields[relatedTaskKey].(map[string]any)
	id, _ := rel["taskId"].(string)
	return id
}

func textOf(content []mcp.Content) string {
	if len(content) == 0 {
		return ""
	}
	if tc, ok := content[0].(mcp.TextContent); ok {
		return tc.Text
	}
	if tc, ok := content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return fmt.Sprintf("%#v", content[0])
}

func getTask(t testing.TB, c *client.Client, id string) *mcp.GetTaskResult {
	t.Helper()
	res, err := c.GetTask(ctxT(t), mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}})
	if err != nil {
		t.Fatalf("tasks/get %s: %v", id, err)
	}
	return res
}

func waitTaskStatus(t testing.TB, c *client.Client, id string, st mcp.TaskStatus, timeout time.Duration) *mcp.GetTaskResult {
	t.Helper()
	var last *mcp.GetTaskResult
	waitFor(t, timeout, fmt.Sprintf("task %s to be %s", id, st), func() bool {
		last = getTask(t, c, id)
		return last.Status == st
	})
	return last
}

func taskResult(t testing.TB, c *client.Client, id string) *mcp.TaskResultResult {
	t.Helper()
	res, err := c.TaskResult(ctxT(t), mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: id}})
	if err != nil {
		t.Fatalf("tasks/result %s: %v", id, err)
	}
	return res
}

// waitUpstreamRunning waits until the upstream runs at least n calls.
func waitUpstreamRunning(t testing.TB, s *statsReader, n int64) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%d running upstream calls", n), func() bool { return s.get().Running >= n })
}

// E-07, E-18, T-14, T-21, T-26, T-27, T-29, T-32, T-37, T-40, T-41: a task
// is created at once while the upstream is busy, polled, and its result
// (held by tasks/result until done) carries the related-task _meta.
func TestTaskLifecycle_E07_E18(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	stats := newStatsReader(t, up.URL)
	c, init := newMCPClient(t, gw.URL, nil)
	if init.Capabilities.Tasks == nil {
		t.Fatalf("mcp-go sees no tasks capability: %+v", init.Capabilities)
	}

	start := time.Now()
	tk := mcpCreateTask(t, c, "slow", map[string]any{"seconds": 2, "steps": 2}, nil)
	if d := time.Since(start); d > time.Second {
		t.Errorf("CreateTaskResult took %v; want it at once (the call takes 2s)", d)
	}
	if !taskIDRE.MatchString(tk.TaskId) || tk.Status != mcp.TaskStatusWorking {
		t.Errorf("created task %+v; want a 32-hex id and status working", tk)
	}
	if tk.CreatedAt == "" || tk.CreatedAt != tk.LastUpdatedAt {
		t.Errorf("createdAt %q, lastUpdatedAt %q; want equal and set", tk.CreatedAt, tk.LastUpdatedAt)
	}
	if _, err := time.Parse(time.RFC3339Nano, tk.CreatedAt); err != nil {
		t.Errorf("createdAt %q is not RFC 3339: %v", tk.CreatedAt, err)
	}
	if tk.TTL == nil || *tk.TTL != time.Hour.Milliseconds() {
		t.Errorf("ttl = %v, want the policy default 3600000", tk.TTL)
	}
	if tk.PollInterval == nil || *tk.PollInterval < 1 || *tk.PollInterval > 30000 {
		t.Errorf("pollInterval = %v, want 1..30000 ms (it starts small and grows to the policy's 30000)", tk.PollInterval)
	}
	// The upstream is still busy with it.
	waitUpstreamRunning(t, stats, 1)

	// tasks/result blocks (T-37) while tasks/get still answers (T-41).
	type out struct {
		res *mcp.TaskResultResult
		err error
		at  time.Time
	}
	done := make(chan out, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := c.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: tk.TaskId}})
		done <- out{res, err, time.Now()}
	}()
	if g := getTask(t, c, tk.TaskId); g.Status != mcp.TaskStatusWorking {
		t.Errorf("tasks/get while running: status %s, want working", g.Status)
	}
	g := waitTaskStatus(t, c, tk.TaskId, mcp.TaskStatusCompleted, 10*time.Second)
	if g.CreatedAt != tk.CreatedAt || g.LastUpdatedAt < g.CreatedAt || g.LastUpdatedAt == g.CreatedAt {
		t.Errorf("completed task createdAt %q lastUpdatedAt %q; want createdAt kept and lastUpdatedAt later", g.CreatedAt, g.LastUpdatedAt)
	}
	var o out
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("tasks/result still blocked 10s after the task completed")
	}
	if o.err != nil {
		t.Fatalf("tasks/result: %v", o.err)
	}
	if o.at.Sub(start) < 1900*time.Millisecond {
		t.Errorf("tasks/result returned after %v, before the 2s call could finish", o.at.Sub(start))
	}
	if got := textOf(o.res.Content); got != "slept 2 seconds" || o.res.IsError {
		t.Errorf("tasks/result content %q isError %v; want \"slept 2 seconds\"", got, o.res.IsError)
	}
	if id := relatedTaskID(o.res.Meta); id != tk.TaskId {
		t.Errorf("tasks/result _meta related-task = %q, want %q", id, tk.TaskId)
	}
	// A second tasks/result gives the same outcome (E-19).
	if again := taskResult(t, c, tk.TaskId); textOf(again.Content) != "slept 2 seconds" {
		t.Errorf("second tasks/result = %q", textOf(again.Content))
	}
}

// E-20, T-24, T-25, Q-03: an isError tool result makes the task failed with
// a statusMessage, and tasks/result returns the CallToolResult as success.
func TestTaskToolErrorFails_E20(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c, _ := newMCPClient(t, gw.URL, nil)

	tk := mcpCreateTask(t, c, "fail", map[string]any{"reason": "quota exceeded"}, nil)
	g := waitTaskStatus(t, c, tk.TaskId, mcp.TaskStatusFailed, 10*time.Second)
	if !strings.Contains(g.StatusMessage, "quota exceeded") {
		t.Errorf("statusMessage = %q, want it to mention the tool's error", g.StatusMessage)
	}
	res := taskResult(t, c, tk.TaskId)
	if !res.IsError || textOf(res.Content) != "quota exceeded" {
		t.Errorf("tasks/result = isError %v %q; want the isError CallToolResult", res.IsError, textOf(res.Content))
	}
	if id := relatedTaskID(res.Meta); id != tk.TaskId {
		t.Errorf("related-task = %q, want %q", id, tk.TaskId)
	}
}

// E-21, T-38, Q-02: an upstream JSON-RPC error makes the task failed and
// tasks/result replays the same code, message and data.
func TestTaskRPCErrorReplayed_E21(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c, _ := newMCPClient(t, gw.URL, nil)

	for _, code := range []int{-32042, -32603, -32099} {
		msg := fmt.Sprintf("boom %d", code)
		tk := mcpCreateTask(t, c, "rpc_error", map[string]any{"code": code, "message": msg}, nil)
		g := waitTaskStatus(t, c, tk.TaskId, mcp.TaskStatusFailed, 10*time.Second)
		if !strings.Contains(g.StatusMessage, msg) {
			t.Errorf("code %d: statusMessage = %q, want it to name the error", code, g.StatusMessage)
		}
		resp := mcpSend(t, c, "tasks/result", map[string]any{"taskId": tk.TaskId})
		if resp.Error == nil {
			t.Fatalf("code %d: tasks/result = result %s, want the upstream's error", code, resp.Result)
		}
		if resp.Error.Code != code || resp.Error.Message != msg {
			t.Errorf("tasks/result error = %d %q, want %d %q", resp.Error.Code, resp.Error.Message, code, msg)
		}
		data, _ := json.Marshal(resp.Error.Data)
		if !jsonEqual(data, json.RawMessage(fmt.Sprintf(`{"tool":"rpc_error","code":%d}`, code))) {
			t.Errorf("tasks/result error data = %s, want the upstream's", data)
		}
	}
}

// E-26, E-27, E-29, Q-01, T-57, T-58, T-59, P-06: tasks/cancel of a running
// call cancels it upstream, unblocks a waiting tasks/result, and the
// task stays cancelled.
func TestTaskCancel_E26_E27_E29(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	stats := newStatsReader(t, up.URL)
	c, _ := newMCPClient(t, gw.URL, nil)
	before := stats.get()

	tk := mcpCreateTask(t, c, "slow", map[string]any{"seconds": 3, "steps": 30}, nil)
	waitUpstreamRunning(t, stats, 1)

	// A tasks/result blocked on the task: raw, in the same session, over
	// SSE; the priming event shows the wait has begun.
	raw := newRawClient(t, gw.URL)
	raw.session, raw.version = c.GetSessionId(), protocolVersion
	body := []byte(`{"jsonrpc":"2.0","id":"wait-1","method":"tasks/result","params":{"taskId":"` + tk.TaskId + `"}}`)
	resp, err := raw.hc.Do(raw.request(ctxT(t), http.MethodPost, body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stream := newSSEReader(resp.Body)
	if ev, err := stream.next(); err != nil || ev.Data != "" {
		t.Fatalf("tasks/result priming event: %+v %v", ev, err)
	}
	blocked := make(chan rpcMsg, 1)
	go func() {
		defer close(blocked)
		for {
			ev, err := stream.next()
			if err != nil {
				return
			}
			// The task's notifications (the tool's log lines) may come
			// first; the answer is the response.
			var m rpcMsg
			if ev.Data != "" && json.Unmarshal([]byte(ev.Data), &m) == nil && m.Method == "" {
				blocked <- m
				return
			}
		}
	}()

	res, err := c.CancelTask(ctxT(t), mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: tk.TaskId}})
	if err != nil {
		t.Fatalf("tasks/cancel: %v", err)
	}
	cancelledAt := time.Now()
	if res.Status != mcp.TaskStatusCancelled || res.TaskId != tk.TaskId {
		t.Errorf("tasks/cancel = %+v, want the task cancelled", res.Task)
	}

	// E-29: the blocked tasks/result returns promptly with -32603.
	select {
	case m, ok := <-blocked:
		if d := time.Since(cancelledAt); d > time.Second {
			t.Errorf("blocked tasks/result returned %v after the cancel; want promptly", d)
		}
		if !ok || m.Error == nil || m.Error.Code != -32603 || string(m.ID) != `"wait-1"` {
			t.Errorf("blocked tasks/result = %+v (stream open %v), want error -32603 for id wait-1", m, ok)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocked tasks/result did not return within 5s of the cancel")
	}

	// E-26: the upstream saw the cancellation.
	waitFor(t, 10*time.Second, "the upstream to count the cancelled call", func() bool {
		return stats.get().Cancelled > before.Cancelled
	})
	if s := stats.get(); s.Running != 0 {
		t.Errorf("upstream still runs %d calls after the cancel", s.Running)
	}
	// T-59: it stays cancelled.
	if g := getTask(t, c, tk.TaskId); g.Status != mcp.TaskStatusCancelled {
		t.Errorf("tasks/get after cancel: %s, want cancelled", g.Status)
	}
	// E-27, T-57: cancelling again is -32602.
	if resp := mcpSend(t, c, "tasks/cancel", map[string]any{"taskId": tk.TaskId}); resp.Error == nil || resp.Error.Code != -32602 {
		t.Errorf("second tasks/cancel = %+v %s, want -32602", resp.Error, resp.Result)
	}
	// tasks/result on a cancelled task is -32603.
	if resp := mcpSend(t, c, "tasks/result", map[string]any{"taskId": tk.TaskId}); resp.Error == nil || resp.Error.Code != -32603 {
		t.Errorf("tasks/result of a cancelled task = %+v %s, want -32603", resp.Error, resp.Result)
	}
	// E-27 for completed and failed tasks too.
	for _, tool := range []string{"echo", "fail"} {
		done := mcpCreateTask(t, c, tool, map[string]any{"text": "x", "reason": "x"}, nil)
		var st mcp.TaskStatus
		waitFor(t, 10*time.Second, tool+" task to finish", func() bool {
			st = getTask(t, c, done.TaskId).Status
			return st.IsTerminal()
		})
		if resp := mcpSend(t, c, "tasks/cancel", map[string]any{"taskId": done.TaskId}); resp.Error == nil || resp.Error.Code != -32602 {
			t.Errorf("tasks/cancel of a %s task = %+v, want -32602", st, resp.Error)
		}
		if g := getTask(t, c, done.TaskId); g.Status != st {
			t.Errorf("status after refused cancel = %s, want %s", g.Status, st)
		}
	}
}

// E-14, T-17..T-20: 200 concurrent tasks; every result matches its own
// input and all ids are distinct 32-hex strings.
func TestConcurrentTasks_E14(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	// A generous store timeout: this test is about isolation of 200
	// concurrent tasks, and the embedded store shares two cores with a
	// -race build and the parallel suite. Latency is measured by tgload.
	gw := startTaskgate(t, up.URL, "--max-tasks-per-owner", "-1", "--store-timeout", "20s")
	c := newRawClient(t, gw.URL)
	c.initialize()

	const n = 200
	ids := make([]string, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			text := fmt.Sprintf("message-%03d", i)
			body, _ := c.marshalRequest("tools/call", map[string]any{"name": "echo",
				"arguments": map[string]any{"text": text}, "task": map[string]any{}})
			r, err := c.tryPost(body)
			if err != nil {
				errs <- err
				return
			}
			var res struct {
				Task wireTask `json:"task"`
			}
			if r.Msg == nil || r.Msg.Error != nil || json.Unmarshal(r.Msg.Result, &res) != nil {
				errs <- fmt.Errorf("create %d: HTTP %d %q", i, r.Status, r.Body)
				return
			}
			ids[i] = res.Task.TaskID
			body, _ = c.marshalRequest("tasks/result", map[string]any{"taskId": res.Task.TaskID})
			if r, err = c.tryPost(body); err != nil {
				errs <- err
				return
			}
			var out toolResult
			if r.Msg == nil || r.Msg.Error != nil || json.Unmarshal(r.Msg.Result, &out) != nil {
				errs <- fmt.Errorf("result %d: HTTP %d %q", i, r.Status, r.Body)
				return
			}
			if out.text() != text {
				errs <- fmt.Errorf("task %d (%s): result %q, want %q", i, res.Task.TaskID, out.text(), text)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		if !taskIDRE.MatchString(id) {
			t.Errorf("task %d id %q is not 32 lowercase hex characters", i, id)
		}
		if seen[id] {
			t.Errorf("task id %s given twice", id)
		}
		seen[id] = true
	}
}

// tryPost is postRaw without t.Fatal, for goroutines.
func (c *rawClient) tryPost(body []byte) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.session)
	req.Header.Set("MCP-Protocol-Version", c.version)
	resp, err := c.hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return reply{}, err
	}
	r := reply{Status: resp.StatusCode, Header: resp.Header, Body: buf.Bytes()}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var m rpcMsg
		if err := json.Unmarshal(r.Body, &m); err != nil {
			return r, err
		}
		r.Msg = &m
	} else if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sr := newSSEReader(bytes.NewReader(r.Body))
		for {
			ev, err := sr.next()
			if err != nil {
				break
			}
			var m rpcMsg
			if ev.Data != "" && json.Unmarshal([]byte(ev.Data), &m) == nil && m.Method == "" {
				r.Msg = &m
			}
		}
	}
	return r, nil
}

// E-41, T-74, T-75: two callers with different Authorization headers cannot
// see each other's tasks: get/result/cancel answer exactly like an unknown
// id, and tasks/list leaves them out.
func TestTaskOwnerIsolation_E41(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	alice, _ := newMCPClient(t, gw.URL, map[string]string{"Authorization": "Bearer alice-token"})
	bob, _ := newMCPClient(t, gw.URL, map[string]string{"Authorization": "Bearer bob-token"})

	tk := mcpCreateTask(t, alice, "slow", map[string]any{"seconds": 1}, nil)
	bobs := mcpCreateTask(t, bob, "echo", map[string]any{"text": "bob"}, nil)
	unknown := strings.Repeat("0", 32)

	for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		foreign := mcpSend(t, bob, method, map[string]any{"taskId": tk.TaskId})
		missing := mcpSend(t, bob, method, map[string]any{"taskId": unknown})
		if foreign.Error == nil || foreign.Error.Code != -32602 {
			t.Errorf("%s of alice's task by bob = %+v %s, want -32602", method, foreign.Error, foreign.Result)
			continue
		}
		if missing.Error == nil || foreign.Error.Message != missing.Error.Message {
			t.Errorf("%s: foreign task message %q differs from unknown id message %+v", method, foreign.Error.Message, missing.Error)
		}
	}
	list, err := bob.ListTasks(ctxT(t), mcp.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range list.Tasks {
		if x.TaskId == tk.TaskId {
			t.Errorf("bob's tasks/list shows alice's task")
		}
	}
	if len(list.Tasks) != 1 || list.Tasks[0].TaskId != bobs.TaskId {
		t.Errorf("bob's tasks/list = %+v, want only his task %s", list.Tasks, bobs.TaskId)
	}
	// Alice's task was not touched by bob's cancel.
	waitTaskStatus(t, alice, tk.TaskId, mcp.TaskStatusCompleted, 10*time.Second)
	alist, err := alice.ListTasks(ctxT(t), mcp.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(alist.Tasks) != 1 || alist.Tasks[0].TaskId != tk.TaskId {
		t.Errorf("alice's tasks/list = %+v, want only her task", alist.Tasks)
	}
}

// A 1 MiB result arrives intact through tasks/result (sha256 of the text
// equals the upstream's structuredContent.sha256).
func TestTaskLargeResult(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c, _ := newMCPClient(t, gw.URL, nil)

	const size = 1 << 20
	tk := mcpCreateTask(t, c, "large", map[string]any{"bytes": size}, nil)
	res := taskResult(t, c, tk.TaskId)
	text := textOf(res.Content)
	sum := sha256.Sum256([]byte(text))
	sc, _ := res.StructuredContent.(map[string]any)
	if len(text) != size || sc["sha256"] != hex.EncodeToString(sum[:]) {
		t.Errorf("result text %d bytes sha256 %x; upstream says %v", len(text), sum, sc)
	}
	if relatedTaskID(res.Meta) != tk.TaskId {
		t.Errorf("related-task meta missing on the large result")
	}
}

// Q-12, L-05, H-14: an upstream that speaks only 2025-06-18 is bridged: the
// client negotiates 2025-11-25 with tasks, and its later requests (with
// the 2025-11-25 header, which the upstream would refuse with 400) work.
func TestBridgeOlderUpstream(t *testing.T) {
	t.Parallel()
	up := startLegacy(t, "--max-protocol-version", "2025-06-18")
	gw := startTaskgate(t, up.URL)

	// The upstream alone refuses the new header.
	d := newRawClient(t, up.URL)
	if got := d.initialize(); got.ProtocolVersion != "2025-06-18" {
		t.Fatalf("upstream negotiated %q, want 2025-06-18", got.ProtocolVersion)
	}
	d.version = protocolVersion
	body, _ := d.marshalRequest("tools/list", nil)
	if r := d.postRaw(body); r.Status != http.StatusBadRequest {
		t.Fatalf("upstream with a 2025-11-25 header: HTTP %d, want 400 (the premise of this test)", r.Status)
	}

	c, init := newMCPClient(t, gw.URL, nil)
	if init.ProtocolVersion != protocolVersion || init.Capabilities.Tasks == nil {
		t.Fatalf("initialize through taskgate: version %q tasks %v; want 2025-11-25 with tasks", init.ProtocolVersion, init.Capabilities.Tasks)
	}
	tools, err := c.ListTools(ctxT(t), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	if len(tools.Tools) == 0 {
		t.Fatal("tools/list is empty")
	}
	for _, tl := range tools.Tools {
		if tl.Execution == nil || tl.Execution.TaskSupport != "optional" {
			t.Errorf("tool %s execution = %+v, want taskSupport optional", tl.Name, tl.Execution)
		}
	}
	plain, err := c.CallTool(ctxT(t), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "plain"}}})
	if err != nil || textOf(plain.Content) != "plain" {
		t.Fatalf("plain tools/call: %v %+v", err, plain)
	}
	tk := mcpCreateTask(t, c, "echo", map[string]any{"text": "as task"}, nil)
	res := taskResult(t, c, tk.TaskId)
	if textOf(res.Content) != "as task" {
		t.Errorf("task result %q, want \"as task\"", textOf(res.Content))
	}
	if g := getTask(t, c, tk.TaskId); g.Status != mcp.TaskStatusCompleted {
		t.Errorf("task status %s, want completed", g.Status)
	}

	// tasks/cancel reaches the upstream with its own version too (the
	// notifications/cancelled would otherwise be refused with 400).
	stats := newStatsReader(t, up.URL)
	before := stats.get()
	slow := mcpCreateTask(t, c, "slow", map[string]any{"seconds": 3, "steps": 30}, nil)
	waitUpstreamRunning(t, stats, 1)
	if _, err := c.CancelTask(ctxT(t), mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: slow.TaskId}}); err != nil {
		t.Fatalf("tasks/cancel: %v", err)
	}
	waitFor(t, 10*time.Second, "the bridged upstream to see the cancel", func() bool {
		return stats.get().Cancelled > before.Cancelled
	})

	// The standalone GET stream and DELETE are bridged as well.
	raw := newRawClient(t, gw.URL)
	raw.initialize()
	req := raw.request(ctxT(t), http.MethodDelete, nil)
	if r := raw.do(req); r.Status != http.StatusNoContent {
		t.Errorf("DELETE of a bridged session: HTTP %d %q, want 204", r.Status, r.Body)
	}
}

// Any replica answers any task (all task state lives in the store): two taskgates on one Redis (same --owner-key) in front
// of one upstream: a task created on A is read, awaited, listed and
// cancelled through B; B's cancel stops the call A runs.
func TestTwoReplicasShareRedis(t *testing.T) {
	t.Parallel()
	redisURL := "redis://" + redistest.Start(t)
	up := startLegacy(t)
	key := "e2e-shared-owner-key-0123456789"
	a := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key)
	b := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key)
	stats := newStatsReader(t, up.URL)

	ca := newRawClient(t, a.URL)
	ca.header.Set("Authorization", "Bearer shared")
	ca.initialize()
	cb := newRawClient(t, b.URL)
	cb.header = ca.header
	cb.session, cb.version = ca.session, ca.version

	// Read and await through B.
	t1 := ca.createTask("slow", map[string]any{"seconds": 1, "steps": 1}, nil)
	if g := cb.getTask(t1.TaskID); g.Status != "working" || g.CreatedAt != t1.CreatedAt {
		t.Errorf("tasks/get on B = %+v, want the working task created on A", g)
	}
	var res toolResult
	cb.result("tasks/result", map[string]any{"taskId": t1.TaskID}, &res)
	if res.text() != "slept 1 seconds" {
		t.Errorf("tasks/result on B = %q, want \"slept 1 seconds\"", res.text())
	}

	// List and cancel through B.
	before := stats.get()
	t2 := ca.createTask("slow", map[string]any{"seconds": 3, "steps": 30}, nil)
	waitUpstreamRunning(t, stats, 1)
	list := cb.listTasks()
	var ids []string
	for _, x := range list.Tasks {
		ids = append(ids, x.TaskID)
	}
	if len(ids) != 2 || ids[0] != t1.TaskID || ids[1] != t2.TaskID {
		t.Errorf("tasks/list on B = %v, want [%s %s]", ids, t1.TaskID, t2.TaskID)
	}
	var cancelled wireTask
	cb.result("tasks/cancel", map[string]any{"taskId": t2.TaskID}, &cancelled)
	if cancelled.Status != "cancelled" {
		t.Errorf("tasks/cancel on B: status %q", cancelled.Status)
	}
	waitFor(t, 10*time.Second, "the upstream call run by A to be cancelled", func() bool {
		return stats.get().Cancelled > before.Cancelled
	})
	if g := ca.getTask(t2.TaskID); g.Status != "cancelled" {
		t.Errorf("tasks/get on A after B's cancel: %q", g.Status)
	}
}

// E-32, T-28..T-31: a task with a small ttl disappears after it: get,
// result and cancel answer -32602 and tasks/list leaves it out.
func TestTaskTTLExpiry_E32(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	pol := writePolicy(t, "defaults:\n  ttl: {default: 1h, min: 1s, max: 24h}\n")
	gw := startTaskgate(t, up.URL, "--config", pol)
	c := newRawClient(t, gw.URL)
	c.initialize()

	short := c.createTask("echo", map[string]any{"text": "short"}, map[string]any{"ttl": 1000})
	long := c.createTask("echo", map[string]any{"text": "long"}, map[string]any{"ttl": 60000})
	if string(short.TTL) != "1000" || string(long.TTL) != "60000" {
		t.Errorf("ttl reported %s and %s, want 1000 and 60000", short.TTL, long.TTL)
	}
	clamped := c.createTask("echo", map[string]any{"text": "clamped"}, map[string]any{"ttl": 10})
	if string(clamped.TTL) != "1000" {
		t.Errorf("ttl 10 reported as %s, want it clamped to ttl.min 1000", clamped.TTL)
	}
	c.waitStatus(short.TaskID, "completed", 5*time.Second)
	created, _ := time.Parse(time.RFC3339Nano, short.CreatedAt)

	for _, id := range []string{short.TaskID, clamped.TaskID} { // clamped was created a little later
		waitFor(t, 5*time.Second, "the short tasks to expire", func() bool {
			r := c.call("tasks/get", map[string]any{"taskId": id})
			return r.Msg.Error != nil && r.Msg.Error.Code == -32602
		})
	}
	if d := time.Since(created); d < time.Second {
		t.Errorf("task gone %v after creation, before its ttl of 1s", d)
	}
	for _, m := range []string{"tasks/result", "tasks/cancel"} {
		if e := c.rpcErr(m, map[string]any{"taskId": short.TaskID}); e.Code != -32602 {
			t.Errorf("%s of an expired task: %d %q, want -32602", m, e.Code, e.Message)
		}
	}
	list := c.listTasks()
	for _, x := range list.Tasks {
		if x.TaskID == short.TaskID || x.TaskID == clamped.TaskID {
			t.Errorf("tasks/list still shows expired task %s", x.TaskID)
		}
	}
	if len(list.Tasks) != 1 || list.Tasks[0].TaskID != long.TaskID {
		t.Errorf("tasks/list = %+v, want only the long-lived task", list.Tasks)
	}
}

// T-52, T-53, T-56, T-68, Q-16: tasks/list pages with --list-page-size 3
// over 7 tasks are 3, 3, 1, each task once; a tampered cursor is -32602.
func TestTasksListPagination_T68(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--list-page-size", "3")
	c, _ := newMCPClient(t, gw.URL, map[string]string{"Authorization": "Bearer pager"})

	var want []string
	for i := range 7 {
		want = append(want, mcpCreateTask(t, c, "echo", map[string]any{"text": fmt.Sprint(i)}, nil).TaskId)
	}
	var got []string
	var sizes []int
	var cursors []mcp.Cursor
	req := mcp.ListTasksRequest{}
	for {
		page, err := c.ListTasksByPage(ctxT(t), req)
		if err != nil {
			t.Fatalf("tasks/list: %v", err)
		}
		sizes = append(sizes, len(page.Tasks))
		for _, x := range page.Tasks {
			got = append(got, x.TaskId)
		}
		if page.NextCursor == "" {
			break
		}
		cursors = append(cursors, page.NextCursor)
		if len(sizes) > 5 {
			t.Fatal("tasks/list does not end")
		}
		req.Params.Cursor = page.NextCursor
	}
	if fmt.Sprint(sizes) != "[3 3 1]" {
		t.Errorf("page sizes %v, want [3 3 1]", sizes)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("listed %v, want each task once in creation order %v", got, want)
	}
	// Tampered cursors: one character changed, truncated, garbage.
	cur := string(cursors[0])
	flip := []byte(cur)
	if flip[len(flip)/2] == 'A' {
		flip[len(flip)/2] = 'B'
	} else {
		flip[len(flip)/2] = 'A'
	}
	for _, bad := range []string{string(flip), cur[:len(cur)-2], "not-a-cursor"} {
		resp := mcpSend(t, c, "tasks/list", map[string]any{"cursor": bad})
		if resp.Error == nil || resp.Error.Code != -32602 {
			t.Errorf("tasks/list cursor %q = %+v %s, want -32602", bad, resp.Error, resp.Result)
		}
	}
	// Another caller's cursor is refused too.
	other, _ := newMCPClient(t, gw.URL, map[string]string{"Authorization": "Bearer other"})
	if resp := mcpSend(t, other, "tasks/list", map[string]any{"cursor": cur}); resp.Error == nil || resp.Error.Code != -32602 {
		t.Errorf("tasks/list with another caller's cursor = %+v %s, want -32602", resp.Error, resp.Result)
	}
	if _, err := c.ListTasksByPage(ctxT(t), mcp.ListTasksRequest{PaginatedRequest: mcp.PaginatedRequest{Params: mcp.PaginatedParams{Cursor: "x"}}}); !errors.Is(err, mcp.ErrInvalidParams) {
		t.Errorf("mcp-go ListTasksByPage with a bad cursor: %v, want ErrInvalidParams", err)
	}
}

// E-25, H-07, H-12: tasks/result over SSE primes the stream with an event
// id; after the connection drops, GET with Last-Event-ID resumes and
// delivers the final result once, with the original request id.
func TestTaskResultResume_E25(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()
	tk := c.createTask("slow", map[string]any{"seconds": 2, "steps": 2}, nil)

	body := []byte(`{"jsonrpc":"2.0","id":"result-7","method":"tasks/result","params":{"taskId":"` + tk.TaskID + `"}}`)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := c.hc.Do(c.request(ctx, http.MethodPost, body))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		cancel()
		t.Fatalf("tasks/result Content-Type %q, want text/event-stream", ct)
	}
	prime, err := newSSEReader(resp.Body).next()
	if err != nil {
		cancel()
		t.Fatalf("reading the priming event: %v", err)
	}
	// Drop the connection while the task still runs.
	cancel()
	resp.Body.Close()
	if !prime.HasID || !strings.HasPrefix(prime.ID, "tg1.") || prime.Data != "" {
		t.Fatalf("priming event = %+v, want an id tg1.… and empty data", prime)
	}
	if prime.Retry == "" {
		t.Errorf("priming event has no retry field")
	}
	if g := c.getTask(tk.TaskID); g.Status != "working" {
		t.Errorf("task is %s at the resume; the test wants to resume a pending wait", g.Status)
	}

	req := c.request(ctxT(t), http.MethodGet, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", prime.ID)
	r := c.do(req)
	if r.Status != http.StatusOK {
		t.Fatalf("resume GET: HTTP %d %q", r.Status, r.Body)
	}
	// The resumed stream may first carry the task's queued notifications
	// (issue 4: they wait for a stream), then exactly one response.
	var finals []sseEvent
	for _, ev := range r.Events {
		if ev.Data != "" && !strings.Contains(ev.Data, `"method":"notifications/`) {
			finals = append(finals, ev)
		}
	}
	if len(finals) != 1 {
		t.Fatalf("resumed stream carries %d responses, want exactly the result: %q", len(finals), r.Body)
	}
	if r.Msg == nil || string(r.Msg.ID) != `"result-7"` || r.Msg.Error != nil {
		t.Fatalf("resumed message = %s, want the result for id \"result-7\"", finals[0].Data)
	}
	var res toolResult
	_ = json.Unmarshal(r.Msg.Result, &res)
	if res.text() != "slept 2 seconds" {
		t.Errorf("resumed result %q, want \"slept 2 seconds\"", res.text())
	}
	// A foreign caller cannot resume it.
	other := newRawClient(t, gw.URL)
	other.header.Set("Authorization", "Bearer someone-else")
	req = other.request(ctxT(t), http.MethodGet, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", prime.ID)
	if r := other.do(req); r.Status == http.StatusOK && r.Msg != nil && r.Msg.Error == nil {
		t.Errorf("a foreign caller resumed the stream and got the result")
	}
}
