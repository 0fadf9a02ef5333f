package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskgate/taskgate/e2e/e2etest"
)

// E-01, P-01, T-01, T-02, P-03: initialize through taskgate shows the tasks
// capabilities and keeps serverInfo and instructions; the upstream never
// sees tasks/* nor params.task.
func TestInitializeAddsTasksCapabilities_E01(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	tp := startTap(t, up.URL)
	gw := startTaskgate(t, tp.URL)

	direct := newRawClient(t, up.URL).initialize()
	c := newRawClient(t, gw.URL)
	got := c.initialize()

	if got.ProtocolVersion != protocolVersion {
		t.Errorf("protocolVersion = %q, want %q", got.ProtocolVersion, protocolVersion)
	}
	var tasks any
	if err := json.Unmarshal(got.Capabilities["tasks"], &tasks); err != nil {
		t.Fatalf("capabilities.tasks: %v (capabilities %v)", err, got.Capabilities)
	}
	want := map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
		"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
	if d := cmp.Diff(want, tasks); d != "" {
		t.Errorf("capabilities.tasks (-want +got):\n%s", d)
	}
	if got.ServerInfo != direct.ServerInfo || got.Instructions != direct.Instructions || got.Instructions == "" {
		t.Errorf("serverInfo/instructions = %+v %q, want the upstream's %+v %q",
			got.ServerInfo, got.Instructions, direct.ServerInfo, direct.Instructions)
	}
	for k, v := range direct.Capabilities {
		if !bytes.Equal(got.Capabilities[k], v) {
			t.Errorf("capabilities.%s = %s, want the upstream's %s", k, got.Capabilities[k], v)
		}
	}

	// Exercise every tasks method; none of it may reach the upstream.
	tk := c.createTask("echo", map[string]any{"text": "hi"}, nil)
	c.waitStatus(tk.TaskID, "completed", 10*time.Second)
	c.result("tasks/result", map[string]any{"taskId": tk.TaskID}, nil)
	c.result("tasks/list", nil, nil)
	c.rpcErr("tasks/cancel", map[string]any{"taskId": tk.TaskID})

	var sawCall bool
	for _, m := range tp.messages() {
		if strings.HasPrefix(m.Method, "tasks/") {
			t.Errorf("upstream received %s", m.Method)
		}
		if m.Method == "tools/call" {
			var p map[string]json.RawMessage
			_ = json.Unmarshal(m.Params, &p)
			if _, ok := p["task"]; ok {
				t.Errorf("upstream received tools/call with params.task: %s", m.Params)
			}
			if string(p["name"]) == `"echo"` {
				sawCall = true
			}
		}
	}
	if !sawCall {
		t.Errorf("the upstream never received the echo call; it saw %d messages", len(tp.messages()))
	}
}

