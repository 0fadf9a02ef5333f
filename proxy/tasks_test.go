package proxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// taskEnv runs a Handler on the embedded store (real Lua, real TTL expiry)
// in front of a fakeUpstream.
type taskEnv struct {
	t     *testing.T
	up    *fakeUpstream
	h     *Handler
	store *taskstore.Embedded
	c     *fasthttp.HostClient
}

const testPolicy = `
defaults:
  taskSupport: optional
  ttl: {default: 1h, min: 1s, max: 2h}
  pollInterval: 1500ms
rules:
  - match: forbidden_*
    taskSupport: forbidden
  - match: required_*
    taskSupport: required
  - match: echo
    maxConcurrent: 0
  - match: block
    maxConcurrent: 50
`

func newTaskEnv(t *testing.T, policyYAML string, cfg Config) *taskEnv {
	t.Helper()
	return newTaskEnvWrapped(t, policyYAML, cfg, nil)
}

// newTaskEnvWrapped is newTaskEnv with the Handler's store wrapped by wrap
// (e.g. a countingStore); e.store stays the plain store.
func newTaskEnvWrapped(t *testing.T, policyYAML string, cfg Config, wrap func(taskstore.Store) taskstore.Store) *taskEnv {
	t.Helper()
	if policyYAML == "" {
		policyYAML = testPolicy
	}
	pol, err := policy.Parse([]byte(policyYAML), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return newTaskEnvOn(t, pol, cfg, wrap, newFakeUpstream(t))
}

// newTaskEnvOn is newTaskEnvWrapped in front of up.
func newTaskEnvOn(t *testing.T, pol *policy.Policy, cfg Config, wrap func(taskstore.Store) taskstore.Store, up *fakeUpstream) *taskEnv {
	t.Helper()
	return newTaskEnvLog(t, pol, cfg, wrap, up, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
}

// newTaskEnvLog is newTaskEnvOn with the Handler logging to log.
func newTaskEnvLog(t *testing.T, pol *policy.Policy, cfg Config, wrap func(taskstore.Store) taskstore.Store, up *fakeUpstream, log zerolog.Logger) *taskEnv {
	t.Helper()
	store, closeStore, err := taskstore.NewEmbedded(taskstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = up.url()
	if cfg.TaskRate == 0 {
		cfg.TaskRate = -1 // tests poll fast; TestRateLimit covers the limit
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = time.Second
	}
	var hs taskstore.Store = store
	if wrap != nil {
		hs = wrap(store)
	}
	h, err := New(cfg, pol, hs, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h.ServeFastHTTP, ErrorHandler: h.ErrorHandler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		up.releaseAll()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Close(ctx)
		_ = srv.Shutdown()
		// Shutdown before Serve has taken the listener returns at once and
		// leaves Serve to block in Accept: closing the listener ends it.
		_ = ln.Close()
		closeStore()
	})
	return &taskEnv{t: t, up: up, h: h, store: store,
		c: &fasthttp.HostClient{Addr: "taskgate", Dial: func(string) (net.Conn, error) { return ln.Dial() }}}
}

type rpcReply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	httpStatus int
	sse        bool
	raw        string
}

type wireTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           *int64 `json:"ttl"`
	PollInterval  int64  `json:"pollInterval"`
}

// identity is the caller's headers; the default is "alice".
type identity map[string]string

var alice = identity{"Authorization": "Bearer alice-token", "Mcp-Session-Id": "sess-a"}

// send posts one JSON-RPC message and reads a JSON or SSE answer (for SSE,
// the last data event).
func (e *taskEnv) send(who identity, body string, accept string) rpcReply {
	e.t.Helper()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://taskgate/mcp")
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	for k, v := range who {
		req.Header.Set(k, v)
	}
	req.SetBodyString(body)
	if err := e.c.DoTimeout(req, resp, 20*time.Second); err != nil {
		e.t.Fatalf("POST %s: %v", body, err)
	}
	r := rpcReply{httpStatus: resp.StatusCode(), raw: string(resp.Body())}
	data := resp.Body()
	if wire.IsEventStream(resp.Header.ContentType()) {
		r.sse = true
		sr := sse.NewReader(strings.NewReader(string(data)), 0)
		var last []byte
		for {
			ev, err := sr.Next()
			if err != nil {
				break
			}
			if len(ev.Data) > 0 {
				last = append([]byte(nil), ev.Data...)
			}
		}
		data = last
	}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &r); err != nil {
			e.t.Fatalf("answer to %s is not JSON-RPC: %v: %q", body, err, data)
		}
	}
	return r
}

