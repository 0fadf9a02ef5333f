package e2e

// The MCP 2026-07-28 wire (tasks as the extension io.modelcontextprotocol/tasks)
// through the built taskgate binary, raw HTTP, in front of a real upstream of
// each era: legacy-mcp --fixtures (2025-11-25, sessions) and legacy-mcp
// --fixtures --stateless --max-protocol-version 2026-07-28 (the go-sdk's
// 2026 wire, no tasks). The M- IDs are defined in package proxy's glossary
// (proxy/doc.go).

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

const (
	modernVersion  = "2026-07-28"
	extTasks       = "io.modelcontextprotocol/tasks"
	metaVersionKey = "io.modelcontextprotocol/protocolVersion"
	metaCapsKey    = "io.modelcontextprotocol/clientCapabilities"
)

// conformancePolicy is the fixtures' policy (e2e/testdata).
func conformancePolicy(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "conformance-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// upstreamEras are the two real upstreams the 2026 wire is shown against.
var upstreamEras = []struct {
	name string
	args []string
}{
	{"upstream2025", []string{"--fixtures"}},
	{"upstream2026", []string{"--fixtures", "--stateless", "--max-protocol-version", modernVersion}},
}

// modernClient speaks the 2026 wire by hand: no session, the protocol
// version and client capabilities in every request's _meta and header.
type modernClient struct {
	*rawClient
	caps map[string]any // client capabilities declared on every request
}

func newModernClient(t testing.TB, endpoint string, caps map[string]any) *modernClient {
	return &modernClient{rawClient: newRawClient(t, endpoint), caps: caps}
}

// withTasks are capabilities declaring the extension (and elicitation).
func withTasks() map[string]any {
	return map[string]any{"elicitation": map[string]any{}, "extensions": map[string]any{extTasks: map[string]any{}}}
}

// send POSTs method with params (plus the 2026 _meta) and the headers of
// the 2026 wire; name is the Mcp-Name header ("" = none). hdr overrides
// headers (an empty value deletes one).
func (c *modernClient) send(method string, params map[string]any, name string, hdr map[string]string) (reply, json.RawMessage) {
	c.t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	if _, ok := meta[metaVersionKey]; !ok {
		meta[metaVersionKey] = modernVersion
	}
	if _, ok := meta[metaCapsKey]; !ok && c.caps != nil {
		meta[metaCapsKey] = c.caps
	}
	params["_meta"] = meta
	body, id := c.marshalRequest(method, params)
	req := c.request(c.t.Context(), http.MethodPost, body)
	req.Header.Set("MCP-Protocol-Version", modernVersion)
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return c.do(req), id
}

// ok sends a request that must succeed (HTTP 200, a result) and decodes it.
func (c *modernClient) ok(method string, params map[string]any, name string, out any) json.RawMessage {
	c.t.Helper()
	r, id := c.send(method, params, name, nil)
	if r.Status != http.StatusOK || r.Msg == nil || r.Msg.Error != nil || !bytes.Equal(r.Msg.ID, id) {
		c.t.Fatalf("%s: HTTP %d, body %s", method, r.Status, r.Body)
	}
	if out != nil {
		if err := json.Unmarshal(r.Msg.Result, out); err != nil {
			c.t.Fatalf("%s: decoding %s: %v", method, r.Msg.Result, err)
		}
	}
	return r.Msg.Result
}

// fails sends a request that must fail with HTTP status and JSON-RPC code.
func (c *modernClient) fails(method string, params map[string]any, name string, hdr map[string]string, status, code int) *rpcError {
	c.t.Helper()
	r, _ := c.send(method, params, name, hdr)
	if r.Status != status || r.Msg == nil || r.Msg.Error == nil || r.Msg.Error.Code != code {
		c.t.Fatalf("%s: got HTTP %d body %s, want HTTP %d and error %d", method, r.Status, r.Body, status, code)
	}
	return r.Msg.Error
}

// detailedTask is a 2026 tasks/get result or CreateTaskResult.
type detailedTask struct {
	ResultType     string                     `json:"resultType"`
	TaskID         string                     `json:"taskId"`
	Status         string                     `json:"status"`
	StatusMessage  string                     `json:"statusMessage"`
	TTLMs          *int64                     `json:"ttlMs"`
	PollIntervalMs *int64                     `json:"pollIntervalMs"`
	Result         *toolResult                `json:"result"`
	Error          *rpcError                  `json:"error"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests"`
	RequestState   *string                    `json:"requestState"`
	Task           json.RawMessage            `json:"task"`
}

func (c *modernClient) call(tool string, args map[string]any) detailedTask {
	c.t.Helper()
	var d detailedTask
	c.ok("tools/call", map[string]any{"name": tool, "arguments": args}, tool, &d)
	return d
}

func (c *modernClient) get(id string) detailedTask {
	c.t.Helper()
	var d detailedTask
	c.ok("tasks/get", map[string]any{"taskId": id}, id, &d)
	return d
}

// waitModern polls tasks/get until cond holds.
func (c *modernClient) waitModern(id, what string, cond func(detailedTask) bool) detailedTask {
	c.t.Helper()
	var last detailedTask
	waitFor(c.t, 15*time.Second, "task "+id+" "+what, func() bool {
		last = c.get(id)
		return cond(last)
	})
	return last
}

func statusIs(s string) func(detailedTask) bool {
	return func(d detailedTask) bool { return d.Status == s }
}

// TestModernEraPerRequest: the era classifier's errors carry the HTTP status
// and the data their schema requires (M-02, M-29), and a 2025 session on the
// same taskgate keeps working.
func TestModernEraPerRequest(t *testing.T) {
	up := startLegacy(t, "--fixtures")
	gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
	c := newModernClient(t, gw.URL, withTasks())

	// Header 2025-11-25 with a 2026 _meta: -32020.
	c.fails("tools/call", map[string]any{"name": "greet"}, "greet", map[string]string{"MCP-Protocol-Version": "2025-11-25"}, 400, -32020)
	// An unknown version: -32022 with data.supported listing both eras.
	e := c.fails("tools/call", map[string]any{"name": "greet", "_meta": map[string]any{metaVersionKey: "2099-01-01"}}, "greet",
		map[string]string{"MCP-Protocol-Version": "2099-01-01"}, 400, -32022)
	var data struct {
		Supported []string `json:"supported"`
		Requested string   `json:"requested"`
	}
	if err := json.Unmarshal(e.Data, &data); err != nil || !strings.Contains(strings.Join(data.Supported, ","), modernVersion) ||
		!strings.Contains(strings.Join(data.Supported, ","), "2025-11-25") || data.Requested != "2099-01-01" {
		t.Errorf("-32022 data = %s, want supported with both eras and requested", e.Data)
	}
	// No client capabilities: -32602.
	bare := newModernClient(t, gw.URL, nil)
	bare.fails("tools/call", map[string]any{"name": "greet"}, "greet", nil, 400, -32602)
	// Mcp-Method disagreeing with the body: -32020.
	c.fails("tools/call", map[string]any{"name": "greet"}, "greet", map[string]string{"Mcp-Method": "tools/list"}, 400, -32020)
	// Mcp-Name disagreeing with params.name: -32020.
	c.fails("tools/call", map[string]any{"name": "greet"}, "other", nil, 400, -32020)

	// A 2025 session on the same taskgate: initialize, tasks capability, a task.
	legacyC := newRawClient(t, gw.URL)
	if res := legacyC.initialize(); res.Capabilities["tasks"] == nil {
		t.Errorf("2025 initialize capabilities = %v, want tasks", res.Capabilities)
	}
	tk := legacyC.createTask("slow_compute", map[string]any{"seconds": 0}, nil)
	legacyC.waitStatus(tk.TaskID, "completed", 10*time.Second)
}

// TestModernDiscover: server/discover offers the extension (a server must
// advertise it there to offer tasks) and never the legacy capabilities.tasks
// (a server must not advertise both), for both upstream eras.
func TestModernDiscover(t *testing.T) {
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, era.args...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
			c := newModernClient(t, gw.URL, map[string]any{})
			var res struct {
				ResultType   string `json:"resultType"`
				Capabilities struct {
					Tools      json.RawMessage            `json:"tools"`
					Tasks      json.RawMessage            `json:"tasks"`
					Extensions map[string]json.RawMessage `json:"extensions"`
				} `json:"capabilities"`
				SupportedVersions []string `json:"supportedVersions"`
			}
			c.ok("server/discover", nil, "", &res)
			if string(res.Capabilities.Extensions[extTasks]) != "{}" || res.Capabilities.Tasks != nil ||
				res.Capabilities.Tools == nil || res.ResultType != "complete" || !strings.Contains(strings.Join(res.SupportedVersions, ","), modernVersion) {
				t.Errorf("server/discover = %+v, want the extension, tools, no tasks, resultType complete, %s supported", res, modernVersion)
			}
		})
	}
}

