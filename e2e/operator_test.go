package e2e

// Operating taskgate as an operator would: replicas on one Redis without
// an --owner-key, readiness during a Redis outage, SIGHUP policy reloads,
// misconfigured Redis servers, the README's Pod example in front of the
// go-sdk demo, and the container image's settings.

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgate/taskgate/e2e/e2etest"
	"github.com/taskgate/taskgate/taskstore/redistest"
)

// Two replicas on one redis-server, neither given --owner-key, see each
// other's tasks (tasks/get, tasks/list with a cursor issued by the other),
// and a restarted replica still finds the tasks it created before. A
// replica with an explicit --owner-key uses that key instead.
func TestSharedOwnerKeyAcrossReplicas(t *testing.T) {
	t.Parallel()
	redisURL := "redis://" + redistest.Start(t)
	up := startLegacy(t)
	a := startTaskgate(t, up.URL, "--redis", redisURL, "--list-page-size", "1")
	b := startTaskgate(t, up.URL, "--redis", redisURL, "--list-page-size", "1")

	client := func(gw *gateway) *rawClient {
		c := newRawClient(t, gw.URL)
		c.header.Set("Authorization", "Bearer shared-key-user")
		c.initialize()
		return c
	}
	ca, cb := client(a), client(b)
	t1 := ca.createTask("echo", map[string]any{"text": "one"}, nil)
	t2 := ca.createTask("echo", map[string]any{"text": "two"}, nil)
	if g := cb.waitTerminal(t1.TaskID, 10*time.Second); g.Status != "completed" {
		t.Errorf("task of replica A through replica B: %s %q, want completed", g.Status, g.StatusMessage)
	}
	var res toolResult
	cb.result("tasks/result", map[string]any{"taskId": t2.TaskID}, &res)
	if res.text() != "two" {
		t.Errorf("tasks/result through B = %q, want \"two\"", res.text())
	}
	var p1, p2 taskPage
	ca.result("tasks/list", nil, &p1)
	if len(p1.Tasks) != 1 || p1.NextCursor == "" {
		t.Fatalf("tasks/list page 1 through A = %+v; want one task and a cursor", p1)
	}
	cb.result("tasks/list", map[string]any{"cursor": p1.NextCursor}, &p2)
	if len(p2.Tasks) != 1 || p2.Tasks[0].TaskID == p1.Tasks[0].TaskID {
		t.Errorf("tasks/list page 2 through B with A's cursor = %+v; want the other task", p2)
	}

	// A restart of A keeps the key (it lives in Redis).
	a.p.Kill()
	a2 := startTaskgate(t, up.URL, "--redis", redisURL)
	if g := client(a2).getTask(t1.TaskID); g.Status != "completed" {
		t.Errorf("task after A restarted: %s, want completed", g.Status)
	}
	// An explicit --owner-key wins over the shared one.
	c := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", "an-explicit-owner-key-0123456789")
	if e := client(c).rpcErr("tasks/get", map[string]any{"taskId": t1.TaskID}); e.Code != -32602 {
		t.Errorf("tasks/get through a replica with another --owner-key: %d %q; want -32602 (not found)", e.Code, e.Message)
	}
}

// A Redis outage while taskgate runs: /readyz stays 200 (pass-through
// works), /readyz/store and taskgate_store_up report it, every output line
// stays JSON (go-redis's own messages included), and everything recovers.
func TestReadinessDuringRedisOutage(t *testing.T) {
	t.Parallel()
	rs := newRedisServer(t, e2etest.FreeAddr(t), true) // the task survives the restart
	rs.start()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--redis", "redis://"+rs.addr, "--store-timeout", "1s")
	waitFor(t, 10*time.Second, "/readyz/store 200", func() bool { return httpStatus(gw.Admin+"/readyz/store") == http.StatusOK })
	c := newRawClient(t, gw.URL)
	c.header.Set("Authorization", "Bearer outage")
	c.initialize()
	tk := c.createTask("slow", map[string]any{"seconds": 60, "steps": 60}, nil)
	// A blocked tasks/result keeps a pub/sub subscription open across
	// the outage.
	waiting := make(chan struct{})
	go func() {
		defer close(waiting)
		body, _ := c.marshalRequest("tasks/result", map[string]any{"taskId": tk.TaskID})
		req := c.request(t.Context(), http.MethodPost, body)
		if resp, err := c.hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()

	rs.stop()
	waitFor(t, 15*time.Second, "taskgate_store_up 0", func() bool { return metricValue(gw, "taskgate_store_up") == "0" })
	if st := httpStatus(gw.Admin + "/readyz/store"); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz/store during the outage: HTTP %d, want 503", st)
	}
	if st := httpStatus(gw.Admin + "/readyz"); st != http.StatusOK {
		t.Errorf("/readyz during the outage: HTTP %d, want 200 (pass-through works)", st)
	}
	var res toolResult
	c.result("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "through"}}, &res)
	if res.text() != "through" {
		t.Errorf("plain call during the outage = %q", res.text())
	}
	waitFor(t, 15*time.Second, "the outage to be logged", func() bool {
		return strings.Contains(gw.p.Output(), "task store not reachable")
	})
	rs.start()
	waitFor(t, 20*time.Second, "taskgate_store_up 1", func() bool { return metricValue(gw, "taskgate_store_up") == "1" })
	if g := c.getTask(tk.TaskID); g.Status == "" {
		t.Error("the task is gone after the outage")
	}
	c.call("tasks/cancel", map[string]any{"taskId": tk.TaskID})
	<-waiting
	gw.p.Signal(t, syscall.SIGTERM)
	if _, ok := gw.p.WaitExit(20 * time.Second); !ok {
		t.Fatal("taskgate did not exit after SIGTERM")
	}
	assertJSONLines(t, gw.p.Output())
}

// assertJSONLines fails for every output line that is not a JSON object.
func assertJSONLines(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("a log line is not JSON: %q", line)
		}
	}
}

