package e2e

// Every answer taskgate renders on the 2026-07-28 wire, checked against the
// zod schemas of the official tasks requester library
// @modelcontextprotocol/ext-tasks (pinned in testdata/exttasks-schemas): the
// schemas its client decodes each answer with, so an answer they refuse
// fails that client's whole execution ("Protocol value failed schema
// validation").

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var extTasksOnce struct {
	sync.Once
	dir string
	err error
}

// extTasksDir returns testdata/exttasks-schemas with its pinned packages
// installed (npm ci the first time); it skips when node or npm is missing.
func extTasksDir(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"node", "npm"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("SKIP: %s is not installed; the ext-tasks schema checks need node and npm (apt-get install nodejs npm)", p)
		}
	}
	extTasksOnce.Do(func() {
		dir, err := filepath.Abs(filepath.Join("testdata", "exttasks-schemas"))
		if err != nil {
			extTasksOnce.err = err
			return
		}
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "ext-tasks", "package.json")); err != nil {
			cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				extTasksOnce.err = fmt.Errorf("npm ci in %s: %v\n%s", dir, err, out)
				return
			}
		}
		extTasksOnce.dir = dir
	})
	if extTasksOnce.err != nil {
		t.Fatal(extTasksOnce.err)
	}
	return extTasksOnce.dir
}

// schemaDoc is one rendered answer and the ext-tasks schema it must pass.
type schemaDoc struct {
	Name   string          `json:"name"`
	Schema string          `json:"schema"`
	Value  json.RawMessage `json:"value"`
}

// schemaVerdict is validate.mjs's answer for one document.
type schemaVerdict struct {
	Name   string          `json:"name"`
	Schema string          `json:"schema"`
	OK     bool            `json:"ok"`
	Issues json.RawMessage `json:"issues"`
}

// validateExtTasks runs every document through the ext-tasks schemas and
// fails the test for each one they refuse.
func validateExtTasks(t *testing.T, docs []schemaDoc) {
	t.Helper()
	dir := extTasksDir(t)
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("node", filepath.Join(dir, "validate.mjs"))
	cmd.Dir = dir
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Fatalf("validate.mjs: %v\n%s", err, stderr.String())
	}
	var verdicts []schemaVerdict
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v schemaVerdict
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("validate.mjs printed %q: %v", sc.Text(), err)
		}
		verdicts = append(verdicts, v)
	}
	if len(verdicts) != len(docs) {
		t.Fatalf("validate.mjs judged %d of %d documents; stderr: %s", len(verdicts), len(docs), stderr.String())
	}
	for i, v := range verdicts {
		if !v.OK {
			t.Errorf("%s fails ext-tasks' %s: %s\n  document: %s", v.Name, v.Schema, v.Issues, docs[i].Value)
		}
	}
	t.Logf("%d rendered answers checked against @modelcontextprotocol/ext-tasks schemas", len(docs))
}

// rawError returns the error object of the JSON-RPC error response in r.
func rawError(t *testing.T, r reply) json.RawMessage {
	t.Helper()
	body := r.Body
	if len(r.Events) > 0 {
		body = []byte(r.Events[len(r.Events)-1].Data)
	}
	var m struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.Error == nil {
		t.Fatalf("not a JSON-RPC error response: %s (%v)", r.Body, err)
	}
	return m.Error
}