// TestModernTasks: tasks on the 2026 wire in front of both upstream eras.
func TestModernTasks(t *testing.T) {
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, era.args...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
			c := newModernClient(t, gw.URL, withTasks())
			plain := newModernClient(t, gw.URL, map[string]any{})
			stats := newStatsReader(t, up.URL)

			// M-04: a required tool without the extension: -32021 with
			// data, and the upstream is not called.
			e := plain.fails("tools/call", map[string]any{"name": "failing_job", "arguments": map[string]any{}}, "failing_job", nil, 400, -32021)
			if !strings.Contains(string(e.Data), `"requiredCapabilities":{"extensions":{"`+extTasks+`":{}}}`) {
				t.Errorf("-32021 data = %s, want requiredCapabilities with the extension", e.Data)
			}
			if n := stats.get().Calls["failing_job"]; n != 0 {
				t.Errorf("upstream ran failing_job %d times after a refused call, want 0", n)
			}

			// M-05: a legacy params.task neither errs nor promotes a
			// forbidden tool.
			var greet toolResult
			c.ok("tools/call", map[string]any{"name": "greet", "arguments": map[string]any{"name": "Ada"},
				"task": map[string]any{"ttl": 60000}}, "greet", &greet)
			if greet.text() != "Hello, Ada!" {
				t.Errorf("greet with params.task = %+v, want the plain result", greet)
			}

			// A flat CreateTaskResult (no task wrapper, no ttl or
			// pollInterval), sent only once tasks/get resolves its id.
			tk := c.call("slow_compute", map[string]any{"seconds": 1.5})
			if tk.ResultType != "task" || tk.TaskID == "" || tk.Status != "working" || tk.TTLMs == nil || *tk.TTLMs <= 0 ||
				tk.PollIntervalMs == nil || *tk.PollIntervalMs <= 0 || tk.Task != nil || tk.RequestState != nil {
				t.Fatalf("CreateTaskResult = %+v, want flat, resultType task, working, ttlMs and pollIntervalMs > 0", tk)
			}
			if d := c.get(tk.TaskID); d.ResultType != "complete" || d.TaskID != tk.TaskID {
				t.Errorf("tasks/get right after create = %+v", d)
			}
			done := c.waitModern(tk.TaskID, "completed", statusIs("completed"))
			if done.Result == nil || !strings.Contains(done.Result.text(), "computed for 1.5 seconds") || done.Result.Meta["io.modelcontextprotocol/related-task"] != nil {
				t.Errorf("completed task = %+v, want the result inline without related-task _meta", done)
			}

			// M-10: isError is completed on this wire (failed is only
			// for JSON-RPC errors).
			fj := c.call("failing_job", map[string]any{})
			d := c.waitModern(fj.TaskID, "terminal", func(d detailedTask) bool { return d.Status != "working" })
			if d.Status != "completed" || d.Result == nil || !d.Result.IsError {
				t.Errorf("failing_job = %+v, want completed with result.isError", d)
			}
			// M-11: a JSON-RPC error is failed, verbatim.
			pj := c.call("protocol_error_job", map[string]any{})
			d = c.waitModern(pj.TaskID, "terminal", func(d detailedTask) bool { return d.Status != "working" })
			if d.Status != "failed" || d.Error == nil || d.Error.Code != -32603 || !strings.Contains(string(d.Error.Data), "protocol_error_job") || d.Result != nil {
				t.Errorf("protocol_error_job = %+v, want failed with the upstream's error and data", d)
			}

			// M-18, M-19: cancel acks, also for a terminal task.
			long := c.call("slow_compute", map[string]any{"seconds": 60})
			var ack map[string]any
			c.ok("tasks/cancel", map[string]any{"taskId": long.TaskID}, long.TaskID, &ack)
			if len(ack) != 1 || ack["resultType"] != "complete" {
				t.Errorf("tasks/cancel = %v, want the empty ack", ack)
			}
			c.waitModern(long.TaskID, "cancelled", statusIs("cancelled"))
			c.ok("tasks/cancel", map[string]any{"taskId": tk.TaskID}, tk.TaskID, &ack)
			if got := c.get(tk.TaskID); got.Status != "completed" {
				t.Errorf("a cancel of a completed task changed it to %q", got.Status)
			}
			if era.name == "upstream2025" {
				// A 2025 upstream gets notifications/cancelled. A 2026
				// upstream learns it from the closed request stream, which
				// the go-sdk v1.8.0 stateless server does not pass on to
				// the tool handler, so its counter cannot show it.
				waitFor(t, 10*time.Second, "the upstream to see the cancel", func() bool { return stats.get().Cancelled >= 1 })
			}

			// M-07: capability check before lookup; unknown id -32602.
			plain.fails("tasks/get", map[string]any{"taskId": "0123"}, "0123", nil, 400, -32021)
			c.fails("tasks/get", map[string]any{"taskId": "00112233445566778899aabbccddeeff"}, "00112233445566778899aabbccddeeff", nil, 200, -32602)
			// M-08: Mcp-Name must equal taskId.
			c.fails("tasks/get", map[string]any{"taskId": tk.TaskID}, "not-"+tk.TaskID, nil, 400, -32020)
			// M-09: no tasks/result, tasks/list on this wire.
			c.fails("tasks/result", map[string]any{"taskId": tk.TaskID}, "", nil, 404, -32601)
			c.fails("tasks/list", nil, "", nil, 404, -32601)
			// M-23: another owner's task is not found.
			other := newModernClient(t, gw.URL, withTasks())
			other.header.Set("Authorization", "Bearer someone-else")
			other.fails("tasks/get", map[string]any{"taskId": tk.TaskID}, tk.TaskID, nil, 200, -32602)
		})
	}
}