func (e *taskEnv) call(who identity, id any, method, params string) rpcReply {
	e.t.Helper()
	idj, _ := json.Marshal(id)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q`, idj, method)
	if params != "" {
		body += `,"params":` + params
	}
	return e.send(who, body+"}", "")
}

// createTask calls tool as a task and returns the created task.
func (e *taskEnv) createTask(who identity, tool, args, task string) wireTask {
	e.t.Helper()
	r := e.call(who, "c-"+tool, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s,"task":%s,"_meta":{"progressToken":"p-7"}}`, tool, args, task))
	if r.Error != nil {
		e.t.Fatalf("create %s task: error %d %s", tool, r.Error.Code, r.Error.Message)
	}
	var res struct {
		Task wireTask `json:"task"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil || res.Task.TaskID == "" {
		e.t.Fatalf("create %s task: not a CreateTaskResult: %s", tool, r.raw)
	}
	return res.Task
}

func (e *taskEnv) get(who identity, taskID string) (wireTask, rpcReply) {
	e.t.Helper()
	r := e.call(who, 99, "tasks/get", fmt.Sprintf(`{"taskId":%q}`, taskID))
	var wt wireTask
	if r.Error == nil {
		if err := json.Unmarshal(r.Result, &wt); err != nil {
			e.t.Fatalf("tasks/get result: %v", err)
		}
	}
	return wt, r
}

// waitStatus polls tasks/get until the task has status want.
func (e *taskEnv) waitStatus(who identity, taskID, want string) wireTask {
	e.t.Helper()
	var last wireTask
	pollUntil(e.t, 10*time.Second, func() bool {
		last, _ = e.get(who, taskID)
		return last.Status == want
	}, "task %s to become %s (last %+v)", taskID, want, &last)
	return last
}

func pollUntil(t *testing.T, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for d := time.Millisecond; !cond(); d = min(d*2, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(d) // polling interval, not synchronisation
	}
}

func wantRPCError(t *testing.T, r rpcReply, code int, contains string) {
	t.Helper()
	if r.Error == nil {
		t.Fatalf("got result %s, want error %d", r.Result, code)
	}
	if r.Error.Code != code || !strings.Contains(r.Error.Message, contains) {
		t.Fatalf("got error %d %q, want %d containing %q", r.Error.Code, r.Error.Message, code, contains)
	}
}

var taskIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// E-07, T-14, T-17..T-21, T-26, T-27, T-29, T-32, P-03, P-07: the
// CreateTaskResult comes back while the upstream still works, and the
// upstream gets the call without params.task, with _meta, under an id
// the client cannot collide with, with the client's headers.
func TestCreateTaskResultWhileUpstreamBusy(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	who := identity{"Authorization": "Bearer alice-token", "Mcp-Session-Id": "sess-a", "X-Custom": "kept"}
	task := e.createTask(who, "block", `{}`, `{"ttl":60000}`)
	if !taskIDRe.MatchString(task.TaskID) {
		t.Errorf("taskId %q is not 32 hex chars (128 bits)", task.TaskID)
	}
	if task.Status != "working" || task.CreatedAt != task.LastUpdatedAt || task.TTL == nil || *task.TTL != 60000 || task.PollInterval != heldYoungPoll {
		t.Errorf("created task = %+v, want working, createdAt==lastUpdatedAt, ttl 60000, pollInterval %d (a new task's on its runner)", task, heldYoungPoll)
	}
	if _, err := time.Parse(time.RFC3339Nano, task.CreatedAt); err != nil {
		t.Errorf("createdAt %q is not RFC 3339: %v", task.CreatedAt, err)
	}
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
	reqs, _, _ := e.up.snapshot()
	var call fakeRequest
	for _, r := range reqs {
		if r.method == "tools/call" {
			call = r
		}
	}
	var sent struct {
		ID     string                     `json:"id"`
		Params map[string]json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal([]byte(call.body), &sent); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sent.ID, wire.UpstreamIDPrefix) || strings.Contains(sent.ID, task.TaskID) || len(sent.ID) != len(wire.UpstreamIDPrefix)+32 {
		t.Errorf("upstream request id = %q, want taskgate- and 128 random bits unrelated to the task id (E-45)", sent.ID)
	}
	if _, ok := sent.Params["task"]; ok {
		t.Errorf("upstream got params.task: %s", call.body)
	}
	if string(sent.Params["_meta"]) != `{"progressToken":"p-7"}` {
		t.Errorf("upstream _meta = %s, want the client's progressToken kept", sent.Params["_meta"])
	}
	for k, v := range who {
		if call.headers[k] != v {
			t.Errorf("upstream header %s = %q, want %q", k, call.headers[k], v)
		}
	}
	if call.headers["Mcp-Protocol-Version"] != "2025-11-25" {
		t.Errorf("upstream MCP-Protocol-Version = %q", call.headers["Mcp-Protocol-Version"])
	}
	got, _ := e.get(who, task.TaskID)
	if got.Status != "working" {
		t.Errorf("tasks/get while busy = %q, want working", got.Status)
	}
}

// E-16, E-18, E-19, E-24, T-34, T-36..T-40, T-44: JSON answer; get is flat
// JSON without related-task meta; result carries the upstream result plus
// the meta under the tasks/result request id, the same each time.
func TestTaskCompletesAndResultIsRepeatable(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "echo", `{"text":"hello"}`, `{}`)
	got := e.waitStatus(alice, task.TaskID, "completed")
	if got.TTL == nil || *got.TTL != 3600000 {
		t.Errorf("ttl = %v, want the policy default 3600000 (E-12)", got.TTL)
	}
	_, raw := e.get(alice, task.TaskID)
	if raw.sse || strings.Contains(raw.raw, "related-task") {
		t.Errorf("tasks/get answer = %s (sse %v), want flat JSON without related-task meta", raw.raw, raw.sse)
	}
	want := `{"content":[{"type":"text","text":"hello"}],"structuredContent":{"n":1},"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"` + task.TaskID + `"}}}`
	for i := 0; i < 2; i++ {
		r := e.call(alice, fmt.Sprintf("r-%d", i), "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
		if r.Error != nil || string(r.Result) != want {
			t.Fatalf("tasks/result #%d = %s, want result %s", i, r.raw, want)
		}
		if string(r.ID) != fmt.Sprintf(`"r-%d"`, i) {
			t.Errorf("tasks/result id = %s, want the request's", r.ID)
		}
	}
}

// T-37, E-18, E-19: tasks/result blocks until the task is terminal; two
// concurrent waiters (one JSON, one SSE) get the same outcome.
func TestTaskResultBlocksUntilTerminal(t *testing.T) {
	e := newTaskEnv(t, "", Config{KeepAlive: 20 * time.Millisecond})
	task := e.createTask(alice, "block", `{}`, `{}`)
	jsonWaiter := make(chan rpcReply, 1)
	go func() {
		jsonWaiter <- e.send(alice, fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"tasks/result","params":{"taskId":%q}}`, task.TaskID), "application/json")
	}()
	sse := e.openStream(alice, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":%q}}`, task.TaskID))
	if ev, err := sse.r.Next(); err != nil || !strings.HasPrefix(string(ev.ID), "tg1."+task.TaskID) || len(ev.Data) != 0 {
		t.Fatalf("SSE waiter: first event %+v, %v; want the priming event", ev, err)
	}
	// The JSON waiter is blocked inside the handler.
	pollUntil(t, 5*time.Second, func() bool { return testutil.ToFloat64(e.h.m.inflight) == 1 }, "the JSON waiter to block")
	e.up.releaseAll()
	for i, r := range []rpcReply{<-jsonWaiter, {}} {
		if i == 1 {
			m := sse.next(nil)
			r = rpcReply{ID: m.ID, Result: m.Result, raw: m.raw}
		}
		if r.Error != nil || !strings.Contains(string(r.Result), `"text":"released"`) || !strings.Contains(string(r.Result), task.TaskID) || string(r.ID) != fmt.Sprint(i) {
			t.Errorf("waiter %d got %s", i, r.raw)
		}
	}
}

// E-25, issue 3 item 5: a tasks/result SSE wait sends a priming event at
// once and keep-alive comments while it waits; the result is the last event.
func TestTaskResultStreamKeepAlive(t *testing.T) {
	e := newTaskEnv(t, "", Config{KeepAlive: 20 * time.Millisecond})
	task := e.createTask(alice, "block", `{}`, `{}`)
	c := &fasthttp.HostClient{Addr: "taskgate", Dial: e.c.Dial, StreamResponseBody: true}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://taskgate/mcp")
	req.Header.SetMethod("POST")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	for k, v := range alice {
		req.Header.Set(k, v)
	}
	req.SetBodyString(fmt.Sprintf(`{"jsonrpc":"2.0","id":"w","method":"tasks/result","params":{"taskId":%q}}`, task.TaskID))
	if err := c.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	defer resp.CloseBodyStream()
	br := bufio.NewReader(resp.BodyStream())
	readUntil := func(prefix string) string {
		t.Helper()
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended before %q: %v", prefix, err)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		}
	}
	if first := readUntil(""); !strings.HasPrefix(first, "id: tg1."+task.TaskID+".") {
		t.Fatalf("first line = %q, want the priming event id", first)
	}
	readUntil("retry: ")
	readUntil(": keep-alive") // arrives while the task still works
	readUntil(": keep-alive")
	e.up.releaseAll()
	data := readUntil("data: {")
	if !strings.Contains(data, `"id":"w"`) || !strings.Contains(data, "released") {
		t.Errorf("final event = %q", data)
	}
}

// E-20, T-24, T-25, Q-03: isError -> failed with statusMessage; tasks/result
// is a success carrying the CallToolResult.
func TestIsErrorFails(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "fail", `{}`, `{}`)
	got := e.waitStatus(alice, task.TaskID, "failed")
	if !strings.Contains(got.StatusMessage, "quota exceeded") {
		t.Errorf("statusMessage = %q, want the tool's error text", got.StatusMessage)
	}
	r := e.call(alice, 5, "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	if r.Error != nil || !strings.Contains(string(r.Result), `"isError":true`) {
		t.Errorf("tasks/result = %s, want the CallToolResult", r.raw)
	}
}