// metricValue returns the value of an unlabelled metric ("" if absent).
func metricValue(gw *gateway, name string) string {
	resp, err := http.Get(gw.Admin + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// SIGHUP reloads the policy file: a valid file takes effect for the next
// requests, a broken one is refused with the reason logged and the previous
// policy kept; the process never dies of it, with or without --config.
func TestSIGHUPReloadsPolicy(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	pol := writePolicy(t, "rules:\n  - match: echo\n    taskSupport: optional\n")
	gw := startTaskgate(t, up.URL, "--config", pol)
	c := newRawClient(t, gw.URL)
	c.initialize()
	support := func() string { return toolTaskSupport(c, "echo") }
	if s := support(); s != "optional" {
		t.Fatalf("echo before the reload: %q, want optional", s)
	}
	if err := os.WriteFile(pol, []byte("rules:\n  - match: echo\n    taskSupport: forbidden\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw.p.Signal(t, syscall.SIGHUP)
	waitFor(t, 10*time.Second, "the reloaded policy", func() bool { return support() == "forbidden" })
	if e := c.rpcErr("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}}); e.Code != -32601 {
		t.Errorf("task call to a tool forbidden by the reloaded policy: %d %q, want -32601", e.Code, e.Message)
	}

	if err := os.WriteFile(pol, []byte("rules:\n  - match: echo\n    taskSupport: sometimes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw.p.Signal(t, syscall.SIGHUP)
	waitFor(t, 10*time.Second, "the refused reload to be logged", func() bool {
		return strings.Contains(gw.p.Output(), "policy file not reloaded; the previous policy stays")
	})
	if gw.p.Exited() {
		t.Fatal("taskgate exited on SIGHUP with a broken policy file")
	}
	if s := support(); s != "forbidden" {
		t.Errorf("echo after a refused reload: %q, want the previous policy's forbidden", s)
	}
	if m := metricValue(gw, `taskgate_policy_reloads_total{result="error"}`); m != "1" {
		t.Errorf(`taskgate_policy_reloads_total{result="error"} = %q, want 1`, m)
	}

	plain := startTaskgate(t, up.URL)
	plain.p.Signal(t, syscall.SIGHUP)
	waitFor(t, 10*time.Second, "SIGHUP without --config to be logged", func() bool {
		return strings.Contains(plain.p.Output(), "no --config policy file to reload")
	})
	if st := httpStatus(plain.Admin + "/healthz"); st != http.StatusOK {
		t.Errorf("taskgate without --config after SIGHUP: /healthz %d", st)
	}
}

// A wrong Redis password is named as such, and a Redis that may evict keys
// is flagged at start.
func TestRedisMisconfigurationReported(t *testing.T) {
	t.Parallel()
	redistest.Need(t, "redis-server")
	addr := e2etest.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	e2etest.StartRedis(t, addr, []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--requirepass", "right-password", "--maxmemory-policy", "allkeys-lru"},
		e2etest.CheckOutput(e2etest.RaceOrPanic))
	up := startLegacy(t)
	wrong := startTaskgate(t, up.URL, "--redis", "redis://:wrong-password@"+addr)
	waitFor(t, 10*time.Second, "the wrong password to be reported", func() bool {
		return strings.Contains(wrong.p.Output(), "Redis refused the credentials in --redis (wrong password or user)")
	})
	if strings.Contains(wrong.p.Output(), "wrong-password") {
		t.Error("the log contains the password")
	}
	right := startTaskgate(t, up.URL, "--redis", "redis://:right-password@"+addr)
	waitFor(t, 10*time.Second, "the eviction policy to be flagged", func() bool {
		return strings.Contains(right.p.Output(), `"maxmemory_policy":"allkeys-lru"`)
	})
}

// The README's Pod example: the official Go SDK's DNS-rebinding check
// answers 403 to a Host that is not localhost, such as the Service name
// clients use; the example's taskgate flags (read from the README, with
// this test's addresses, policy file and Redis in place of the example's)
// must make initialize work in front of the go-sdk demo on loopback.
func TestPodExampleFlags(t *testing.T) {
	t.Parallel()
	flags := podExampleFlags(t)
	redisURL := "redis://" + redistest.Start(t)
	up := startLegacy(t) // loopback, Host checked
	pol := writePolicy(t, "defaults:\n  taskSupport: optional\n")
	initialize := func(gw *gateway) (int, string) {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"pod","version":"1"}}}`
		req, _ := http.NewRequest(http.MethodPost, gw.URL, strings.NewReader(body))
		req.Host = "reports.default.svc.cluster.local:8080"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	without := startTaskgate(t, up.URL, "--redis", redisURL)
	if st, _ := initialize(without); st != http.StatusForbidden {
		t.Errorf("without --rewrite-host the go-sdk upstream answered %d; want its DNS-rebinding 403 (what the example must avoid)", st)
	}
	args := []string{"--redis", redisURL}
	for _, f := range flags {
		name, _, _ := strings.Cut(f, "=")
		switch name {
		case "--listen", "--admin-listen", "--upstream": // startTaskgate's own
		case "--config":
			args = append(args, "--config="+pol)
		default:
			args = append(args, f)
		}
	}
	gw := startTaskgate(t, up.URL, args...)
	if st, body := initialize(gw); st != http.StatusOK || !strings.Contains(body, `"tasks"`) {
		t.Errorf("initialize with a Service Host through the Pod example's flags %q: HTTP %d %q; want 200 with capabilities.tasks", flags, st, body)
	}
	if st := httpStatus(gw.Admin + "/readyz"); st != http.StatusOK {
		t.Errorf("readinessProbe /readyz: %d", st)
	}
}

// podExampleFlags returns the taskgate container's args in the README's
// Pod example.
func podExampleFlags(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "    - name: taskgate\n")
	if !ok {
		t.Fatal("README: no Pod example with a taskgate container")
	}
	var flags []string
	for _, line := range strings.Split(rest, "\n") {
		line = strings.TrimSpace(line)
		if f, ok := strings.CutPrefix(line, "- --"); ok {
			flags = append(flags, "--"+f)
		} else if strings.HasPrefix(line, "env:") || strings.HasPrefix(line, "ports:") {
			break
		}
	}
	if len(flags) == 0 {
		t.Fatal("README: the taskgate container of the Pod example has no args")
	}
	return flags
}

// The container image's settings: TASKGATE_LISTEN and TASKGATE_ADMIN_LISTEN
// on 0.0.0.0, and `taskgate healthcheck` (the image's HEALTHCHECK, no shell)
// reading the same variable.
func TestImageSettingsAndHealthcheck(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	var listen, admin string
	p := e2etest.StartRetrying(t, func() (*proc, error) {
		_, lp, _ := net.SplitHostPort(e2etest.FreeAddr(t))
		_, ap, _ := net.SplitHostPort(e2etest.FreeAddr(t))
		listen, admin = "0.0.0.0:"+lp, "0.0.0.0:"+ap
		p := startProcEnv(t, "taskgate", taskgateBin,
			[]string{"TASKGATE_LISTEN=" + listen, "TASKGATE_ADMIN_LISTEN=" + admin, "TASKGATE_UPSTREAM=" + up.URL})
		err := e2etest.WaitReady(p, 10*time.Second, func() bool { return e2etest.HTTPOK("http://127.0.0.1:" + ap + "/healthz") })
		if err != nil {
			p.Kill()
		}
		return p, err
	})
	_, lp, _ := net.SplitHostPort(listen)
	c := newRawClient(t, "http://127.0.0.1:"+lp+"/mcp")
	c.initialize()
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"healthcheck"}, 0},
		{[]string{"healthcheck", "--path", "/readyz"}, 0},
		{[]string{"healthcheck", "--path", "/nonexistent"}, 1},
	} {
		cmd := exec.Command(taskgateBin, tc.args...)
		cmd.Env = append(os.Environ(), "TASKGATE_ADMIN_LISTEN="+admin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code {
			t.Errorf("taskgate %s: exit %d, want %d (%s)", strings.Join(tc.args, " "), code, tc.code, out.String())
		}
	}
	p.Signal(t, syscall.SIGTERM)
	if st, ok := p.WaitExit(20 * time.Second); !ok || st.ExitCode() != 0 {
		t.Errorf("exit after SIGTERM: %v %v", st, ok)
	}
}

// startProcEnv is startProc with extra environment variables (and no
// arguments).
func startProcEnv(t testing.TB, name, bin string, env []string) *proc {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	return e2etest.Start(t, name, cmd)
}