// elicitationKeys maps each property the task's open elicitation requests
// ask for to the key of its request; who names the view in failures.
func elicitationKeys(t *testing.T, who string, d detailedTask) map[string]string {
	t.Helper()
	keys := map[string]string{} // property -> key
	for k, raw := range d.InputRequests {
		var q struct {
			Method string `json:"method"`
			Params struct {
				RequestedSchema struct {
					Properties map[string]any `json:"properties"`
				} `json:"requestedSchema"`
			} `json:"params"`
		}
		if err := json.Unmarshal(raw, &q); err != nil || q.Method != "elicitation/create" {
			t.Fatalf("%sinputRequests[%s] = %s", who, k, raw)
		}
		for p := range q.Params.RequestedSchema.Properties {
			keys[p] = k
		}
	}
	return keys
}

// TestModernInput: questions inside a task (M-13..M-16) and before it
// (M-27), for both upstream eras.
func TestModernInput(t *testing.T) {
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, era.args...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
			c := newModernClient(t, gw.URL, withTasks())

			tk := c.call("multi_input", map[string]any{})
			if tk.ResultType != "task" {
				t.Fatalf("multi_input = %+v, want a task", tk)
			}
			d := c.waitModern(tk.TaskID, "to ask twice", func(d detailedTask) bool { return len(d.InputRequests) == 2 })
			if d.Status != "input_required" {
				t.Fatalf("task with two questions is %q", d.Status)
			}
			keys := elicitationKeys(t, "", d)
			accept := func(content map[string]any) map[string]any {
				return map[string]any{"action": "accept", "content": content}
			}
			// A partial answer removes its key at once, visible to the very
			// next tasks/get (update and read are atomic); unknown keys are
			// ignored (M-15).
			c.ok("tasks/update", map[string]any{"taskId": tk.TaskID, "inputResponses": map[string]any{
				keys["name"]: accept(map[string]any{"name": "Ada"}), "unknown-key": accept(nil)}}, tk.TaskID, nil)
			d = c.get(tk.TaskID)
			if _, still := d.InputRequests[keys["name"]]; still || d.Status != "input_required" || len(d.InputRequests) != 1 {
				t.Fatalf("after a partial update: %+v, want input_required with only the other key", d)
			}
			c.ok("tasks/update", map[string]any{"taskId": tk.TaskID, "inputResponses": map[string]any{
				keys["confirm"]: accept(map[string]any{"confirm": true})}}, tk.TaskID, nil)
			d = c.waitModern(tk.TaskID, "completed", statusIs("completed"))
			if d.Result == nil || d.Result.text() != "name=Ada confirm=true" {
				t.Errorf("multi_input result = %+v", d.Result)
			}
			// Keys are unique for the task's life, never reused (M-16).
			tk2 := c.call("confirm_delete", map[string]any{"filename": "x.txt"})
			d = c.waitModern(tk2.TaskID, "to ask", func(d detailedTask) bool { return len(d.InputRequests) == 1 })
			for k := range d.InputRequests {
				c.ok("tasks/update", map[string]any{"taskId": tk2.TaskID, "inputResponses": map[string]any{k: accept(map[string]any{"confirm": false})}}, tk2.TaskID, nil)
			}
			if d = c.waitModern(tk2.TaskID, "completed", statusIs("completed")); d.Result.text() != "kept x.txt" {
				t.Errorf("confirm_delete result = %+v", d.Result)
			}

			// M-27: a question before the task: InputRequiredResult with a
			// signed requestState, then the task on the retry.
			var round1 detailedTask
			c.ok("tools/call", map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{}}, "test_tool_with_task", &round1)
			if round1.ResultType != "input_required" || round1.TaskID != "" || len(round1.InputRequests) != 1 || round1.RequestState == nil {
				t.Fatalf("round 1 = %+v, want an InputRequiredResult without taskId, with requestState", round1)
			}
			var key string
			for k := range round1.InputRequests {
				key = k
			}
			retry := func(state string) (reply, json.RawMessage) {
				return c.send("tools/call", map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{},
					"inputResponses": map[string]any{key: accept(map[string]any{"name": "Alice"})}, "requestState": state}, "test_tool_with_task", nil)
			}
			// A tampered state is refused.
			if r, _ := retry(*round1.RequestState + "x"); r.Msg == nil || r.Msg.Error == nil || r.Msg.Error.Code != -32602 {
				t.Errorf("tampered requestState: %s, want -32602", r.Body)
			}
			// Another owner cannot use it.
			other := newModernClient(t, gw.URL, withTasks())
			other.header.Set("Authorization", "Bearer mallory")
			r, _ := other.send("tools/call", map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{},
				"inputResponses": map[string]any{key: accept(map[string]any{"name": "Mallory"})}, "requestState": *round1.RequestState}, "test_tool_with_task", nil)
			if r.Msg == nil || r.Msg.Error == nil || r.Msg.Error.Code != -32602 {
				t.Errorf("foreign requestState: %s, want -32602", r.Body)
			}
			r, _ = retry(*round1.RequestState)
			var round2 detailedTask
			if r.Msg == nil || r.Msg.Error != nil || json.Unmarshal(r.Msg.Result, &round2) != nil || round2.ResultType != "task" || round2.RequestState != nil {
				t.Fatalf("round 2 = %s, want a CreateTaskResult without requestState", r.Body)
			}
			if d = c.waitModern(round2.TaskID, "completed", statusIs("completed")); !strings.Contains(d.Result.text(), "Alice") {
				t.Errorf("test_tool_with_task result = %+v, want the name", d.Result)
			}
		})
	}
}

