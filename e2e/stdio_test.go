package e2e

// Stdio upstreams: taskgate --upstream-command runs a stdio MCP server per
// client session. The servers are real: legacy-mcp --stdio (the official Go
// SDK's StdioTransport) and the reference servers from npm (pinned in
// .npm/package.json), driven through taskgate by real clients.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/taskgate/taskgate/e2e/e2etest"
	"github.com/taskgate/taskgate/taskstore/redistest"
)

// startStdioGateway starts taskgate in front of the stdio command (split
// like a shell line) with extra flags, and waits for its /healthz.
func startStdioGateway(t testing.TB, command string, extra ...string) *gateway {
	t.Helper()
	g := &gateway{}
	g.p = e2etest.StartRetrying(t, func() (*proc, error) {
		listen, admin := e2etest.FreeAddr(t), e2etest.FreeAddr(t)
		args := append([]string{"--upstream-command", command, "--listen", listen, "--admin-listen", admin,
			"--log-level", "debug"}, extra...)
		p := startProc(t, "taskgate", taskgateBin, args...)
		g.URL, g.Admin = "http://"+listen+"/mcp", "http://"+admin
		err := e2etest.WaitReady(p, 10*time.Second, func() bool { return e2etest.HTTPOK(g.Admin + "/healthz") })
		if err != nil {
			p.Kill()
		}
		return p, err
	})
	return g
}

// legacyStdio is the --upstream-command of legacy-mcp in stdio mode.
func legacyStdio() string { return legacyMCPBin + " --stdio" }

// childPIDs lists the processes taskgate started (its direct children).
func childPIDs(t testing.TB, g *gateway) []int {
	t.Helper()
	pid := g.p.Cmd.Process.Pid
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, w := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(w); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil && !zombie(pid) }

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

func requireProc(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("needs /proc to find the child processes")
	}
}

// TestStdioGoSDKServer: plain calls, task-augmented calls with progress and
// tasks/result through a Go SDK stdio server, with the mcp-go client.
func TestStdioGoSDKServer(t *testing.T) {
	t.Parallel()
	gw := startStdioGateway(t, legacyStdio())
	var mu sync.Mutex
	var notes []mcp.JSONRPCNotification
	c, init := newMCPClient(t, gw.URL, nil)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		mu.Lock()
		notes = append(notes, n)
		mu.Unlock()
	})
	if init.ServerInfo.Name != "legacy-mcp" || init.Capabilities.Tasks == nil {
		t.Fatalf("initialize through the stdio upstream: server %q tasks %v; want legacy-mcp with tasks added", init.ServerInfo.Name, init.Capabilities.Tasks)
	}
	res, err := c.CallTool(ctxT(t), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "over stdio"}}})
	if err != nil || textOf(res.Content) != "over stdio" {
		t.Fatalf("plain echo: %v %+v", err, res)
	}

	resp := mcpSend(t, c, "tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"seconds": 1, "steps": 4},
		"task": map[string]any{}, "_meta": map[string]any{"progressToken": "stdio-1"}})
	var created mcp.CreateTaskResult
	if resp.Error != nil || json.Unmarshal(resp.Result, &created) != nil || created.Task.TaskId == "" {
		t.Fatalf("tools/call slow as a task: %+v %s", resp.Error, resp.Result)
	}
	if got := taskResult(t, c, created.Task.TaskId); textOf(got.Content) != "slept 1 seconds" || relatedTaskID(got.Meta) != created.Task.TaskId {
		t.Errorf("TaskResult = %q related-task %q", textOf(got.Content), relatedTaskID(got.Meta))
	}
	st := waitTaskStatus(t, c, created.Task.TaskId, mcp.TaskStatusCompleted, 10*time.Second)
	if st.Status != mcp.TaskStatusCompleted {
		t.Errorf("task %s", st.Status)
	}
	mu.Lock()
	defer mu.Unlock()
	progress := 0
	for _, n := range notes {
		if n.Method == "notifications/progress" && n.Params.AdditionalFields["progressToken"] == "stdio-1" {
			progress++
		}
	}
	if progress == 0 {
		t.Errorf("no progress of the task reached the client (notifications: %d)", len(notes))
	}
}

