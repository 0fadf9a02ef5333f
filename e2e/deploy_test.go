package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskgate/taskgate/e2e/e2etest"
	"github.com/taskgate/taskgate/taskstore/redistest"
)

// startTaskgateEnv is startTaskgate with extra environment variables;
// ready reports the process up (nil: its admin /healthz answers 200 over
// plain HTTP).
func startTaskgateEnv(t testing.TB, env []string, upstream string, ready func(g *gateway) bool, extra ...string) *gateway {
	t.Helper()
	g := &gateway{}
	g.p = e2etest.StartRetrying(t, func() (*proc, error) {
		listen, admin := e2etest.FreeAddr(t), e2etest.FreeAddr(t)
		args := append([]string{"--upstream", upstream, "--listen", listen, "--admin-listen", admin, "--log-level", "debug",
			"--drain-delay", "0"}, extra...)
		cmd := exec.Command(taskgateBin, args...)
		cmd.Env = append(os.Environ(), env...)
		p := e2etest.Start(t, "taskgate", cmd, e2etest.CheckOutput(e2etest.RaceOrPanic))
		g.URL, g.Admin = "http://"+listen+"/mcp", "http://"+admin
		if ready == nil {
			ready = func(g *gateway) bool { return httpStatus(g.Admin+"/healthz") == http.StatusOK }
		}
		err := e2etest.WaitReady(p, 10*time.Second, func() bool { return ready(g) })
		if err != nil {
			p.Kill()
		}
		return p, err
	})
	return g
}

// redisDBSize returns the number of keys in the Redis at addr.
func redisDBSize(t testing.TB, addr string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("DBSIZE\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscanf(line, ":%d", &n); err != nil {
		t.Fatalf("DBSIZE: %q", line)
	}
	return n
}

// A start that fails on a port in use writes nothing to Redis (not even
// the shared owner key), starts nothing that logs, and prints one line
// naming the cause.
func TestStartFailureWritesNothing(t *testing.T) {
	t.Parallel()
	redistest.Need(t, "redis-server")
	addr := redistest.Start(t)
	for _, which := range []string{"--listen", "--admin-listen"} {
		t.Run(which, func(t *testing.T) {
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			listen, admin := e2etest.FreeAddr(t), e2etest.FreeAddr(t)
			if which == "--listen" {
				listen = busy.Addr().String()
			} else {
				admin = busy.Addr().String()
			}
			cmd := exec.Command(taskgateBin, "--upstream", "http://127.0.0.1:1/mcp", "--redis", "redis://"+addr,
				"--listen", listen, "--admin-listen", admin)
			cmd.Env = envWithout(os.Environ(), "TASKGATE_")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err = cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("exit: %v; want status 1", err)
			}
			out := strings.TrimSpace(stderr.String())
			if strings.Count(out, "\n") != 0 || !strings.Contains(out, which+" "+busy.Addr().String()) ||
				!strings.Contains(out, "address already in use") {
				t.Errorf("stderr %q; want one line naming %s and the address in use", out, which)
			}
			if n := redisDBSize(t, addr); n != 0 {
				t.Errorf("Redis holds %d keys after a failed start; want none", n)
			}
		})
	}
}

// Flags and variables: a near miss is named, sizes take units, an unknown
// TASKGATE_ variable is warned about, and durations are logged with units.
func TestFlagAndEnvHints(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(taskgateBin, "--upstrem", "http://127.0.0.1:1/mcp").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "did you mean --upstream?") {
		t.Errorf("--upstrem: %v %q; want exit 2 suggesting --upstream", err, out)
	}
	out, err = exec.Command(taskgateBin, "--upstream", "http://127.0.0.1:1/mcp", "--max-body-size", "4 parsecs").CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "e.g. 4MiB, 512KiB") {
		t.Errorf("--max-body-size 4 parsecs: %v %q; want exit 2 naming the form", err, out)
	}

	up := startLegacy(t)
	gw := startTaskgateEnv(t, []string{"TASKGATE_UPSTREM=http://127.0.0.1:9/mcp", "TASKGATE_MAX_RESULT_SIZE=512KiB"}, up.URL, nil,
		"--max-body-size", "1KiB")
	c := newRawClient(t, gw.URL)
	c.initialize()
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` +
		strings.Repeat("x", 1100) + `"}}}`)
	if r := c.postRaw(body); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a 1.1 KiB body with --max-body-size 1KiB: HTTP %d, want 413", r.Status)
	}
	waitFor(t, 10*time.Second, "a warning about TASKGATE_UPSTREM naming TASKGATE_UPSTREAM", func() bool {
		return strings.Contains(gw.p.Output(), `"variable":"TASKGATE_UPSTREM","did_you_mean":"TASKGATE_UPSTREAM"`)
	})
	gw.p.Signal(t, syscall.SIGTERM)
	if _, ok := gw.p.WaitExit(30 * time.Second); !ok {
		t.Fatal("taskgate still runs 30s after SIGTERM")
	}
	if !strings.Contains(gw.p.Output(), `"grace":"30s"`) {
		t.Errorf(`the shutdown line does not log "grace":"30s"`)
	}
}