// TestModernAndLegacyShareTasks: a 2025 session and a 2026 client of the
// same owner on one taskgate see each other's tasks, each in its own era's
// rendering (M-22): isError reads failed in 2025 and completed in 2026, and
// 2025 tasks/list includes the task created on the 2026 wire.
func TestModernAndLegacyShareTasks(t *testing.T) {
	up := startLegacy(t, "--fixtures")
	gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
	const auth = "Bearer shared-owner"
	modern := newModernClient(t, gw.URL, withTasks())
	modern.header.Set("Authorization", auth)
	legacyC := newRawClient(t, gw.URL)
	legacyC.header.Set("Authorization", auth)
	legacyC.initialize()

	fj := modern.call("failing_job", map[string]any{})
	if d := modern.waitModern(fj.TaskID, "completed", statusIs("completed")); d.Result == nil || !d.Result.IsError {
		t.Fatalf("2026 view of failing_job = %+v", d)
	}
	if lt := legacyC.getTask(fj.TaskID); lt.Status != "failed" {
		t.Errorf("2025 view of the 2026-created failing_job = %q, want failed", lt.Status)
	}
	found := false
	for _, lt := range legacyC.listTasks().Tasks {
		found = found || lt.TaskID == fj.TaskID
	}
	if !found {
		t.Errorf("2025 tasks/list does not list the task created on the 2026 wire")
	}
	var res toolResult
	legacyC.result("tasks/result", map[string]any{"taskId": fj.TaskID}, &res)
	if !res.IsError {
		t.Errorf("2025 tasks/result of the 2026-created task = %+v, want the isError result", res)
	}

	lt := legacyC.createTask("slow_compute", map[string]any{"seconds": 0.2}, nil)
	legacyC.waitStatus(lt.TaskID, "completed", 10*time.Second)
	if d := modern.get(lt.TaskID); d.Status != "completed" || d.Result == nil || !strings.Contains(d.Result.text(), "computed") {
		t.Errorf("2026 view of the 2025-created task = %+v", d)
	}
	// Each era's rules for cancelling a terminal task.
	if e := legacyC.rpcErr("tasks/cancel", map[string]any{"taskId": lt.TaskID}); e.Code != -32602 {
		t.Errorf("2025 cancel of a terminal task: %d, want -32602", e.Code)
	}
	modern.ok("tasks/cancel", map[string]any{"taskId": lt.TaskID}, lt.TaskID, nil)
}