// TestStdioElicitationInTask: the stdio server's elicitation/create during
// a task makes it input_required; the answer reaches the child.
func TestStdioElicitationInTask(t *testing.T) {
	t.Parallel()
	gw := startStdioGateway(t, legacyStdio())
	c := newRawClient(t, gw.URL)
	c.initializeWith(elicitCaps)
	askFlow(t, c, c, c, "blue")
}

// TestStdioCancelTask: tasks/cancel reaches the child as
// notifications/cancelled (its stats count the cancelled call).
func TestStdioCancelTask(t *testing.T) {
	t.Parallel()
	gw := startStdioGateway(t, legacyStdio())
	c := newRawClient(t, gw.URL)
	c.initialize()
	tk := c.createTask("slow", map[string]any{"seconds": 30, "steps": 300}, nil)
	stats := func() upstreamStats {
		var res struct {
			StructuredContent upstreamStats `json:"structuredContent"`
		}
		c.result("tools/call", map[string]any{"name": "stats", "arguments": map[string]any{}}, &res)
		return res.StructuredContent
	}
	waitFor(t, 10*time.Second, "the slow call to run in the child", func() bool { return stats().Running == 1 })
	var cancelled wireTask
	c.result("tasks/cancel", map[string]any{"taskId": tk.TaskID}, &cancelled)
	if cancelled.Status != "cancelled" {
		t.Fatalf("tasks/cancel: status %s", cancelled.Status)
	}
	waitFor(t, 10*time.Second, "the child to see the cancellation", func() bool {
		s := stats()
		return s.Cancelled == 1 && s.Running == 0
	})
}