// envWithout returns environ without the variables whose name starts with
// prefix.
func envWithout(environ []string, prefix string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// On SIGTERM, /readyz answers 503 at once while the proxy still accepts new
// connections for --drain-delay (each answer closing its connection), then
// it stops accepting and exits 0.
func TestDrainOnSIGTERM(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--drain-delay", "20s")
	if st := httpStatus(gw.Admin + "/readyz"); st != http.StatusOK {
		t.Fatalf("/readyz before SIGTERM: %d", st)
	}
	gw.p.Signal(t, syscall.SIGTERM)
	waitFor(t, 10*time.Second, "/readyz 503 after SIGTERM", func() bool { return httpStatus(gw.Admin+"/readyz") == http.StatusServiceUnavailable })
	if st := httpStatus(gw.Admin + "/healthz"); st != http.StatusOK {
		t.Errorf("/healthz while draining: %d, want 200 (alive)", st)
	}
	// A new connection is still served, and told to close.
	c := newRawClient(t, gw.URL)
	tr := &http.Transport{} // keep-alive: the Connection: close must come from taskgate
	t.Cleanup(tr.CloseIdleConnections)
	c.hc = &http.Client{Transport: tr}
	c.initialize()
	body, _ := c.marshalRequest("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "draining"}})
	resp, err := c.hc.Do(c.request(context.Background(), http.MethodPost, body))
	if err != nil {
		t.Fatalf("tools/call while draining: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "draining") {
		t.Errorf("tools/call while draining: HTTP %d %q", resp.StatusCode, b)
	}
	if !resp.Close {
		t.Errorf("an answer while draining does not close its connection")
	}
	if gw.p.Exited() {
		t.Fatal("taskgate exited during the drain delay")
	}
	// A second SIGTERM ends the delay.
	gw.p.Signal(t, syscall.SIGTERM)
	st, ok := gw.p.WaitExit(30 * time.Second)
	if !ok || st.ExitCode() != 0 {
		t.Fatalf("exit after the second SIGTERM: %v %v", st, ok)
	}
	out := gw.p.Output()
	for _, want := range []string{`"drain_delay":"20s"`, "draining cut short by a second signal", "no longer accepting connections"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(strings.TrimSuffix(gw.URL, "/mcp"), "http://"), time.Second); err == nil {
		t.Errorf("the proxy's port still accepts after exit")
	}
}

// connsTo counts the established TCP connections of this machine whose
// remote end is port (from /proc/net/tcp; Linux only).
func connsTo(t testing.TB, port int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "01" {
			continue
		}
		_, rp, ok := strings.Cut(f[2], ":")
		var p int
		if _, err := fmt.Sscanf(rp, "%X", &p); ok && err == nil && p == port {
			n++
		}
	}
	return n
}

// Idle upstream connections are closed --upstream-idle-conn after the
// traffic stops, without further requests: pass-through and background
// calls.
func TestIdleUpstreamConnsClosed(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	u, _ := url.Parse(up.URL)
	port, _ := strconv.Atoi(u.Port())
	gw := startTaskgate(t, up.URL, "--upstream-idle-conn", "1s")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newRawClient(t, gw.URL)
			c.initialize()
			c.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": fmt.Sprint("x", i)}})
			task := c.createTask("echo", map[string]any{"text": "t"}, map[string]any{})
			c.waitStatus(task.TaskID, "completed", 30*time.Second)
			c.hc.CloseIdleConnections()
		}()
	}
	wg.Wait()
	if n := connsTo(t, port); n == 0 {
		t.Fatal("no connection to the upstream after the calls: the test sees nothing")
	}
	waitFor(t, 20*time.Second, "taskgate's idle upstream connections to close", func() bool { return connsTo(t, port) == 0 })
}

// On SIGTERM, every tasks/result wait on a task whose call is cut at the
// end of the grace gets the final "taskgate shut down" answer: on the
// stopping replica (JSON, and an SSE stream) as on another replica.
func TestShutdownAnswersEveryWaiter(t *testing.T) {
	t.Parallel()
	redisURL := "redis://" + redistest.Start(t)
	up := startLegacy(t)
	key := "e2e-waiters-owner-key-0123456789"
	a := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key, "--shutdown-grace", "1s", "--keepalive", "200ms")
	b := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key)
	stats := newStatsReader(t, up.URL)
	c := newRawClient(t, a.URL)
	c.header.Set("Authorization", "Bearer waiters")
	c.initialize()
	tk := c.createTask("slow", map[string]any{"seconds": 30, "steps": 30}, nil)
	waitUpstreamRunning(t, stats, 1)

	type answer struct {
		name string
		body string
		err  error
	}
	answers := make(chan answer, 3)
	wait := func(name string, gw *gateway, accept string) {
		body, _ := c.marshalRequest("tasks/result", map[string]any{"taskId": tk.TaskID})
		req, err := http.NewRequest(http.MethodPost, gw.URL, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer waiters")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", accept)
		req.Header.Set("MCP-Protocol-Version", c.version)
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		go func() {
			resp, err := (&http.Client{Transport: tr, Timeout: 60 * time.Second}).Do(req)
			if err != nil {
				answers <- answer{name: name, err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers <- answer{name: name, body: string(b), err: err}
		}()
	}
	wait("stopping replica, SSE", a, "text/event-stream")
	wait("stopping replica, JSON", a, "application/json")
	wait("other replica, SSE", b, "application/json, text/event-stream")
	waitFor(t, 10*time.Second, "two waiters on the stopping replica", func() bool { return metricValue(a, "taskgate_result_waiters") == "2" })
	waitFor(t, 10*time.Second, "a waiter on the other replica", func() bool { return metricValue(b, "taskgate_result_waiters") == "1" })
	a.p.Signal(t, syscall.SIGTERM)
	for range 3 {
		select {
		case ans := <-answers:
			if ans.err != nil || !strings.Contains(ans.body, "shut down") {
				t.Errorf("%s: %v, body %q; want the final answer saying taskgate shut down", ans.name, ans.err, ans.body)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("a waiter got no answer within 60s of SIGTERM")
		}
	}
	if st, ok := a.p.WaitExit(30 * time.Second); !ok || st.ExitCode() != 0 {
		t.Errorf("exit after SIGTERM: %v %v", st, ok)
	}
}