// P-02, E-04, T-07..T-10: tools/list carries execution.taskSupport from the
// policy file (first matching glob wins) and keeps every other field.
func TestToolsListTaskSupportFromPolicy_P02_E04(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	pol := writePolicy(t, `
defaults:
  taskSupport: optional
rules:
  - match: "ech?"
    taskSupport: forbidden
  - match: "sl*"
    taskSupport: required
  - match: "[fr]*"
    taskSupport: optional
`)
	gw := startTaskgate(t, up.URL, "--config", pol)

	type tool map[string]json.RawMessage
	var direct, got struct {
		Tools      []tool          `json:"tools"`
		NextCursor json.RawMessage `json:"nextCursor"`
	}
	d := newRawClient(t, up.URL)
	d.initialize()
	d.result("tools/list", nil, &direct)
	c := newRawClient(t, gw.URL)
	c.initialize()
	c.result("tools/list", nil, &got)

	want := map[string]string{"echo": "forbidden", "slow": "required", "fail": "optional",
		"rpc_error": "optional", "large": "optional", "ask": "optional", "stats": "optional"}
	if len(got.Tools) != len(direct.Tools) {
		t.Fatalf("taskgate lists %d tools, the upstream %d", len(got.Tools), len(direct.Tools))
	}
	for i, tl := range got.Tools {
		var name string
		_ = json.Unmarshal(tl["name"], &name)
		var exec struct {
			TaskSupport string `json:"taskSupport"`
		}
		if err := json.Unmarshal(tl["execution"], &exec); err != nil {
			t.Errorf("tool %s: execution = %s: %v", name, tl["execution"], err)
		}
		if exec.TaskSupport != want[name] {
			t.Errorf("tool %s: execution.taskSupport = %q, want %q", name, exec.TaskSupport, want[name])
		}
		for k, v := range direct.Tools[i] {
			if k == "execution" {
				continue
			}
			if !jsonEqual(tl[k], v) {
				t.Errorf("tool %s: %s = %s, want the upstream's %s", name, k, tl[k], v)
			}
		}
		for k := range tl {
			if _, ok := direct.Tools[i][k]; !ok && k != "execution" {
				t.Errorf("tool %s: taskgate added field %s", name, k)
			}
		}
	}
	if !bytes.Equal(got.NextCursor, direct.NextCursor) {
		t.Errorf("nextCursor = %s, want %s", got.NextCursor, direct.NextCursor)
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return cmp.Equal(x, y)
}

// E-10, H-06, H-08: a plain tools/call of slow with a progressToken streams
// its progress notifications through taskgate as SSE: the first one arrives
// while the upstream call is still running.
func TestPlainCallStreamsProgress_E10(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	stats := newStatsReader(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()

	body, id := c.marshalRequest("tools/call", map[string]any{
		"name": "slow", "arguments": map[string]any{"seconds": 3, "steps": 6},
		"_meta": map[string]any{"progressToken": "p-1"},
	})
	resp, err := c.hc.Do(c.request(ctxT(t), http.MethodPost, body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("HTTP %d, Content-Type %q; want 200 text/event-stream", resp.StatusCode, ct)
	}
	r := newSSEReader(resp.Body)
	var first rpcMsg
	for first.Method != "notifications/progress" {
		ev, err := r.next()
		if err != nil {
			t.Fatalf("stream ended before a progress notification: %v", err)
		}
		if ev.Data != "" {
			first = rpcMsg{}
			if err := json.Unmarshal([]byte(ev.Data), &first); err != nil {
				t.Fatal(err)
			}
			if first.Method == "" {
				t.Fatalf("got the response %s before any progress", ev.Data)
			}
		}
	}
	// The call is still running upstream: the event was not buffered.
	if s := stats.get(); s.Running < 1 {
		t.Errorf("upstream reports %d running calls after the first progress event; want the slow call still running", s.Running)
	}
	var p struct {
		ProgressToken string  `json:"progressToken"`
		Progress      float64 `json:"progress"`
	}
	_ = json.Unmarshal(first.Params, &p)
	if p.ProgressToken != "p-1" || p.Progress != 1 {
		t.Errorf("first progress = %s, want token p-1, progress 1", first.Params)
	}
	// The rest of the stream ends with the response to our id.
	rest, err := readAllEvents(r)
	if err != nil {
		t.Fatal(err)
	}
	var final *rpcMsg
	progress := 1
	for _, ev := range rest {
		var m rpcMsg
		if ev.Data == "" || json.Unmarshal([]byte(ev.Data), &m) != nil {
			continue
		}
		switch m.Method {
		case "notifications/progress":
			progress++
		case "":
			final = &m
		}
	}
	if final == nil || !bytes.Equal(final.ID, id) || final.Error != nil {
		t.Fatalf("final message = %+v, want a result for id %s", final, id)
	}
	if progress != 6 {
		t.Errorf("saw %d progress notifications, want 6", progress)
	}
}

func readAllEvents(r *sseReader) ([]sseEvent, error) {
	var evs []sseEvent
	for {
		ev, err := r.next()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// H-10: the standalone GET SSE stream works through taskgate.
func TestStandaloneGETStream(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := c.request(ctx, http.MethodGet, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("GET: HTTP %d, Content-Type %q; want 200 text/event-stream", resp.StatusCode, ct)
	}
	// The go-sdk opens the stream with a ": ok" comment; it must arrive
	// while the stream stays open.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the GET stream: %v", err)
	}
	if strings.TrimSpace(line) != ": ok" {
		t.Errorf("first line of the GET stream = %q, want \": ok\"", line)
	}
}

// H-13: DELETE ends the session through taskgate (204); later requests of
// that session get 404.
func TestDeleteSession(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()

	r := c.do(c.request(ctxT(t), http.MethodDelete, nil))
	if r.Status != http.StatusNoContent {
		t.Fatalf("DELETE: HTTP %d %q, want 204", r.Status, r.Body)
	}
	body, _ := c.marshalRequest("tools/list", nil)
	if r := c.postRaw(body); r.Status != http.StatusNotFound {
		t.Errorf("tools/list after DELETE: HTTP %d %q, want 404", r.Status, r.Body)
	}
}

// H-05: a notification is accepted with 202 and an empty body.
func TestNotificationAccepted202(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize() // checks notifications/initialized -> 202
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
	r := c.postRaw(b)
	if r.Status != http.StatusAccepted || len(r.Body) != 0 {
		t.Errorf("notification: HTTP %d body %q, want 202 and no body", r.Status, r.Body)
	}
}

// Upstream down: HTTP 502 with a JSON-RPC error echoing the request id.
func TestUpstreamDown502(t *testing.T) {
	t.Parallel()
	gw := startTaskgate(t, "http://"+e2etest.FreeAddr(t)+"/mcp")
	c := newRawClient(t, gw.URL)
	for _, method := range []string{"initialize", "tools/list", "tools/call", "resources/list"} {
		body := []byte(`{"jsonrpc":"2.0","id":"down-1","method":"` + method + `","params":{"name":"echo","arguments":{"text":"x"}}}`)
		r := c.postRaw(body)
		if r.Status != http.StatusBadGateway {
			t.Errorf("%s: HTTP %d, want 502", method, r.Status)
		}
		if r.Msg == nil || string(r.Msg.ID) != `"down-1"` || r.Msg.Error == nil {
			t.Errorf("%s: body %q, want a JSON-RPC error with id \"down-1\"", method, r.Body)
		}
	}
}

// --max-body-size: a larger body gets 413 with a JSON-RPC error.
func TestOversizeBody413(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--max-body-size", "1024")
	c := newRawClient(t, gw.URL)
	c.initialize()
	body, _ := c.marshalRequest("tools/call", map[string]any{"name": "echo",
		"arguments": map[string]any{"text": strings.Repeat("x", 4096)}})
	r := c.postRaw(body)
	if r.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("HTTP %d %q, want 413", r.Status, r.Body)
	}
	if r.Msg == nil || r.Msg.Error == nil {
		t.Errorf("413 body %q, want a JSON-RPC error", r.Body)
	}
	// A body under the limit still passes.
	c2 := newRawClient(t, gw.URL)
	c2.initialize()
	var res toolResult
	c2.result("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "small"}}, &res)
	if res.text() != "small" {
		t.Errorf("echo under the limit = %q", res.text())
	}
}

// Malformed JSON: HTTP 400 with JSON-RPC -32700; nothing reaches the upstream.
func TestMalformedJSON400(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	tp := startTap(t, up.URL)
	gw := startTaskgate(t, tp.URL)
	c := newRawClient(t, gw.URL)
	for _, body := range []string{`{"jsonrpc":"2.0","id":1,`, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}}`, `nope`} {
		r := c.postRaw([]byte(body))
		if r.Status != http.StatusBadRequest || r.Msg == nil || r.Msg.Error == nil || r.Msg.Error.Code != -32700 {
			t.Errorf("POST %q: HTTP %d body %q, want 400 with error -32700", body, r.Status, r.Body)
		}
	}
	if n := len(tp.messages()); n != 0 {
		t.Errorf("upstream received %d messages, want 0", n)
	}
}

// E-08 (T-08) and E-09 (T-10): a forbidden tool called as a task and a
// required tool called plainly get -32601; the upstream is not contacted.
func TestPolicyRefusesWithoutUpstream_E08_E09(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	pol := writePolicy(t, `
rules:
  - match: echo
    taskSupport: forbidden
  - match: slow
    taskSupport: required
`)
	gw := startTaskgate(t, up.URL, "--config", pol)
	stats := newStatsReader(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()
	before := stats.get()

	e := c.rpcErr("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}})
	if e.Code != -32601 {
		t.Errorf("E-08 forbidden tool as a task: code %d %q, want -32601", e.Code, e.Message)
	}
	e = c.rpcErr("tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"seconds": 0}})
	if e.Code != -32601 {
		t.Errorf("E-09 required tool without a task: code %d %q, want -32601", e.Code, e.Message)
	}
	// The opposite combinations work.
	var res toolResult
	c.result("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "plain"}}, &res)
	tk := c.createTask("slow", map[string]any{"seconds": 0}, nil)
	c.waitStatus(tk.TaskID, "completed", 10*time.Second)

	after := stats.get()
	if after.Calls["echo"] != before.Calls["echo"]+1 || after.Calls["slow"] != before.Calls["slow"]+1 {
		t.Errorf("upstream calls echo %d->%d, slow %d->%d; want exactly one allowed call each",
			before.Calls["echo"], after.Calls["echo"], before.Calls["slow"], after.Calls["slow"])
	}
}

// taskgate --help lists every flag with its TASKGATE_ variable.
func TestHelpListsFlagsAndEnv(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(taskgateBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("taskgate --help: %v\n%s", err, out)
	}
	flags := []string{"listen", "upstream", "redis", "config", "admin-listen", "log-level", "log-format",
		"owner-key", "allowed-origins", "rewrite-host", "max-body-size", "max-result-size",
		"max-tasks-per-owner", "list-page-size", "stream-idle-timeout", "stream-max-lifetime",
		"upstream-idle-conn", "keepalive", "promote-window", "lease", "shutdown-grace", "store-timeout",
		"queue-max", "task-rate", "task-burst", "direct-io", "procs", "upstream-ca",
		"upstream-command", "upstream-env", "upstream-dir", "stdio-max-children", "stdio-idle-timeout",
		"stdio-init-timeout", "stdio-max-line", "stdio-stop-grace", "stdio-shared", "sched-batch",
		"drain-delay", "tls-cert", "tls-key", "tls-client-ca", "admin-token-file", "poll-hold"}
	for _, f := range flags {
		env := "TASKGATE_" + strings.ToUpper(strings.ReplaceAll(f, "-", "_"))
		if !strings.Contains(string(out), "--"+f+"  ["+env+"]") {
			t.Errorf("--help does not list --%s with [%s]", f, env)
		}
	}
	// And every listed flag names its own variable.
	re := regexp.MustCompile(`(?m)^\s+--([a-z-]+)\s+\[(\w+)\]`)
	m := re.FindAllStringSubmatch(string(out), -1)
	if len(m) != len(flags) {
		t.Errorf("--help lists %d flags, this test knows %d: update the list\n%s", len(m), len(flags), out)
	}
	for _, x := range m {
		if want := "TASKGATE_" + strings.ToUpper(strings.ReplaceAll(x[1], "-", "_")); x[2] != want {
			t.Errorf("--%s is listed with %s, want %s", x[1], x[2], want)
		}
	}
}

// taskgate version prints the version and exits 0.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(taskgateBin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("taskgate version: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`^taskgate \S+\n$`).Match(out) {
		t.Errorf("taskgate version = %q, want \"taskgate <version>\\n\"", out)
	}
}

// A bad flag, a missing --upstream or a bad policy file (with the line
// number in the message) exit non-zero.
func TestBadStartupExitsNonZero(t *testing.T) {
	t.Parallel()
	badPolicy := writePolicy(t, "defaults:\n  taskSupport: optional\nrules:\n  - match: x\n    taskSuport: required\n")
	for _, tc := range []struct {
		name string
		args []string
		want string // in the output
	}{
		{"unknown flag", []string{"--upstream", "http://127.0.0.1:1/mcp", "--no-such-flag"}, "no-such-flag"},
		{"no upstream", []string{}, "--upstream is required"},
		{"bad duration", []string{"--upstream", "http://127.0.0.1:1/mcp", "--lease", "soon"}, "lease"},
		{"bad env", []string{"--upstream", "http://127.0.0.1:1/mcp"}, "TASKGATE_LIST_PAGE_SIZE"},
		{"bad policy", []string{"--upstream", "http://127.0.0.1:1/mcp", "--config", badPolicy}, "policy.yaml:5"},
		{"missing policy", []string{"--upstream", "http://127.0.0.1:1/mcp", "--config", badPolicy + ".nope"}, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(taskgateBin, append(tc.args, "--listen", e2etest.FreeAddr(t), "--admin-listen", "")...)
			if tc.name == "bad env" {
				cmd.Env = append(cmd.Environ(), "TASKGATE_LIST_PAGE_SIZE=many")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("taskgate %v kept running; want an exit", tc.args)
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Errorf("taskgate %v: err %v, want a non-zero exit\n%s", tc.args, err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("taskgate %v output does not mention %q:\n%s", tc.args, tc.want, out)
			}
		})
	}
}

// --procs sets GOMAXPROCS (default 1), as the Go collector's gauge shows.
func TestProcsApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "go_sched_gomaxprocs_threads 1\n"},
		{[]string{"--procs", "2"}, "go_sched_gomaxprocs_threads 2\n"},
	} {
		g := startTaskgate(t, "http://"+e2etest.FreeAddr(t)+"/mcp", tc.args...)
		resp, err := http.Get(g.Admin + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), tc.want) {
			t.Errorf("taskgate %v: /metrics lacks %q", tc.args, strings.TrimSpace(tc.want))
		}
	}
}