// TestExtTasksSchemas (M-24) renders every kind of 2026 answer through the real
// taskgate binary in front of each upstream era (legacy-mcp --fixtures at
// 2025-11-25 and on the 2026 wire) and validates each against the schema
// ext-tasks 0.2.2 decodes it with: immediate and input-required tools/call
// results, CreateTaskResult, tasks/get in every status (with the inline
// result as a CallToolResult and the inline error as an Error, as its
// client decodes them), the tasks/update and tasks/cancel acks, and the
// error objects of refused requests.
func TestExtTasksSchemas(t *testing.T) {
	extTasksDir(t)
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, era.args...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t), "--promote-window", "100ms")
			c := newModernClient(t, gw.URL, withTasks())
			var docs []schemaDoc
			add := func(name, schema string, v json.RawMessage) {
				docs = append(docs, schemaDoc{Name: era.name + " " + name, Schema: schema, Value: v})
			}
			call := func(tool string, args map[string]any) json.RawMessage {
				return c.ok("tools/call", map[string]any{"name": tool, "arguments": args}, tool, nil)
			}
			taskOf := func(name string, res json.RawMessage) detailedTask {
				t.Helper()
				var d detailedTask
				if err := json.Unmarshal(res, &d); err != nil || d.ResultType != "task" {
					t.Fatalf("%s = %s, want a CreateTaskResult", name, res)
				}
				add(name, "CreateTaskResultV2Schema", res)
				return d
			}
			// getRaw reads the task until cond holds and records the
			// tasks/get result, with its inline result or error.
			getRaw := func(name, id string, cond func(detailedTask) bool) detailedTask {
				t.Helper()
				var raw json.RawMessage
				var d detailedTask
				waitFor(t, 15*time.Second, name, func() bool {
					raw = c.ok("tasks/get", map[string]any{"taskId": id}, id, &d)
					return cond(d)
				})
				add(name+": tasks/get", "GetTaskResultV2Schema", raw)
				var inline struct {
					Result json.RawMessage `json:"result"`
					Error  json.RawMessage `json:"error"`
				}
				_ = json.Unmarshal(raw, &inline)
				if inline.Result != nil {
					add(name+": inline result", "CallToolResultV2Schema", inline.Result)
				}
				if inline.Error != nil {
					add(name+": inline error", "ErrorV2Schema", inline.Error)
				}
				return d
			}

			// Immediate results: a forbidden tool, and an optional one that
			// ends within the promote window.
			add("greet (forbidden)", "CallToolResultV2Schema", call("greet", map[string]any{"name": "Ada"}))
			add("slow_compute 0s (ends inside the window)", "CallToolResultV2Schema", call("slow_compute", map[string]any{"seconds": 0}))

			// A task that completes; one with an isError result; one whose
			// upstream answers a JSON-RPC error.
			tk := taskOf("slow_compute 1s", call("slow_compute", map[string]any{"seconds": 1}))
			getRaw("slow_compute 1s working", tk.TaskID, func(d detailedTask) bool { return true })
			getRaw("slow_compute 1s completed", tk.TaskID, statusIs("completed"))
			tk = taskOf("failing_job", call("failing_job", map[string]any{}))
			getRaw("failing_job completed (isError)", tk.TaskID, statusIs("completed"))
			tk = taskOf("protocol_error_job", call("protocol_error_job", map[string]any{}))
			getRaw("protocol_error_job failed", tk.TaskID, statusIs("failed"))

			// Input inside a task: input_required, the update ack, then the
			// completed task.
			tk = taskOf("confirm_delete", call("confirm_delete", map[string]any{"filename": "a.txt"}))
			d := getRaw("confirm_delete input_required", tk.TaskID, statusIs("input_required"))
			var key string
			for k := range d.InputRequests {
				key = k
			}
			add("tasks/update ack", "UpdateTaskResultV2Schema", c.ok("tasks/update", map[string]any{"taskId": tk.TaskID,
				"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}}, tk.TaskID, nil))
			getRaw("confirm_delete completed", tk.TaskID, statusIs("completed"))

			// Input before the task exists: an InputRequiredResult, then the
			// retry's CreateTaskResult and the task's result.
			round1 := call("test_tool_with_task", map[string]any{})
			add("test_tool_with_task round 1 (InputRequiredResult)", "InputRequiredCallToolResultV2Schema", round1)
			add("test_tool_with_task round 1 (as a CallToolResult)", "CallToolResultV2Schema", round1)
			var ir detailedTask
			if err := json.Unmarshal(round1, &ir); err != nil || ir.RequestState == nil || len(ir.InputRequests) != 1 {
				t.Fatalf("test_tool_with_task round 1 = %s, want one question and a requestState", round1)
			}
			for k := range ir.InputRequests {
				key = k
			}
			tk = taskOf("test_tool_with_task round 2", c.ok("tools/call", map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{},
				"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"name": "Alice"}}},
				"requestState":   *ir.RequestState}, "test_tool_with_task", nil))
			getRaw("test_tool_with_task completed", tk.TaskID, statusIs("completed"))

			// Cancel: the ack, the cancelled task, and the ack for a task
			// that already ended.
			tk = taskOf("slow_compute 60s", call("slow_compute", map[string]any{"seconds": 60}))
			add("tasks/cancel ack", "CancelTaskResultV2Schema", c.ok("tasks/cancel", map[string]any{"taskId": tk.TaskID}, tk.TaskID, nil))
			getRaw("slow_compute 60s cancelled", tk.TaskID, statusIs("cancelled"))
			add("tasks/cancel ack (terminal task)", "CancelTaskResultV2Schema", c.ok("tasks/cancel", map[string]any{"taskId": tk.TaskID}, tk.TaskID, nil))

			// Refused requests: their error objects.
			r, _ := c.send("tasks/get", map[string]any{"taskId": "0000000000000000"}, "0000000000000000", nil)
			add("tasks/get of an unknown task (error)", "ErrorV2Schema", rawError(t, r))
			bare := newModernClient(t, gw.URL, map[string]any{})
			r, _ = bare.send("tools/call", map[string]any{"name": "failing_job", "arguments": map[string]any{}}, "failing_job", nil)
			add("required tool without the extension (error)", "ErrorV2Schema", rawError(t, r))

			if era.name == "upstream2025" {
				// A plain call whose 2025 upstream asks mid-call: the
				// InputRequiredResult and the retry's plain result.
				el := newModernClient(t, gw.URL, map[string]any{"elicitation": map[string]any{}})
				round1 := el.ok("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{"question": "Which?"}}, "ask", nil)
				add("ask (plain) round 1", "InputRequiredCallToolResultV2Schema", round1)
				var ir detailedTask
				if err := json.Unmarshal(round1, &ir); err != nil || ir.RequestState == nil || len(ir.InputRequests) != 1 {
					t.Fatalf("ask round 1 = %s, want one question and a requestState", round1)
				}
				for k := range ir.InputRequests {
					key = k
				}
				add("ask (plain) round 2", "CallToolResultV2Schema", el.ok("tools/call", map[string]any{"name": "ask",
					"arguments":      map[string]any{"question": "Which?"},
					"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"answer": "42"}}},
					"requestState":   *ir.RequestState}, "ask", nil))
			}
			if t.Failed() {
				return
			}
			validateExtTasks(t, docs)
			for _, d := range docs {
				if strings.Contains(d.Name, "inline result") && !bytes.Contains(d.Value, []byte(`"resultType":"complete"`)) {
					t.Errorf("%s has no resultType complete: %s", d.Name, d.Value)
				}
			}
		})
	}
}