// TestModernTwoReplicas: a task created through one replica is read,
// answered and cancelled through another on the 2026 wire (M-06).
func TestModernTwoReplicas(t *testing.T) {
	up := startLegacy(t, "--fixtures")
	redisURL := "redis://" + redistest.Start(t)
	key := "0123456789abcdef0123456789abcdef"
	a := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key, "--config", conformancePolicy(t))
	b := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key, "--config", conformancePolicy(t))
	ca := newModernClient(t, a.URL, withTasks())
	cb := newModernClient(t, b.URL, withTasks())

	tk := ca.call("slow_compute", map[string]any{"seconds": 60})
	if d := cb.get(tk.TaskID); d.Status != "working" {
		t.Fatalf("tasks/get on B right after create on A = %+v", d)
	}
	cb.ok("tasks/cancel", map[string]any{"taskId": tk.TaskID}, tk.TaskID, nil)
	ca.waitModern(tk.TaskID, "cancelled on A", statusIs("cancelled"))

	// An answer given through B reaches the call running on A.
	q := ca.call("confirm_delete", map[string]any{"filename": "r.txt"})
	d := ca.waitModern(q.TaskID, "to ask", func(d detailedTask) bool { return len(d.InputRequests) == 1 })
	if got := cb.get(q.TaskID); got.Status != "input_required" {
		t.Errorf("B's view of the waiting task = %q, want input_required", got.Status)
	}
	for k := range d.InputRequests {
		cb.ok("tasks/update", map[string]any{"taskId": q.TaskID, "inputResponses": map[string]any{
			k: map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}}, q.TaskID, nil)
	}
	if d = cb.waitModern(q.TaskID, "completed via B", statusIs("completed")); d.Result.text() != "deleted r.txt" {
		t.Errorf("confirm_delete answered through B = %+v", d.Result)
	}
}