// E-21, T-38, Q-02: a JSON-RPC error upstream -> failed; tasks/result
// replays code, message and data.
func TestRPCErrorReplayed(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "rpcerr", `{}`, `{}`)
	got := e.waitStatus(alice, task.TaskID, "failed")
	if !strings.Contains(got.StatusMessage, "-32042") {
		t.Errorf("statusMessage = %q", got.StatusMessage)
	}
	r := e.call(alice, 5, "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	if r.Error == nil || r.Error.Code != -32042 || r.Error.Message != "URL elicitation required" ||
		string(r.Error.Data) != `{"elicitations":[{"mode":"url","url":"https://example.test/x"}]}` {
		t.Errorf("tasks/result = %s, want the upstream error verbatim", r.raw)
	}
}

// E-22, E-44: transport failures and an ended upstream session -> failed,
// tasks/result -32603 with the reason.
func TestTransportFailures(t *testing.T) {
	e := newTaskEnv(t, "", Config{MaxResultSize: 1000})
	for _, tc := range []struct{ tool, args, msg string }{
		{tool: "status404", args: `{}`, msg: "HTTP 404"},
		{tool: "big", args: `{"bytes":5000}`, msg: "result size limit"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			task := e.createTask(alice, tc.tool, tc.args, `{}`)
			got := e.waitStatus(alice, task.TaskID, "failed")
			if !strings.Contains(got.StatusMessage, tc.msg) {
				t.Errorf("statusMessage = %q, want %q", got.StatusMessage, tc.msg)
			}
			r := e.call(alice, 5, "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
			wantRPCError(t, r, wire.CodeInternalError, tc.msg)
		})
	}
}

// E-23, E-24, P-04: SSE answers (with a notification and a server ping on
// the way) and an SSE stream dropped after a primed event that the runner
// resumes with GET + Last-Event-ID.
func TestSSEAnswersAndResume(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "progress", `{}`, `{}`)
	e.waitStatus(alice, task.TaskID, "completed")
	pollUntil(t, 5*time.Second, func() bool {
		reqs, _, _ := e.up.snapshot()
		for _, r := range reqs {
			if strings.Contains(r.body, `"id":"srv-1","result":{}`) {
				return true
			}
		}
		return false
	}, "the answer to the upstream's ping")

	task = e.createTask(alice, "drop", `{}`, `{}`)
	e.waitStatus(alice, task.TaskID, "completed")
	r := e.call(alice, 5, "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	if !strings.Contains(string(r.Result), "resumed") {
		t.Errorf("tasks/result = %s, want the resumed stream's result", r.raw)
	}
	reqs, _, _ := e.up.snapshot()
	resumed := false
	for _, r := range reqs {
		resumed = resumed || (r.httpGet && r.headers["Last-Event-Id"] == "e1" && r.headers["Mcp-Session-Id"] == "sess-a")
	}
	if !resumed {
		t.Error("the upstream saw no GET with Last-Event-ID e1 and the session")
	}
}