// TestExtTasksClient (M-24) drives the official requester library itself
// (ext-tasks 0.2.2's withTasks session; testdata/exttasks-schemas/client.mjs
// frames its requests for the 2026 wire) through taskgate in front of each
// upstream era: an immediate result, a task that completes, one with an
// isError result, one that fails with the upstream's JSON-RPC error, input
// inside a task and input before the task exists each settle as the same
// client settles them against a 2026 server.
func TestExtTasksClient(t *testing.T) {
	dir := extTasksDir(t)
	want := map[string]struct{ status, text string }{
		"greet":               {"completed", "Hello, Ada!"},
		"slow_compute":        {"completed", "one: computed for 1 seconds"},
		"failing_job":         {"completed", "failing_job: the job failed on purpose"},
		"protocol_error_job":  {"failed", ""},
		"confirm_delete":      {"completed", "deleted a.txt"},
		"test_tool_with_task": {"completed", "Hello, Alice! The task is done."},
	}
	for _, era := range upstreamEras {
		t.Run(era.name, func(t *testing.T) {
			up := startLegacy(t, era.args...)
			gw := startTaskgate(t, up.URL, "--config", conformancePolicy(t))
			cmd := exec.Command("node", filepath.Join(dir, "client.mjs"), gw.URL)
			cmd.Dir = dir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("client.mjs: %v\n%s", err, stderr.String())
			}
			seen := 0
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				var got struct {
					Name, Status, Text, Error string
				}
				if err := json.Unmarshal([]byte(line), &got); err != nil {
					t.Fatalf("client.mjs printed %q: %v", line, err)
				}
				w, ok := want[got.Name]
				if !ok {
					t.Errorf("client.mjs ran an unknown scenario %q", got.Name)
					continue
				}
				seen++
				if got.Status != w.status || w.text != "" && got.Text != w.text {
					t.Errorf("%s settled as %s %q (error %q); want %s %q", got.Name, got.Status, got.Text, got.Error, w.status, w.text)
				}
			}
			if seen != len(want) {
				t.Errorf("client.mjs reported %d of %d scenarios:\n%s", seen, len(want), out)
			}
		})
	}
}