var conformanceLine = regexp.MustCompile(`^(\S+) (\S+): (\d+) passed, (\d+) failed`)

// conformanceScript returns the absolute path of the run.sh of the pinned
// conformance suite in testdata/dir. It skips the test in -short mode and
// when node, npm or a POSIX shell is missing (CI installs them).
func conformanceScript(t *testing.T, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("conformance suite skipped in -short mode")
	}
	for _, bin := range []string{"node", "npm", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not on PATH: the conformance suite needs node and npm", bin)
		}
	}
	if runtime.GOOS == "windows" {
		t.Skip("run.sh needs a POSIX shell")
	}
	script, err := filepath.Abs(filepath.Join("testdata", dir, "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	return script
}

// TestConformance runs the official conformance suite's ten tasks
// scenarios (e2e/testdata/conformance/run.sh) against taskgate in front of
// each upstream era and fails on any failed check. It needs node and npm
// (the suite is installed with npm ci from the pinned lock file).
func TestConformance(t *testing.T) {
	script := conformanceScript(t, "conformance")
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, era.args...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t), "--log-level", "warn")
			cmd := exec.Command(script, gw.URL, era.name)
			cmd.Env = append(os.Environ(), "NO_COLOR=1")
			out, err := cmd.CombinedOutput()
			passed, failed := 0, 0
			for _, line := range strings.Split(string(out), "\n") {
				if m := conformanceLine.FindStringSubmatch(line); m != nil && m[2] == "total" {
					passed, _ = strconv.Atoi(m[3])
					failed, _ = strconv.Atoi(m[4])
				}
			}
			t.Logf("conformance (%s):\n%s", era.name, out)
			if err != nil || failed > 0 || passed == 0 {
				t.Errorf("conformance in front of %s: %d passed, %d failed (run.sh: %v)", era.name, passed, failed, err)
			}
		})
	}
}