// E-26..E-29, T-57..T-59, P-06, Q-01: cancel a working task.
func TestCancel(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "block", `{}`, `{}`)
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
	blocked := make(chan rpcReply, 1)
	go func() {
		blocked <- e.call(alice, "wait", "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	}()
	r := e.call(alice, 7, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	var ct wireTask
	if r.Error != nil || json.Unmarshal(r.Result, &ct) != nil || ct.Status != "cancelled" || ct.TaskID != task.TaskID {
		t.Fatalf("tasks/cancel = %s, want the flat task, cancelled", r.raw)
	}
	select { // E-29: the blocked tasks/result returns promptly
	case br := <-blocked:
		wantRPCError(t, br, wire.CodeInternalError, "cancelled")
	case <-time.After(5 * time.Second):
		t.Fatal("blocked tasks/result did not return after the cancel")
	}
	pollUntil(t, 5*time.Second, func() bool {
		_, cancelled, aborted := e.up.snapshot()
		return len(cancelled) == 1 && cancelled[0] == e.up.callID("block") && aborted == 1
	}, "notifications/cancelled for the upstream request and the aborted upstream stream")
	e.up.releaseAll()
	if got, _ := e.get(alice, task.TaskID); got.Status != "cancelled" {
		t.Errorf("status after cancel = %q, want cancelled (T-59)", got.Status)
	}
	wantRPCError(t, e.call(alice, 8, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, task.TaskID)), wire.CodeInvalidParams, "already finished")
	wantRPCError(t, e.call(alice, 9, "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID)), wire.CodeInternalError, "cancelled")
	wantRPCError(t, e.call(alice, 10, "tasks/cancel", `{"taskId":"0123456789abcdef0123456789abcdef"}`), wire.CodeInvalidParams, "not found") // E-28

	done := e.createTask(alice, "echo", `{"text":"x"}`, `{}`)
	e.waitStatus(alice, done.TaskID, "completed")
	wantRPCError(t, e.call(alice, 11, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, done.TaskID)), wire.CodeInvalidParams, "already finished") // E-27
	if got, _ := e.get(alice, done.TaskID); got.Status != "completed" {
		t.Errorf("status after refused cancel = %q, want completed", got.Status)
	}
}

// T-37 (issue 3 item 5): a blocking tasks/result on the process that runs
// the call waits for its runner, not for a store subscription, and answers
// with the outcome the runner stored: no Watch, no store read.
func TestTaskResultWaitsOnLocalRunner(t *testing.T) {
	var cs *countingStore
	e := newTaskEnvWrapped(t, "", Config{}, func(s taskstore.Store) taskstore.Store {
		cs = &countingStore{Store: s, calls: make(map[string]int)}
		return cs
	})
	task := e.createTask(alice, "block", `{}`, `{}`)
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
	before := cs.callsExcept()
	waiter := make(chan rpcReply, 1)
	go func() {
		waiter <- e.call(alice, "w", "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	}()
	pollUntil(t, 5*time.Second, func() bool { return testutil.ToFloat64(e.h.m.inflight) == 1 }, "the waiter to block")
	e.up.releaseAll()
	r := <-waiter
	if r.Error != nil || !strings.Contains(string(r.Result), `"text":"released"`) || !strings.Contains(string(r.Result), task.TaskID) {
		t.Fatalf("tasks/result = %s, want the released result with its related task", r.raw)
	}
	after := cs.callsExcept()
	if n := after["Outcome"] - before["Outcome"]; n != 0 {
		t.Errorf("tasks/result read the outcome %d times, want 0 (the runner hands over what it stored)", n)
	}
	// Repeated calls give the same answer (T-38), now from the store.
	again := e.call(alice, "w", "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	if again.raw != r.raw {
		t.Errorf("second tasks/result = %s, want the same answer as the first: %s", again.raw, r.raw)
	}
	if n := after["Watch"] + after["WatchKinds"] - before["Watch"] - before["WatchKinds"]; n != 0 {
		t.Errorf("tasks/result subscribed %d times, want 0 (it waits on the local runner)", n)
	}
}

// Runner goroutines are reused: tasks that run one after the other run on
// one goroutine; concurrent ones each get their own.
func TestRunnerGoroutinesReused(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	for i := range 5 {
		task := e.createTask(alice, "echo", fmt.Sprintf(`{"text":"n%d"}`, i), `{}`)
		e.waitStatus(alice, task.TaskID, "completed")
		pollUntil(t, 5*time.Second, func() bool { return e.h.eng.RunnersIdle() == 1 }, "the runner to wait for the next job")
	}
	if n := e.h.eng.RunnersStarted(); n != 1 {
		t.Errorf("5 tasks in a row started %d runner goroutines, want 1", n)
	}
	var tasks []wireTask
	for range 3 {
		tasks = append(tasks, e.createTask(alice, "block", `{}`, `{}`))
	}
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 8 }, "3 concurrent upstream calls")
	if n := e.h.eng.RunnersStarted(); n != 3 {
		t.Errorf("3 concurrent tasks after an idle runner: %d runner goroutines started in all, want 3", n)
	}
	e.up.releaseAll()
	for _, task := range tasks {
		e.waitStatus(alice, task.TaskID, "completed")
	}
}

// T-58, E-29 across replicas: the call runs on A and a tasks/result waits
// on A; a tasks/cancel through B reaches A's runner (through the store) and
// the waiter answers that the task was cancelled; the upstream is told.
func TestCancelThroughReplicaWakesLocalWaiter(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	b := e.replica(Config{})
	task := e.createTask(alice, "block", `{}`, `{}`)
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
	blocked := make(chan rpcReply, 1)
	go func() {
		blocked <- e.call(alice, "wait", "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	}()
	pollUntil(t, 5*time.Second, func() bool { return testutil.ToFloat64(e.h.m.inflight) == 1 }, "the waiter to block")
	r := b.call(alice, 7, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	if r.Error != nil || !strings.Contains(string(r.Result), `"status":"cancelled"`) {
		t.Fatalf("tasks/cancel through B = %s, want the cancelled task", r.raw)
	}
	select {
	case br := <-blocked:
		wantRPCError(t, br, wire.CodeInternalError, "cancelled")
	case <-time.After(5 * time.Second):
		t.Fatal("tasks/result waiting on the runner's process did not return after a cancel through another replica")
	}
	pollUntil(t, 5*time.Second, func() bool {
		_, cancelled, aborted := e.up.snapshot()
		return len(cancelled) == 1 && aborted == 1
	}, "notifications/cancelled and the aborted upstream request")
}

// E-31, E-32, T-30: a task is gone once its ttl passed; a working one has
// its upstream call cancelled.
func TestTTLExpiry(t *testing.T) {
	e := newTaskEnv(t, `
defaults:
  ttl: {default: 1h, min: 300ms, max: 2h}
`, Config{})
	working := e.createTask(alice, "block", `{}`, `{"ttl":300}`)
	done := e.createTask(alice, "echo", `{"text":"x"}`, `{"ttl":300}`)
	if *working.TTL != 300 {
		t.Fatalf("ttl = %d, want 300", *working.TTL)
	}
	for _, id := range []string{working.TaskID, done.TaskID} {
		pollUntil(t, 5*time.Second, func() bool {
			_, r := e.get(alice, id)
			return r.Error != nil
		}, "task %s to expire", id)
		wantRPCError(t, e.call(alice, 1, "tasks/get", fmt.Sprintf(`{"taskId":%q}`, id)), wire.CodeInvalidParams, "not found")
		wantRPCError(t, e.call(alice, 2, "tasks/result", fmt.Sprintf(`{"taskId":%q}`, id)), wire.CodeInvalidParams, "not found")
		wantRPCError(t, e.call(alice, 3, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, id)), wire.CodeInvalidParams, "not found")
	}
	r := e.call(alice, 4, "tasks/list", "")
	if strings.Contains(string(r.Result), working.TaskID) || strings.Contains(string(r.Result), done.TaskID) {
		t.Errorf("tasks/list after expiry = %s, want them gone", r.raw)
	}
	pollUntil(t, 5*time.Second, func() bool {
		_, cancelled, _ := e.up.snapshot()
		return len(cancelled) == 1 && cancelled[0] == e.up.callID("block")
	}, "the expired working task's upstream call to be cancelled")
}

// E-12, E-13, Q-04, Q-05: requested ttl values are clamped, the reported
// ttl is the effective one.
func TestTTLClamping(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	for _, tc := range []struct {
		task string
		want int64
	}{
		{task: `{}`, want: 3600000},
		{task: `{"ttl":null}`, want: 3600000},
		{task: `{"ttl":0}`, want: 1000},
		{task: `{"ttl":-5}`, want: 1000},
		{task: `{"ttl":1.5}`, want: 1000},
		{task: `{"ttl":"60000"}`, want: 3600000},
		{task: `{"ttl":1000000000000}`, want: 7200000},
		{task: `{"ttl":120000}`, want: 120000},
	} {
		got := e.createTask(alice, "echo", `{"text":"x"}`, tc.task)
		if got.TTL == nil || *got.TTL != tc.want {
			t.Errorf("task %s: ttl = %v, want %d", tc.task, got.TTL, tc.want)
		}
		if g, _ := e.get(alice, got.TaskID); g.TTL == nil || *g.TTL != tc.want {
			t.Errorf("task %s: tasks/get ttl = %v, want %d (T-29)", tc.task, g.TTL, tc.want)
		}
	}
}

// E-41, T-74, T-75: another owner gets exactly the unknown-task answer,
// also with the same session id; tasks/list shows only one's own tasks.
func TestOwnerIsolation(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "echo", `{"text":"secret"}`, `{}`)
	e.waitStatus(alice, task.TaskID, "completed")
	bob := identity{"Authorization": "Bearer bob-token", "Mcp-Session-Id": "sess-a"}
	unknown := `{"taskId":"0123456789abcdef0123456789abcdef"}`
	mine := fmt.Sprintf(`{"taskId":%q}`, task.TaskID)
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		foreign, miss := e.call(bob, 1, m, mine), e.call(bob, 1, m, unknown)
		if foreign.Error == nil || miss.Error == nil || foreign.raw != miss.raw {
			t.Errorf("%s: foreign task answer %s differs from unknown task answer %s", m, foreign.raw, miss.raw)
		}
	}
	if r := e.call(bob, 2, "tasks/list", ""); strings.Contains(r.raw, task.TaskID) || r.Error != nil {
		t.Errorf("bob's tasks/list = %s", r.raw)
	}
	if r := e.call(alice, 2, "tasks/list", ""); !strings.Contains(r.raw, task.TaskID) {
		t.Errorf("alice's tasks/list = %s, want her task (T-55)", r.raw)
	}
	// Without Authorization the session id is the owner.
	anonA := identity{"Mcp-Session-Id": "sess-x"}
	t2 := e.createTask(anonA, "echo", `{"text":"y"}`, `{}`)
	if _, r := e.get(identity{"Mcp-Session-Id": "sess-y"}, t2.TaskID); r.Error == nil {
		t.Error("another session read a session-owned task")
	}
	if _, r := e.get(anonA, t2.TaskID); r.Error != nil {
		t.Errorf("owner session cannot read its task: %s", r.raw)
	}
}

// T-52..T-56, E-06, Q-17: paging, bad cursors, no list for anonymous callers.
func TestTasksList(t *testing.T) {
	e := newTaskEnv(t, "", Config{ListPageSize: 3})
	want := map[string]bool{}
	for i := 0; i < 7; i++ {
		want[e.createTask(alice, "echo", fmt.Sprintf(`{"text":"%d"}`, i), `{}`).TaskID] = true
	}
	seen := map[string]int{}
	cursor, pages := "", []int{}
	for {
		params := ""
		if cursor != "" {
			params = fmt.Sprintf(`{"cursor":%q}`, cursor)
		}
		r := e.call(alice, 1, "tasks/list", params)
		var page struct {
			Tasks      []wireTask `json:"tasks"`
			NextCursor string     `json:"nextCursor"`
		}
		if r.Error != nil || json.Unmarshal(r.Result, &page) != nil {
			t.Fatalf("tasks/list = %s", r.raw)
		}
		pages = append(pages, len(page.Tasks))
		for _, tk := range page.Tasks {
			seen[tk.TaskID]++
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if fmt.Sprint(pages) != "[3 3 1]" {
		t.Errorf("page sizes = %v, want [3 3 1]", pages)
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("task %s listed %d times, want once", id, seen[id])
		}
	}
	wantRPCError(t, e.call(alice, 2, "tasks/list", `{"cursor":"garbage"}`), wire.CodeInvalidParams, "invalid cursor")
	wantRPCError(t, e.call(alice, 2, "tasks/list", `{"cursor":5}`), wire.CodeInvalidParams, "cursor")
	wantRPCError(t, e.call(identity{}, 3, "tasks/list", ""), wire.CodeMethodNotFound, "tasks/list")
}

// E-08..E-11, T-08, T-10, T-11: the tool policy is enforced before the
// upstream is contacted.
func TestToolPolicy(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	wantRPCError(t, e.call(alice, 1, "tools/call", `{"name":"forbidden_x","arguments":{},"task":{}}`), wire.CodeMethodNotFound, "forbidden")
	wantRPCError(t, e.call(alice, 2, "tools/call", `{"name":"required_x","arguments":{}}`), wire.CodeMethodNotFound, "required")
	if n := e.up.toolCalls(); n != 0 {
		t.Fatalf("upstream got %d tools/call, want 0", n)
	}
	r := e.call(alice, 3, "tools/call", `{"name":"echo","arguments":{"text":"plain"}}`)
	if r.Error != nil || !strings.Contains(string(r.Result), "plain") || strings.Contains(string(r.Result), "task") {
		t.Errorf("plain call of an optional tool = %s, want the upstream's result", r.raw)
	}
	// A task on a request type without task support is forwarded as is (T-11).
	r = e.call(alice, 4, "resources/read", `{"uri":"x://y","task":{}}`)
	if r.Error != nil {
		t.Errorf("resources/read with task = %s, want it forwarded", r.raw)
	}
	// A session at an older protocol version has no tasks: nothing enforced.
	old := identity{"Authorization": "Bearer alice-token", "MCP-Protocol-Version": "2025-06-18"}
	if r := e.call(old, 5, "tools/call", `{"name":"required_x","arguments":{}}`); r.Error != nil && r.Error.Code == wire.CodeMethodNotFound && strings.Contains(r.Error.Message, "taskgate") {
		t.Errorf("old-version session got taskgate's policy error: %s", r.raw)
	}
	// Odd-cased members that a case-insensitive upstream would read are refused.
	wantRPCError(t, e.call(alice, 6, "tools/call", `{"name":"echo","Name":"forbidden_x","task":{}}`), wire.CodeInvalidParams, "case")
	// tasks/* never reach the upstream (P-03).
	e.call(alice, 7, "tasks/get", `{"taskId":"0123456789abcdef0123456789abcdef"}`)
	reqs, _, _ := e.up.snapshot()
	for _, r := range reqs {
		if strings.HasPrefix(r.method, "tasks/") {
			t.Errorf("upstream received %s", r.method)
		}
	}
}

// Issue 3 item 11, E-46, Q-23: over the tool's maxConcurrent or the
// owner's limit a task call gets a synchronous error and no task exists.
func TestLimits(t *testing.T) {
	t.Run("maxConcurrent", func(t *testing.T) {
		e := newTaskEnv(t, "rules:\n  - match: block\n    maxConcurrent: 2\n", Config{})
		e.createTask(alice, "block", `{}`, `{}`)
		e.createTask(alice, "block", `{}`, `{}`)
		wantRPCError(t, e.call(alice, 1, "tools/call", `{"name":"block","arguments":{},"task":{}}`), wire.CodeInternalError, "maxConcurrent")
		if ids := e.listIDs(alice); len(ids) != 2 {
			t.Errorf("tasks after the refusal = %d, want 2", len(ids))
		}
		e.up.releaseAll()
		for _, id := range e.listIDs(alice) {
			e.waitStatus(alice, id, "completed")
		}
		pollUntil(t, 5*time.Second, func() bool { return e.h.Running() == 0 }, "runners to end")
		e.createTask(alice, "block", `{}`, `{}`) // slots are free again
	})
	t.Run("per owner", func(t *testing.T) {
		e := newTaskEnv(t, "", Config{MaxTasksPerOwner: 3})
		for i := 0; i < 3; i++ {
			e.createTask(alice, "block", `{}`, `{}`)
		}
		wantRPCError(t, e.call(alice, 1, "tools/call", `{"name":"block","arguments":{},"task":{}}`), wire.CodeInternalError, "too many unfinished tasks")
		if ids := e.listIDs(alice); len(ids) != 3 {
			t.Errorf("alice's tasks after the refusal = %d, want 3", len(ids))
		}
		e.createTask(identity{"Authorization": "Bearer bob"}, "block", `{}`, `{}`) // others are not affected
	})
}

// listIDs lists the caller's task ids (first page).
func (e *taskEnv) listIDs(who identity) []string {
	e.t.Helper()
	r := e.call(who, "ids", "tasks/list", "")
	var page struct {
		Tasks []wireTask `json:"tasks"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &page) != nil {
		e.t.Fatalf("tasks/list = %s", r.raw)
	}
	var ids []string
	for _, tk := range page.Tasks {
		ids = append(ids, tk.TaskID)
	}
	return ids
}

// E-14, T-19, T-20: many concurrent creations, all ids distinct. The 300
// creations (two store round trips each: the task and its session's
// record) queue on the in-process miniredis, slowed further by -race: the
// store timeout is raised so that the test measures ids, not speed.
func TestConcurrentCreationsUniqueIDs(t *testing.T) {
	e := newTaskEnv(t, "", Config{MaxTasksPerOwner: -1, StoreTimeout: 30 * time.Second})
	const n = 300
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = e.createTask(alice, "echo", fmt.Sprintf(`{"text":"t%d"}`, i), `{}`).TaskID
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, id := range ids {
		if seen[id] || !taskIDRe.MatchString(id) {
			t.Fatalf("task %d id %q duplicate or malformed", i, id)
		}
		seen[id] = true
	}
	// Each result is its own input.
	for i, id := range ids[:20] {
		e.waitStatus(alice, id, "completed")
		r := e.call(alice, i, "tasks/result", fmt.Sprintf(`{"taskId":%q}`, id))
		if !strings.Contains(string(r.Result), fmt.Sprintf(`"text":"t%d"`, i)) {
			t.Errorf("task %d result = %s", i, r.raw)
		}
	}
}

// Issue 3 item 3: the policy timeout fails the task and cancels upstream.
func TestPolicyTimeout(t *testing.T) {
	e := newTaskEnv(t, `
defaults:
  timeout: 200ms
`, Config{})
	task := e.createTask(alice, "block", `{}`, `{}`)
	got := e.waitStatus(alice, task.TaskID, "failed")
	if !strings.Contains(got.StatusMessage, "policy timeout of 200ms") {
		t.Errorf("statusMessage = %q", got.StatusMessage)
	}
	wantRPCError(t, e.call(alice, 1, "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID)), wire.CodeInternalError, "timeout")
	pollUntil(t, 5*time.Second, func() bool { _, c, _ := e.up.snapshot(); return len(c) == 1 }, "the upstream cancel")
}

// A running task has a lease: a task whose runner vanished is failed by lease
// recovery with a clear statusMessage.
func TestLeaseRecovery(t *testing.T) {
	e := newTaskEnv(t, "", Config{Lease: 100 * time.Millisecond})
	owner, _ := e.h.id.owner(headerOf(alice))
	now := time.Now().UTC().Truncate(time.Millisecond)
	id, _ := taskstore.NewID()
	if err := e.store.Create(context.Background(), &taskstore.Task{
		ID: id, Owner: owner, Status: taskstore.Working, CreatedAt: now, UpdatedAt: now,
		TTL: time.Hour, Tool: "echo", UpstreamID: `"x"`, Runner: "dead-process",
	}, taskstore.CreateOptions{Lease: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	got := e.waitStatus(alice, id, "failed")
	if !strings.Contains(got.StatusMessage, "lease expired") {
		t.Errorf("statusMessage = %q", got.StatusMessage)
	}
}

func headerOf(who identity) *fasthttp.RequestHeader {
	var h fasthttp.RequestHeader
	for k, v := range who {
		h.Set(k, v)
	}
	return &h
}

// Graceful shutdown: a call still running when the grace period ends is
// cancelled upstream and its task failed with a clear message.
func TestShutdownFailsRunningTasks(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "block", `{}`, `{}`)
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := e.h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	owner, _ := e.h.id.owner(headerOf(alice))
	got, err := e.store.Get(context.Background(), owner, task.TaskID)
	if err != nil || got.Status != taskstore.Failed || !strings.Contains(got.StatusMessage, "shut down") {
		t.Errorf("after shutdown: %+v, %v; want failed with a shutdown message", got, err)
	}
	if _, c, _ := e.up.snapshot(); len(c) != 1 {
		t.Errorf("upstream cancels = %v, want 1", c)
	}
	r := e.call(alice, 1, "tools/call", `{"name":"echo","arguments":{},"task":{}}`)
	wantRPCError(t, r, wire.CodeInternalError, "shutting down")
}

// E-25: a cut tasks/result SSE stream resumes with GET + Last-Event-ID and
// the result comes with the original request id.
func TestResumeResultStream(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "block", `{}`, `{}`)
	// The event id of a tasks/result stream: taskgate's prefix, the task
	// id, the JSON-RPC request id in base64url.
	evID := "tg1." + task.TaskID + "." + base64.RawURLEncoding.EncodeToString([]byte(`"orig-7"`))
	e.up.releaseAll()
	e.waitStatus(alice, task.TaskID, "completed")

	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://taskgate/mcp")
	req.Header.SetMethod("GET")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", evID)
	for k, v := range alice {
		req.Header.Set(k, v)
	}
	if err := e.c.DoTimeout(req, resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	body := string(resp.Body())
	if !strings.Contains(body, `"id":"orig-7"`) || !strings.Contains(body, "released") {
		t.Errorf("resumed stream = %q, want the result under the original id", body)
	}
	// Another owner cannot resume it.
	req.Header.Set("Authorization", "Bearer bob")
	if err := e.c.DoTimeout(req, resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusNotFound {
		t.Errorf("foreign resume: HTTP %d, want 404", resp.StatusCode())
	}
	// A GET with another Last-Event-ID passes through to the upstream.
	req.Header.Set("Last-Event-ID", "e7")
	if err := e.c.DoTimeout(req, resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusMethodNotAllowed {
		t.Errorf("upstream GET: HTTP %d, want the upstream's 405", resp.StatusCode())
	}
}

// E-45, P-07, T-61: a client request with an id in taskgate's upstream
// namespace is still served, and notifications/cancelled aimed at that
// namespace never reach the upstream.
func TestReservedUpstreamIDs(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "block", `{}`, `{}`)
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
	upID := e.up.callID("block")
	r := e.send(alice, `{"jsonrpc":"2.0","id":"taskgate-`+task.TaskID+`","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`, "")
	if r.Error != nil || !strings.Contains(string(r.Result), `"text":"x"`) {
		t.Errorf("client call with a taskgate-looking id = %s, want the echo", r.raw)
	}
	r = e.send(alice, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+upID+`}}`, "")
	if r.httpStatus != fasthttp.StatusAccepted {
		t.Errorf("notifications/cancelled for a taskgate id: HTTP %d, want 202", r.httpStatus)
	}
	if _, cancelled, _ := e.up.snapshot(); len(cancelled) != 0 {
		t.Errorf("upstream received cancels %v, want none", cancelled)
	}
	e.up.releaseAll()
	e.waitStatus(alice, task.TaskID, "completed")
}

// T-77, E-42: task operations are rate limited per owner; lookups of
// unknown tasks cost more; other owners are not affected.
func TestRateLimit(t *testing.T) {
	e := newTaskEnv(t, "", Config{TaskRate: 1, TaskBurst: 10})
	task := e.createTask(alice, "echo", `{"text":"x"}`, `{}`) // 1 token
	for i := 0; i < 9; i++ {
		if _, r := e.get(alice, task.TaskID); r.Error != nil {
			t.Fatalf("get %d within the burst: %s", i, r.raw)
		}
	}
	_, r := e.get(alice, task.TaskID)
	wantRPCError(t, r, wire.CodeInternalError, "too many task operations")
	bob := identity{"Authorization": "Bearer bob"}
	_, r = e.get(bob, "0123456789abcdef0123456789abcdef") // a miss: costs 5
	wantRPCError(t, r, wire.CodeInvalidParams, "not found")
	for i := 0; i < 5; i++ {
		_, r = e.get(bob, task.TaskID)
	}
	wantRPCError(t, r, wire.CodeInternalError, "too many task operations") // 5 + 5 > 10
}

// Background calls reuse upstream connections (a new TCP connection per
// task costs a dial and leaves TIME_WAIT sockets), for JSON and SSE
// answers alike; an aborted call's connection is not reused.
func TestBackgroundConnectionsReused(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	for i, tool := range []string{"echo", "progress", "echo", "progress", "echo", "progress"} {
		task := e.createTask(alice, tool, fmt.Sprintf(`{"text":"%d"}`, i), `{}`)
		e.waitStatus(alice, task.TaskID, "completed")
	}
	// The first task dials; the pings answered during "progress" and the
	// client-side requests of this test go through other pools.
	if _, n := e.h.idleConns(); n != 1 {
		t.Errorf("idle background connections = %d, want 1 (reused by each task)", n)
	}
	task := e.createTask(alice, "block", `{}`, `{}`)
	pollUntil(t, 5*time.Second, func() bool { _, n := e.h.idleConns(); return n == 0 }, "the block call to take the pooled connection")
	e.call(alice, 1, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
	pollUntil(t, 5*time.Second, func() bool { return e.h.Running() == 0 }, "the runner to end")
	if _, n := e.h.idleConns(); n != 0 {
		t.Errorf("idle background connections after an aborted call = %d, want 0", n)
	}
}

// An operator's cancel (CancelTask) on another replica than the one
// running the call does what the owner's tasks/cancel does: the task is
// cancelled with the operator's message, which the owner then reads, and
// the runner aborts the upstream call. The task records its wire era.
func TestCancelTaskOnAnotherReplica(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	other := e.replica(Config{})
	task := e.createTask(alice, "block", `{}`, `{}`)
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
	owner, _ := e.h.id.owner(headerOf(alice))
	ctx := context.Background()
	if st, err := e.store.Get(ctx, owner, task.TaskID); err != nil || st.Era != "2025-11-25" {
		t.Errorf("stored task = %+v, %v; want era 2025-11-25", st, err)
	}
	got, err := other.h.CancelTask(ctx, owner, task.TaskID, "cancelled by an operator")
	if err != nil || got.Status != taskstore.Cancelled {
		t.Fatalf("CancelTask = %+v, %v", got, err)
	}
	pollUntil(t, 5*time.Second, func() bool { _, c, _ := e.up.snapshot(); return len(c) == 1 }, "the upstream cancel from the running replica")
	if w, _ := e.get(alice, task.TaskID); w.Status != "cancelled" || w.StatusMessage != "cancelled by an operator" {
		t.Errorf("the owner's tasks/get = %s %q, want cancelled by an operator", w.Status, w.StatusMessage)
	}
	if _, err := other.h.CancelTask(ctx, owner, task.TaskID, "again"); !errors.Is(err, taskstore.ErrTerminal) {
		t.Errorf("second CancelTask: %v, want ErrTerminal", err)
	}
}