// TestStdioChildKilledMidTask: a child killed while a task and a plain call
// run fails both with a message naming its exit; the session ends (404)
// and initialize starts a new child.
func TestStdioChildKilledMidTask(t *testing.T) {
	t.Parallel()
	requireProc(t)
	gw := startStdioGateway(t, legacyStdio())
	c := newRawClient(t, gw.URL)
	c.initialize()
	tk := c.createTask("slow", map[string]any{"seconds": 30, "steps": 30}, nil)
	plain := make(chan reply, 1)
	go func() {
		body, _ := c.marshalRequest("tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"seconds": 30, "steps": 30}})
		plain <- c.postRaw(body)
	}()
	var pids []int
	waitFor(t, 10*time.Second, "one child", func() bool { pids = childPIDs(t, gw); return len(pids) == 1 })
	waitFor(t, 10*time.Second, "the task and the plain call to run in the child", func() bool {
		var res struct {
			StructuredContent upstreamStats `json:"structuredContent"`
		}
		c.result("tools/call", map[string]any{"name": "stats", "arguments": map[string]any{}}, &res)
		return res.StructuredContent.Running == 2
	})
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	final := c.waitStatus(tk.TaskID, "failed", 10*time.Second)
	if !strings.Contains(final.StatusMessage, "stdio MCP server exited (signal: killed)") {
		t.Errorf("task statusMessage %q, want it to name the exit", final.StatusMessage)
	}
	r := <-plain
	if r.Msg == nil || r.Msg.Error == nil || !strings.Contains(r.Msg.Error.Message, "exited (signal: killed)") {
		t.Errorf("plain call of the killed child: HTTP %d %s, want a JSON-RPC error naming the exit", r.Status, r.Body)
	}
	// tasks/* live in taskgate's store and still answer; the upstream
	// session is gone.
	body, _ := c.marshalRequest("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}})
	if r := c.postRaw(body); r.Status != http.StatusNotFound {
		t.Errorf("call in the ended session: HTTP %d %s, want 404", r.Status, r.Body)
	}
	c.session = ""
	c.initialize()
	var res toolResult
	c.result("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "again"}}, &res)
	if res.text() != "again" {
		t.Errorf("echo after re-initialize: %q", res.text())
	}
	if got := childPIDs(t, gw); len(got) != 1 || got[0] == pids[0] {
		t.Errorf("children after re-initialize: %v (killed %d)", got, pids[0])
	}
	resp, err := http.Get(gw.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`taskgate_stdio_exits_total{reason="crashed"} 1`, "taskgate_stdio_children 1", "taskgate_stdio_started_total 2"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestStdioSessionsIsolated: each session has its own process, so one
// session's calls never show in another's state.
func TestStdioSessionsIsolated(t *testing.T) {
	t.Parallel()
	gw := startStdioGateway(t, legacyStdio())
	a, b := newRawClient(t, gw.URL), newRawClient(t, gw.URL)
	a.initialize()
	b.initialize()
	if a.session == b.session {
		t.Fatal("two initializes got one session")
	}
	for range 3 {
		var res toolResult
		a.result("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "a"}}, &res)
	}
	stats := func(c *rawClient) upstreamStats {
		var res struct {
			StructuredContent upstreamStats `json:"structuredContent"`
		}
		c.result("tools/call", map[string]any{"name": "stats", "arguments": map[string]any{}}, &res)
		return res.StructuredContent
	}
	if got := stats(a).Calls["echo"]; got != 3 {
		t.Errorf("session A's server counted %d echo calls, want 3", got)
	}
	if got := stats(b).Calls["echo"]; got != 0 {
		t.Errorf("session B's server counted %d echo calls, want 0 (it must be another process)", got)
	}
	// The children's stderr is in taskgate's log, marked with the session
	// hash the request lines use; raw session ids never are.
	// Both children's stderr, and the request lines of both sessions (a
	// request's line is written when it has been answered, maybe after the
	// child's first stderr line).
	waitFor(t, 10*time.Second, "the children's stderr and both sessions' request lines in the log", func() bool {
		out := gw.p.Output()
		return strings.Count(out, `serving on stdio`) == 2 && strings.Count(out, `"rpc_method":"notifications/initialized","session":"`) >= 2
	})
	out := gw.p.Output()
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, `"stderr":`) {
			continue
		}
		var rec struct {
			Session string `json:"session"`
			PID     int    `json:"pid"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || len(rec.Session) != 12 || rec.PID == 0 {
			t.Errorf("stderr log line without a session hash and pid: %s", line)
		} else if !strings.Contains(out, `"rpc_method":"notifications/initialized","session":"`+rec.Session+`"`) {
			t.Errorf("stderr session %q is not the hash the request lines show", rec.Session)
		}
	}
	if strings.Contains(out, a.session) || strings.Contains(out, b.session) {
		t.Error("a raw session id reached taskgate's log")
	}

	// A task of A is invisible to B (another owner: the session).
	tk := a.createTask("echo", map[string]any{"text": "mine"}, nil)
	a.waitStatus(tk.TaskID, "completed", 10*time.Second)
	if page := b.listTasks(); len(page.Tasks) != 0 {
		t.Errorf("session B lists %d tasks of session A", len(page.Tasks))
	}
}

// TestStdioShutdownStopsChildren: SIGTERM ends taskgate and every child.
func TestStdioShutdownStopsChildren(t *testing.T) {
	t.Parallel()
	requireProc(t)
	gw := startStdioGateway(t, legacyStdio(), "--stdio-stop-grace", "2s")
	for range 2 {
		newRawClient(t, gw.URL).initialize()
	}
	var pids []int
	waitFor(t, 10*time.Second, "two children", func() bool { pids = childPIDs(t, gw); return len(pids) == 2 })
	gw.p.Signal(t, syscall.SIGTERM)
	if _, ok := gw.p.WaitExit(20 * time.Second); !ok {
		t.Fatal("taskgate did not exit after SIGTERM")
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("child %d outlived taskgate", pid)
		}
	}
}

// TestStdioFlags: bad stdio configurations fail at start with exit code 2.
func TestStdioFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-command", "x"}, "exclude each other"},
		{[]string{"--upstream-command", "prog 'open"}, "unterminated single quote"},
		{[]string{"--upstream-command", "x", "--upstream-env", "NOVALUE"}, "NAME=VALUE"},
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-env", "A=b"}, "need --upstream-command"},
	}
	for _, tt := range tests {
		cmd := exec.Command(taskgateBin, tt.args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tt.want) {
			t.Errorf("taskgate %q: %v %q, want exit 2 and %q", tt.args, err, out, tt.want)
		}
	}
}

// ---- third-party servers from npm ----

var npmOnce struct {
	sync.Once
	bin string
	err error
}

// npmBin returns e2e/.npm/node_modules/.bin, installing the pinned
// packages (npm ci) the first time; it skips when node or npm is missing.
func npmBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"node", "npm"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("SKIP: %s is not installed; the stdio e2e tests with npm servers need node and npm (apt-get install nodejs npm)", p)
		}
	}
	npmOnce.Do(func() {
		dir, err := filepath.Abs(".npm")
		if err != nil {
			npmOnce.err = err
			return
		}
		bin := filepath.Join(dir, "node_modules", ".bin")
		if _, err := os.Stat(filepath.Join(bin, "mcp-server-memory")); err != nil {
			cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				npmOnce.err = fmt.Errorf("npm ci in %s: %v\n%s", dir, err, out)
				return
			}
		}
		npmOnce.bin = bin
	})
	if npmOnce.err != nil {
		t.Fatal(npmOnce.err)
	}
	return npmOnce.bin
}

// TestStdioEverythingServer: the reference "everything" server in stdio
// mode. It declares tasks itself, so taskgate passes everything through;
// plain calls, progress on the call's stream, an elicitation answered by
// the mcp-go client, and the environment the child gets.
func TestStdioEverythingServer(t *testing.T) {
	t.Parallel()
	bin := npmBin(t)
	gw := startStdioGateway(t, filepath.Join(bin, "mcp-server-everything")+" stdio",
		"--upstream-env", "TASKGATE_E2E_CONFIGURED=configured-value", "--upstream-env", "TASKGATE_E2E_TOKEN=tok-secret-4711")
	handler := elicitFunc(func(_ context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
			Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"name": "stdio", "check": true}}}, nil
	})
	c, init := newMCPClient(t, gw.URL, nil, client.WithElicitationHandler(handler))
	if !strings.Contains(init.ServerInfo.Name, "everything") {
		t.Fatalf("serverInfo %q", init.ServerInfo.Name)
	}
	res, err := c.CallTool(ctxT(t), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi there"}}})
	if err != nil || !strings.Contains(textOf(res.Content), "hi there") {
		t.Fatalf("echo: %v %+v", err, res)
	}

	// Progress of a plain call arrives on its own SSE answer.
	raw := newRawClient(t, gw.URL)
	raw.session, raw.version = c.GetSessionId(), protocolVersion
	r := raw.call("tools/call", map[string]any{"name": "trigger-long-running-operation", "arguments": map[string]any{"duration": 1, "steps": 3},
		"_meta": map[string]any{"progressToken": "ev-1"}})
	progress := 0
	for _, n := range r.Notes {
		if n.Method == "notifications/progress" && strings.Contains(string(n.Params), `"ev-1"`) {
			progress++
		}
	}
	if progress != 3 || r.Msg.Error != nil {
		t.Errorf("long-running operation: %d progress notifications on its stream, want 3 (error %+v)", progress, r.Msg.Error)
	}

	// The server asks the client during the call; mcp-go answers.
	res, err = c.CallTool(ctxT(t), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "trigger-elicitation-request", Arguments: map[string]any{}}})
	if err != nil || !strings.Contains(allText(res.Content), `"stdio"`) {
		t.Errorf("elicitation during a call: %v %q, want the client's answer in the result", err, allText(res.Content))
	}

	// The child's environment: taskgate's plus the configured entries.
	res, err = c.CallTool(ctxT(t), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "get-env", Arguments: map[string]any{}}})
	if err != nil {
		t.Fatal(err)
	}
	env := textOf(res.Content)
	if !strings.Contains(env, "configured-value") || !strings.Contains(env, `"PATH"`) {
		t.Errorf("child environment lacks the configured or the inherited variables: %.300s", env)
	}
	if out := gw.p.Output(); strings.Contains(out, "tok-secret-4711") {
		t.Error("a configured environment value reached taskgate's log")
	}
}

// TestStdioMemoryServer: the knowledge-graph server from npm, with its file
// set through --upstream-env: task-augmented writes and plain reads in one
// session.
func TestStdioMemoryServer(t *testing.T) {
	t.Parallel()
	bin := npmBin(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "memory.jsonl")
	gw := startStdioGateway(t, filepath.Join(bin, "mcp-server-memory"), "--upstream-env", "MEMORY_FILE_PATH="+file)
	c := newRawClient(t, gw.URL)
	c.initialize()
	tk := c.createTask("create_entities", map[string]any{"entities": []any{
		map[string]any{"name": "taskgate", "entityType": "proxy", "observations": []any{"fronts stdio servers"}},
	}}, nil)
	if done := c.waitStatus(tk.TaskID, "completed", 20*time.Second); done.Status != "completed" {
		t.Fatalf("create_entities task: %s %q", done.Status, done.StatusMessage)
	}
	var graph toolResult
	c.result("tools/call", map[string]any{"name": "read_graph", "arguments": map[string]any{}}, &graph)
	if !strings.Contains(graph.text(), "fronts stdio servers") {
		t.Errorf("read_graph after the task: %.300s", graph.text())
	}
	if b, err := os.ReadFile(file); err != nil || !strings.Contains(string(b), "taskgate") {
		t.Errorf("MEMORY_FILE_PATH from --upstream-env not used: %v %q", err, b)
	}
}

// TestStdioFilesystemServer: the filesystem server from npm on a temporary
// folder, as a task and as a plain call.
func TestStdioFilesystemServer(t *testing.T) {
	t.Parallel()
	bin := npmBin(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from a stdio server\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startStdioGateway(t, filepath.Join(bin, "mcp-server-filesystem")+" "+dir)
	c := newRawClient(t, gw.URL)
	c.initialize()
	tk := c.createTask("read_text_file", map[string]any{"path": filepath.Join(dir, "hello.txt")}, nil)
	c.waitStatus(tk.TaskID, "completed", 20*time.Second)
	var out struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	c.result("tasks/result", map[string]any{"taskId": tk.TaskID}, &out)
	if len(out.Content) == 0 || !strings.Contains(out.Content[0].Text, "hello from a stdio server") {
		t.Errorf("tasks/result of read_text_file: %+v", out)
	}
	var list toolResult
	c.result("tools/call", map[string]any{"name": "list_directory", "arguments": map[string]any{"path": dir}}, &list)
	if !strings.Contains(list.text(), "hello.txt") {
		t.Errorf("list_directory: %q", list.text())
	}
	// Outside the allowed folder: the server's own error, unchanged.
	var denied toolResult
	c.result("tools/call", map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": "/etc/hostname"}}, &denied)
	if !denied.IsError {
		t.Errorf("read outside the folder: %+v, want isError", denied)
	}
}

// allText joins the texts of all text content items.
func allText(content []mcp.Content) string {
	var b strings.Builder
	for _, c := range content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// TestStdioBridgesOlderServer: a stdio server capped at 2025-06-18 gets
// protocol-version bridging as over HTTP: the client speaks 2025-11-25 with
// tasks.
func TestStdioBridgesOlderServer(t *testing.T) {
	t.Parallel()
	gw := startStdioGateway(t, legacyStdio()+" --max-protocol-version 2025-06-18")
	c, init := newMCPClient(t, gw.URL, nil)
	if init.ProtocolVersion != protocolVersion || init.Capabilities.Tasks == nil {
		t.Fatalf("initialize: version %q tasks %v; want 2025-11-25 with tasks", init.ProtocolVersion, init.Capabilities.Tasks)
	}
	tk := mcpCreateTask(t, c, "echo", map[string]any{"text": "bridged"}, nil)
	if got := taskResult(t, c, tk.TaskId); textOf(got.Content) != "bridged" {
		t.Errorf("TaskResult = %q", textOf(got.Content))
	}
}

// TestStdioLimitsThroughTaskgate: the stdio limits reach the client as
// HTTP errors with JSON-RPC bodies: 503 when every process is in use, 504
// (and the process killed) when the server never answers initialize.
func TestStdioLimitsThroughTaskgate(t *testing.T) {
	t.Parallel()
	t.Run("max children", func(t *testing.T) {
		gw := startStdioGateway(t, legacyStdio(), "--stdio-max-children", "1")
		newRawClient(t, gw.URL).initialize()
		c := newRawClient(t, gw.URL)
		body, _ := c.marshalRequest("initialize", map[string]any{"protocolVersion": protocolVersion, "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "e2e", "version": "0"}})
		r := c.postRaw(body)
		if r.Status != http.StatusServiceUnavailable || r.Msg == nil || r.Msg.Error == nil ||
			!strings.Contains(r.Msg.Error.Message, "all 1 stdio MCP server processes are in use") || r.Header.Get("Retry-After") == "" {
			t.Errorf("initialize over --stdio-max-children: HTTP %d %s (Retry-After %q)", r.Status, r.Body, r.Header.Get("Retry-After"))
		}
	})
	t.Run("init timeout", func(t *testing.T) {
		requireProc(t)
		gw := startStdioGateway(t, "sleep 600", "--stdio-init-timeout", "500ms")
		c := newRawClient(t, gw.URL)
		body, _ := c.marshalRequest("initialize", map[string]any{"protocolVersion": protocolVersion, "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "e2e", "version": "0"}})
		r := c.postRaw(body)
		if r.Status != http.StatusGatewayTimeout || r.Msg == nil || r.Msg.Error == nil ||
			!strings.Contains(r.Msg.Error.Message, "did not answer initialize within 500ms") {
			t.Errorf("initialize of a silent server: HTTP %d %s, want 504 naming the bound", r.Status, r.Body)
		}
		waitFor(t, 10*time.Second, "the silent server to be killed", func() bool { return len(childPIDs(t, gw)) == 0 })
	})
}

// TestStdioReplicaKilledMidTask: two replicas share Redis and each runs its
// own stdio servers. The task runs on replica A against its session's
// child there; B answers tasks/get. When A is killed, its child dies with
// it (no orphan), and B fails the task once the lease lapses. A session of
// A means nothing to B (404): stdio sessions need affinity.
func TestStdioReplicaKilledMidTask(t *testing.T) {
	t.Parallel()
	requireProc(t)
	const lease = 2 * time.Second
	redisURL := "redis://" + redistest.Start(t)
	key := "e2e-stdio-owner-key-0123456789ab"
	a := startStdioGateway(t, legacyStdio(), "--redis", redisURL, "--owner-key", key, "--lease", lease.String())
	b := startStdioGateway(t, legacyStdio(), "--redis", redisURL, "--owner-key", key, "--lease", lease.String())
	ca := newRawClient(t, a.URL)
	ca.header.Set("Authorization", "Bearer stdio-replicas")
	ca.initialize()
	cb := newRawClient(t, b.URL)
	cb.header, cb.session, cb.version = ca.header, ca.session, ca.version

	tk := ca.createTask("slow", map[string]any{"seconds": 60, "steps": 60}, nil)
	if g := cb.getTask(tk.TaskID); g.Status != "working" {
		t.Fatalf("task on B: %s, want working", g.Status)
	}
	var kids []int
	waitFor(t, 10*time.Second, "A's child", func() bool { kids = childPIDs(t, a); return len(kids) == 1 })
	body, _ := cb.marshalRequest("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}})
	if r := cb.postRaw(body); r.Status != http.StatusNotFound {
		t.Errorf("A's session on B: HTTP %d, want 404 (the process lives on A)", r.Status)
	}
	a.p.Kill() // SIGKILL: A cannot stop its children itself
	waitFor(t, 10*time.Second, "A's child to die with A", func() bool { return !alive(kids[0]) })
	g := cb.waitTerminal(tk.TaskID, 3*lease+10*time.Second)
	if g.Status != "failed" || !strings.Contains(g.StatusMessage, "stopped (its lease expired)") {
		t.Errorf("task after its replica died: %s %q, want failed by lease recovery", g.Status, g.StatusMessage)
	}
}

// TestStdioSharedMode: --stdio-shared runs one process for all sessions;
// two sessions' plain calls and tasks, with the same request ids, get
// their own answers.
func TestStdioSharedMode(t *testing.T) {
	t.Parallel()
	requireProc(t)
	gw := startStdioGateway(t, legacyStdio(), "--stdio-shared")
	a, b := newRawClient(t, gw.URL), newRawClient(t, gw.URL)
	a.initialize()
	b.initialize()
	if got := childPIDs(t, gw); len(got) != 1 {
		t.Fatalf("shared mode: %d processes for two sessions, want 1", len(got))
	}
	var wg sync.WaitGroup
	for i, c := range []*rawClient{a, b} {
		wg.Go(func() {
			for j := range 10 {
				want := fmt.Sprintf("session %d, call %d", i, j)
				var res toolResult
				c.result("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": want}}, &res)
				if res.text() != want {
					t.Errorf("plain call: %q, want %q", res.text(), want)
				}
			}
			want := fmt.Sprintf("task of session %d", i)
			tk := c.createTask("echo", map[string]any{"text": want}, nil)
			c.waitStatus(tk.TaskID, "completed", 10*time.Second)
			var out toolResult
			c.result("tasks/result", map[string]any{"taskId": tk.TaskID}, &out)
			if out.text() != want {
				t.Errorf("task result %q, want %q", out.text(), want)
			}
		})
	}
	wg.Wait()
}

// TestStdioEverythingServerOwnTasks: the "everything" server declares
// tasks itself; with the policy's ownTasks taskgate serves them instead.
// The client sees taskgate's tasks capability and the policy's
// taskSupport on every tool, and a task-augmented call of an ordinary tool
// (which the server's own tasks refuse) runs as a taskgate task: the
// server gets a plain call.
func TestStdioEverythingServerOwnTasks(t *testing.T) {
	t.Parallel()
	bin := npmBin(t)
	policy := writePolicy(t, "ownTasks: true\nrules:\n  - match: get-env\n    taskSupport: forbidden\n")
	gw := startStdioGateway(t, filepath.Join(bin, "mcp-server-everything")+" stdio", "--config", policy)
	c := newRawClient(t, gw.URL)
	init := c.initialize()
	if !strings.Contains(init.ServerInfo.Name, "everything") {
		t.Fatalf("serverInfo %q", init.ServerInfo.Name)
	}
	if caps := string(init.Capabilities["tasks"]); caps != `{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}` {
		t.Errorf("capabilities.tasks = %s, want taskgate's", caps)
	}
	var tools struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	c.result("tools/list", map[string]any{}, &tools)
	if len(tools.Tools) == 0 {
		t.Fatal("tools/list: no tools")
	}
	for _, tl := range tools.Tools {
		want := "optional"
		if tl.Name == "get-env" {
			want = "forbidden"
		}
		if tl.Execution.TaskSupport != want {
			t.Errorf("tool %s: taskSupport %q, want the policy's %q", tl.Name, tl.Execution.TaskSupport, want)
		}
	}

	tk := c.createTask("echo", map[string]any{"message": "owned by taskgate"}, nil)
	var res toolResult
	c.result("tasks/result", map[string]any{"taskId": tk.TaskID}, &res)
	if !strings.Contains(res.text(), "owned by taskgate") || res.IsError {
		t.Errorf("tasks/result of echo = %+v, want the echo", res)
	}
	if got := c.getTask(tk.TaskID); got.Status != "completed" {
		t.Errorf("tasks/get = %+v, want completed", got)
	}
	page := c.listTasks()
	if len(page.Tasks) != 1 || page.Tasks[0].TaskID != tk.TaskID {
		t.Errorf("tasks/list = %+v, want taskgate's one task", page)
	}
	// The log is written asynchronously: poll for the line.
	waitFor(t, 10*time.Second, "taskgate to log that it serves the tasks itself", func() bool {
		return strings.Contains(gw.p.Output(), "ownTasks")
	})
}