// TestModernPlainCallAsks: a plain 2026 call (no tasks extension) whose 2025
// upstream asks the user mid-call gets an InputRequiredResult with a signed
// requestState; the retry with the answer gets the call's plain result
// (the upstream's question bridged to the 2026 wire).
func TestModernPlainCallAsks(t *testing.T) {
	up := startLegacy(t, "--fixtures")
	gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
	c := newModernClient(t, gw.URL, map[string]any{"elicitation": map[string]any{}})
	var round1 detailedTask
	c.ok("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{"question": "Which answer?"}}, "ask", &round1)
	if round1.ResultType != "input_required" || len(round1.InputRequests) != 1 || round1.RequestState == nil || round1.TaskID != "" {
		t.Fatalf("round 1 = %+v, want an InputRequiredResult with one question and a requestState", round1)
	}
	var key string
	for k := range round1.InputRequests {
		key = k
	}
	var res struct {
		ResultType string `json:"resultType"`
		toolResult
	}
	c.ok("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{"question": "Which answer?"},
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"answer": "42"}}},
		"requestState":   *round1.RequestState}, "ask", &res)
	if res.ResultType != "complete" || res.text() != "you said: 42" {
		t.Errorf("round 2 = %+v, want the plain result", res)
	}
	// A client that cannot answer (no elicitation declared) runs in an
	// upstream session that does not declare elicitation either, and gets
	// what the server gives such a client directly: this server answers
	// with an error result instead of asking. (A server that asks anyway
	// gets -32021 naming elicitation, M-31: proxy's
	// TestModernUndeclaredInput.)
	bare := newModernClient(t, gw.URL, map[string]any{})
	var plain toolResult
	bare.ok("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{"question": "?"}}, "ask", &plain)
	if !plain.IsError || !strings.Contains(plain.text(), "does not support elicitation") {
		t.Errorf("ask without elicitation = %+v, want the server's own answer to a client without elicitation", plain)
	}
}

// TestModernInputAcrossReplicas: the open questions of a task running on
// replica A are shown by replica B's tasks/get and answered through B's
// tasks/update; an answered question is gone on both replicas right after
// the update, and the result reads the same through either (issue 13:
// inputRequests readable from any replica, for both upstream eras).
func TestModernInputAcrossReplicas(t *testing.T) {
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, era.args...)
			redisURL := "redis://" + redistest.Start(t)
			key := "0123456789abcdef0123456789abcdef"
			a := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key, "--config", conformancePolicy(t))
			b := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key, "--config", conformancePolicy(t))
			ca := newModernClient(t, a.URL, withTasks())
			cb := newModernClient(t, b.URL, withTasks())

			tk := ca.call("multi_input", map[string]any{})
			if tk.ResultType != "task" {
				t.Fatalf("multi_input through A = %+v, want a task", tk)
			}
			d := cb.waitModern(tk.TaskID, "B to show both questions", func(d detailedTask) bool { return len(d.InputRequests) == 2 })
			if d.Status != "input_required" {
				t.Fatalf("B's view of the task with two questions is %q", d.Status)
			}
			keys := elicitationKeys(t, "B's ", d)
			if keys["name"] == "" || keys["confirm"] == "" {
				t.Fatalf("questions through B = %v, want one for name and one for confirm", d.InputRequests)
			}
			if da := ca.get(tk.TaskID); len(da.InputRequests) != 2 || da.InputRequests[keys["name"]] == nil {
				t.Errorf("A's view = %+v, want the same two questions as B's", da)
			}
			accept := func(content map[string]any) map[string]any {
				return map[string]any{"action": "accept", "content": content}
			}
			// A partial answer through B: gone on both replicas at once.
			cb.ok("tasks/update", map[string]any{"taskId": tk.TaskID, "inputResponses": map[string]any{
				keys["name"]: accept(map[string]any{"name": "Ada"}), "unknown-key": accept(nil)}}, tk.TaskID, nil)
			for name, c := range map[string]*modernClient{"A": ca, "B": cb} {
				d := c.get(tk.TaskID)
				if _, still := d.InputRequests[keys["name"]]; still || d.Status != "input_required" || len(d.InputRequests) != 1 {
					t.Errorf("%s right after the partial update through B: %+v, want input_required with only the confirm question", name, d)
				}
			}
			// The same key answered again is ignored.
			cb.ok("tasks/update", map[string]any{"taskId": tk.TaskID, "inputResponses": map[string]any{
				keys["name"]: accept(map[string]any{"name": "Mallory"})}}, tk.TaskID, nil)
			cb.ok("tasks/update", map[string]any{"taskId": tk.TaskID, "inputResponses": map[string]any{
				keys["confirm"]: accept(map[string]any{"confirm": true})}}, tk.TaskID, nil)
			if d := cb.get(tk.TaskID); len(d.InputRequests) != 0 || d.Status == "input_required" {
				t.Errorf("B right after the last answer: %+v, want no questions and not input_required", d)
			}
			for name, c := range map[string]*modernClient{"A": ca, "B": cb} {
				d := c.waitModern(tk.TaskID, "completed via "+name, statusIs("completed"))
				if d.Result == nil || d.Result.text() != "name=Ada confirm=true" {
					t.Errorf("result read through %s = %+v, want the answers given through B", name, d.Result)
				}
			}
		})
	}
}

// TestModernCacheHints: in front of a 2025-era upstream that gives no
// cache hints (the reference "everything" server, stdio), the cacheable
// results of the 2026 wire carry ttlMs and cacheScope (SEP-2549: what the
// conformance suite's caching scenario checks).
func TestModernCacheHints(t *testing.T) {
	t.Parallel()
	bin := npmBin(t)
	gw := startStdioGateway(t, filepath.Join(bin, "mcp-server-everything")+" stdio")
	c := newModernClient(t, gw.URL, map[string]any{})
	type hinted struct {
		TTLMs      *int64 `json:"ttlMs"`
		CacheScope string `json:"cacheScope"`
		Resources  []struct {
			URI string `json:"uri"`
		} `json:"resources"`
	}
	check := func(method string, params map[string]any, name string) hinted {
		var r hinted
		c.ok(method, params, name, &r)
		if r.TTLMs == nil || *r.TTLMs < 0 || (r.CacheScope != "public" && r.CacheScope != "private") {
			t.Errorf("%s: ttlMs %v, cacheScope %q; want a ttlMs >= 0 and public or private", method, r.TTLMs, r.CacheScope)
		}
		return r
	}
	check("tools/list", nil, "")
	check("prompts/list", nil, "")
	check("resources/templates/list", nil, "")
	res := check("resources/list", nil, "")
	if len(res.Resources) == 0 {
		t.Fatalf("resources/list of the everything server lists no resources")
	}
	uri := res.Resources[0].URI
	check("resources/read", map[string]any{"uri": uri}, uri)
}

// TestModernPlainCallAcrossReplicas: a plain 2026 call (no tasks
// extension) to a 2025 upstream that asks two questions, answered one at a
// time with each retry sent to the other replica: every retry that leaves
// a question open, or meets a new one, gets an InputRequiredResult with
// it (from the store, wherever the call runs), and the last one gets the
// call's plain result.
func TestModernPlainCallAcrossReplicas(t *testing.T) {
	up := startLegacy(t, "--fixtures")
	redisURL := "redis://" + redistest.Start(t)
	key := "0123456789abcdef0123456789abcdef"
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("defaults:\n  taskSupport: optional\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key, "--config", policy)
	b := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key, "--config", policy)
	caps := map[string]any{"elicitation": map[string]any{}}
	clients := []*modernClient{newModernClient(t, a.URL, caps), newModernClient(t, b.URL, caps)}
	answers := map[string]map[string]any{ // requested property -> answer
		"name":    {"action": "accept", "content": map[string]any{"name": "Ada"}},
		"confirm": {"action": "accept", "content": map[string]any{"confirm": true}},
	}
	type round struct {
		ResultType    string                     `json:"resultType"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  *string                    `json:"requestState"`
		toolResult
	}
	var r round
	clients[0].ok("tools/call", map[string]any{"name": "multi_input", "arguments": map[string]any{}}, "multi_input", &r)
	answered := map[string]bool{}
	for i := 1; r.ResultType == "input_required"; i++ {
		if i > 4 || r.RequestState == nil || len(r.InputRequests) == 0 {
			t.Fatalf("round %d = %+v, want an InputRequiredResult with questions and a requestState", i, r)
		}
		// Answer one question (the first in key order), through the
		// other replica.
		keys := slices.Sorted(maps.Keys(r.InputRequests))
		var q struct {
			Params struct {
				RequestedSchema struct {
					Properties map[string]any `json:"properties"`
				} `json:"requestedSchema"`
			} `json:"params"`
		}
		if err := json.Unmarshal(r.InputRequests[keys[0]], &q); err != nil || len(q.Params.RequestedSchema.Properties) != 1 {
			t.Fatalf("round %d question %s = %s", i, keys[0], r.InputRequests[keys[0]])
		}
		var prop string
		for p := range q.Params.RequestedSchema.Properties {
			prop = p
		}
		if answered[prop] {
			t.Fatalf("round %d asks again for %q, answered before", i, prop)
		}
		answered[prop] = true
		c := clients[i%2]
		var next round
		c.ok("tools/call", map[string]any{"name": "multi_input", "arguments": map[string]any{},
			"inputResponses": map[string]any{keys[0]: answers[prop]}, "requestState": *r.RequestState}, "multi_input", &next)
		r = next
	}
	if len(answered) != 2 || r.ResultType != "complete" || r.text() != "name=Ada confirm=true" {
		t.Errorf("after answering %v: %+v, want the plain result with both answers", answered, r)
	}
}
