package e2e

// Issue 5, hardening, with real processes: lease recovery after a crash,
// Redis down at start and restarting mid-flight, upstream crashes,
// timeouts and lost sessions, graceful shutdown, Redis Cluster, and the
// limits as a user sees them.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgate/taskgate/e2e/e2etest"
	"github.com/taskgate/taskgate/taskstore/redistest"
)

// ---- a redis-server the test stops and restarts on the same port ----

// redisServer is a redis-server on a fixed address; stop and start it again
// to simulate an outage. With persist, it keeps its data in an append-only
// file that survives restarts.
type redisServer struct {
	t       testing.TB
	addr    string
	dir     string
	persist bool
	fsync   string // appendfsync with persist; "" means always
	p       *proc
}

func newRedisServer(t testing.TB, addr string, persist bool) *redisServer {
	t.Helper()
	redistest.Need(t, "redis-server")
	return &redisServer{t: t, addr: addr, dir: t.TempDir(), persist: persist}
}

// start runs redis-server and waits until it answers PING.
func (r *redisServer) start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", r.dir}
	if r.persist {
		fsync := r.fsync
		if fsync == "" {
			fsync = "always"
		}
		args = append(args, "--appendonly", "yes", "--appendfsync", fsync)
	} else {
		args = append(args, "--appendonly", "no")
	}
	r.p = e2etest.StartRedis(r.t, r.addr, args, e2etest.CheckOutput(e2etest.RaceOrPanic))
}

// stop sends SIGTERM and waits for the exit (Redis flushes its AOF first).
func (r *redisServer) stop() {
	r.t.Helper()
	r.p.Signal(r.t, syscall.SIGTERM)
	if _, ok := r.p.WaitExit(10 * time.Second); !ok {
		r.t.Fatal("redis-server did not exit within 10s of SIGTERM")
	}
}

// httpStatus GETs u and returns the status code (0 when unreachable).
func httpStatus(u string) int {
	resp, err := http.Get(u)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// waitTerminal polls tasks/get until the task leaves working and
// input_required.
func (c *rawClient) waitTerminal(id string, timeout time.Duration) wireTask {
	c.t.Helper()
	var last wireTask
	waitFor(c.t, timeout, "task "+id+" to end", func() bool {
		last = c.getTask(id)
		return last.Status != "working" && last.Status != "input_required"
	})
	return last
}

// ---- leases ----

// Lease recovery (README "Leases, faults and shutdown"): taskgate A runs a
// call and is killed with SIGKILL; taskgate B on the same redis-server
// fails the task, saying the call was lost, within the documented bound
// (--lease after the kill, 15 s by default), and tasks/result answers
// -32603 (T-70). It runs with the default lease and with a short one; the
// bound asserted is the documented one plus failoverGrace for the
// client's polling and the store round trips.
func TestLeaseRecoveryAfterKill(t *testing.T) {
	t.Parallel()
	const failoverGrace = 2 * time.Second
	for _, tc := range []struct {
		name  string
		lease time.Duration // 0: the default
	}{
		{name: "default", lease: 0},
		{name: "2s", lease: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bound, extra := 15*time.Second, []string(nil)
			if tc.lease > 0 {
				bound, extra = tc.lease, []string{"--lease", tc.lease.String()}
			}
			redisURL := "redis://" + redistest.Start(t)
			up := startLegacy(t)
			key := "e2e-lease-owner-key-0123456789ab"
			args := append([]string{"--redis", redisURL, "--owner-key", key}, extra...)
			a := startTaskgate(t, up.URL, args...)
			b := startTaskgate(t, up.URL, args...)
			stats := newStatsReader(t, up.URL)
			ca := newRawClient(t, a.URL)
			ca.header.Set("Authorization", "Bearer lease")
			ca.initialize()
			cb := newRawClient(t, b.URL)
			cb.header, cb.session, cb.version = ca.header, ca.session, ca.version

			tk := ca.createTask("slow", map[string]any{"seconds": 120, "steps": 120}, nil)
			waitUpstreamRunning(t, stats, 1)
			a.p.Kill() // SIGKILL
			killed := time.Now()
			if g := cb.getTask(tk.TaskID); g.Status != "working" {
				t.Fatalf("right after the kill the task is %s; want working until the lease lapses", g.Status)
			}
			g := cb.waitTerminal(tk.TaskID, bound+failoverGrace)
			took := time.Since(killed)
			t.Logf("lease %v: the task failed %v after the kill -9 of its runner", bound, took.Round(10*time.Millisecond))
			if g.Status != "failed" || !strings.Contains(g.StatusMessage, "lost") {
				t.Errorf("task after its runner died: %s %q; want failed saying the call was lost", g.Status, g.StatusMessage)
			}
			if e := cb.rpcErr("tasks/result", map[string]any{"taskId": tk.TaskID}); e.Code != -32603 || !strings.Contains(e.Message, "lost") {
				t.Errorf("tasks/result of the lost task: %d %q; want -32603 saying the call was lost", e.Code, e.Message)
			}
		})
	}
}

// ---- Redis faults ----

const storeUnavailable = "task store unavailable"

// Redis down at start: taskgate starts, is alive and ready (its store
// endpoint is not), passes
// plain calls through, answers task operations with -32603 quickly and
// refuses task calls synchronously. Once Redis listens, it becomes ready
// and tasks work.
func TestRedisDownAtStart(t *testing.T) {
	t.Parallel()
	addr := e2etest.FreeAddr(t)
	rs := newRedisServer(t, addr, false)
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--redis", "redis://"+addr, "--store-timeout", "1s")

	// Pass-through works, so the pod stays ready; the store's own
	// endpoint says it is down.
	if st := httpStatus(gw.Admin + "/readyz"); st != http.StatusOK {
		t.Errorf("/readyz with Redis down: HTTP %d, want 200 (pass-through works)", st)
	}
	if st := httpStatus(gw.Admin + "/readyz/store"); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz/store with Redis down: HTTP %d, want 503", st)
	}
	if st := httpStatus(gw.Admin + "/healthz"); st != http.StatusOK {
		t.Errorf("/healthz with Redis down: HTTP %d, want 200", st)
	}
	c := newRawClient(t, gw.URL)
	c.header.Set("Authorization", "Bearer redis-down")
	c.initialize()
	var res toolResult
	c.result("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "plain"}}, &res)
	if res.text() != "plain" {
		t.Errorf("plain tools/call with Redis down = %q, want \"plain\"", res.text())
	}
	start := time.Now()
	e := c.rpcErr("tasks/get", map[string]any{"taskId": strings.Repeat("a", 32)})
	if e.Code != -32603 || !strings.Contains(e.Message, storeUnavailable) {
		t.Errorf("tasks/get with Redis down: %d %q; want -32603 %q", e.Code, e.Message, storeUnavailable)
	}
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("tasks/get with Redis down took %v; want an answer within ~2s (--store-timeout 1s)", d)
	}
	start = time.Now()
	e = c.rpcErr("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "task"}, "task": map[string]any{}})
	if e.Code != -32603 || !strings.Contains(e.Message, storeUnavailable) {
		t.Errorf("task call with Redis down: %d %q; want -32603 %q and no task", e.Code, e.Message, storeUnavailable)
	}
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("task call with Redis down took %v; want a refusal within ~2s", d)
	}

	rs.start()
	waitFor(t, 15*time.Second, "/readyz/store to turn 200", func() bool { return httpStatus(gw.Admin+"/readyz/store") == http.StatusOK })
	var tk wireTask
	waitFor(t, 15*time.Second, "a task call to succeed", func() bool {
		body, _ := c.marshalRequest("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "back"}, "task": map[string]any{}})
		r := c.postRaw(body)
		var created struct {
			Task wireTask `json:"task"`
		}
		if r.Msg == nil || r.Msg.Error != nil || json.Unmarshal(r.Msg.Result, &created) != nil {
			return false
		}
		tk = created.Task
		return true
	})
	asked := time.Now()
	r := c.call("tasks/result", map[string]any{"taskId": tk.TaskID})
	if r.Msg.Error != nil || json.Unmarshal(r.Msg.Result, &res) != nil || res.text() != "back" {
		t.Errorf("tasks/result after Redis came up (ready, task created): %q after %v; want the result \"back\"",
			r.Body, time.Since(asked).Round(time.Millisecond))
	}
	list := c.listTasks()
	if len(list.Tasks) != 1 || list.Tasks[0].TaskID != tk.TaskID {
		t.Errorf("tasks/list = %+v; want only the task created after Redis came up (the refused call left none)", list.Tasks)
	}
}

// Redis restarting mid-flight (append-only file, so the data survives):
// a task created before the outage still completes, and a tasks/result
// sent once Redis is back (and /readyz/store says so) waits for and returns the
// result (regression test: waitTerminal used to answer -32603 when its
// pub/sub subscription was not confirmed in time, instead of re-reading).
func TestRedisRestartMidFlight(t *testing.T) {
	t.Parallel()
	rs := newRedisServer(t, e2etest.FreeAddr(t), true)
	rs.start()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--redis", "redis://"+rs.addr, "--store-timeout", "1s")
	c := newRawClient(t, gw.URL)
	c.header.Set("Authorization", "Bearer redis-restart")
	c.initialize()

	tk := c.createTask("slow", map[string]any{"seconds": 3, "steps": 3}, nil)
	created := time.Now()
	rs.stop()
	if e := c.rpcErr("tasks/get", map[string]any{"taskId": tk.TaskID}); e.Code != -32603 {
		t.Errorf("tasks/get while Redis is down: %d %q, want -32603", e.Code, e.Message)
	}
	rs.start()
	if d := time.Since(created); d > 3*time.Second {
		t.Logf("Redis came back %v after the task was created, after the call's end; the outcome was recorded by retrying", d)
	}
	// Redis is back once taskgate says so (the store answers its ping).
	waitFor(t, 10*time.Second, "/readyz/store to turn 200", func() bool { return httpStatus(gw.Admin+"/readyz/store") == http.StatusOK })
	var res toolResult
	asked := time.Now()
	r := c.call("tasks/result", map[string]any{"taskId": tk.TaskID})
	if r.Msg.Error != nil || json.Unmarshal(r.Msg.Result, &res) != nil || res.text() != "slept 3 seconds" {
		t.Errorf("tasks/result after the Redis restart (taskgate ready): %q after %v; want \"slept 3 seconds\"",
			r.Body, time.Since(asked).Round(time.Millisecond))
	}
	if g := c.waitTerminal(tk.TaskID, 10*time.Second); g.Status != "completed" {
		t.Errorf("task after the Redis restart: %s %q, want completed", g.Status, g.StatusMessage)
	}
	c.result("tasks/result", map[string]any{"taskId": tk.TaskID}, &res)
	if res.text() != "slept 3 seconds" {
		t.Errorf("tasks/result of the completed task = %q, want \"slept 3 seconds\"", res.text())
	}
}

// ---- upstream faults ----

var connProblemRE = regexp.MustCompile(`(?i)closed|connection|refused|reset|EOF`)

// The upstream dies (SIGKILL) during a task's call: the task fails
// promptly, not at the policy timeout, with a statusMessage naming the
// connection problem; tasks/result is -32603.
func TestUpstreamKilledFailsTask(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	stats := newStatsReader(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()

	tk := c.createTask("slow", map[string]any{"seconds": 30, "steps": 30}, nil)
	waitUpstreamRunning(t, stats, 1)
	up.p.Kill()
	killed := time.Now()
	g := c.waitTerminal(tk.TaskID, 10*time.Second)
	if d := time.Since(killed); d > 5*time.Second {
		t.Errorf("task ended %v after the upstream died; want promptly", d)
	}
	t.Logf("task after the upstream died: %s %q", g.Status, g.StatusMessage)
	if g.Status != "failed" || !strings.Contains(g.StatusMessage, "upstream") || !connProblemRE.MatchString(g.StatusMessage) {
		t.Errorf("task after the upstream died: %s %q; want failed naming the upstream connection problem", g.Status, g.StatusMessage)
	}
	if e := c.rpcErr("tasks/result", map[string]any{"taskId": tk.TaskID}); e.Code != -32603 {
		t.Errorf("tasks/result: %d %q, want -32603", e.Code, e.Message)
	}
}

// Policy timeout: slow with timeout 1s fails with a timeout statusMessage
// and the upstream sees the call cancelled (P-06).
func TestPolicyTimeoutCancelsUpstream(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	pol := writePolicy(t, "rules:\n  - match: slow\n    timeout: 1s\n")
	gw := startTaskgate(t, up.URL, "--config", pol)
	stats := newStatsReader(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()
	before := stats.get()

	tk := c.createTask("slow", map[string]any{"seconds": 20, "steps": 20}, nil)
	g := c.waitTerminal(tk.TaskID, 10*time.Second)
	// The task's own timestamps (taskgate's clock): a client's clock around
	// the calls measures the machine's load too.
	createdAt, err1 := time.Parse(time.RFC3339Nano, g.CreatedAt)
	endedAt, err2 := time.Parse(time.RFC3339Nano, g.LastUpdatedAt)
	if err1 != nil || err2 != nil {
		t.Fatalf("task timestamps %q, %q: %v %v", g.CreatedAt, g.LastUpdatedAt, err1, err2)
	}
	if d := endedAt.Sub(createdAt); d < 900*time.Millisecond || d > 6*time.Second {
		t.Errorf("task ended %v after creation; want about the 1s timeout", d)
	}
	if g.Status != "failed" || !strings.Contains(g.StatusMessage, "timeout") {
		t.Errorf("task after its timeout: %s %q; want failed with a timeout message", g.Status, g.StatusMessage)
	}
	waitFor(t, 10*time.Second, "the upstream to count the call cancelled", func() bool {
		s := stats.get()
		return s.Cancelled > before.Cancelled && s.Running == 0
	})
	if e := c.rpcErr("tasks/result", map[string]any{"taskId": tk.TaskID}); e.Code != -32603 || !strings.Contains(e.Message, "timeout") {
		t.Errorf("tasks/result: %d %q, want -32603 naming the timeout", e.Code, e.Message)
	}
}

// Q-10, H-13: the upstream session ends (DELETE sent to the upstream
// directly) while a task runs; that task ends, and a task started later in
// the same session fails with a statusMessage naming the 404 and the
// session.
func TestUpstreamSessionGone404(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	stats := newStatsReader(t, up.URL)
	c := newRawClient(t, gw.URL)
	c.initialize()

	running := c.createTask("slow", map[string]any{"seconds": 5, "steps": 5}, nil)
	waitUpstreamRunning(t, stats, 1)
	d := newRawClient(t, up.URL)
	d.session, d.version = c.session, c.version
	if r := d.do(d.request(ctxT(t), http.MethodDelete, nil)); r.Status/100 != 2 {
		t.Fatalf("DELETE at the upstream: HTTP %d %q", r.Status, r.Body)
	}
	later := c.createTask("echo", map[string]any{"text": "after"}, nil)
	g := c.waitTerminal(later.TaskID, 10*time.Second)
	if g.Status != "failed" || !strings.Contains(g.StatusMessage, "404") || !strings.Contains(g.StatusMessage, "session") {
		t.Errorf("task in the ended session: %s %q; want failed mentioning 404 and the session", g.Status, g.StatusMessage)
	}
	g = c.waitTerminal(running.TaskID, 10*time.Second)
	if g.Status != "failed" {
		t.Errorf("task running when the session ended: %s %q; want failed", g.Status, g.StatusMessage)
	}
	t.Logf("running task: %s %q", g.Status, g.StatusMessage)
}

// ---- graceful shutdown ----

// SIGTERM (README "Leases and shutdown"): with --shutdown-grace 1s a
// 30 s call is cancelled upstream, its task fails saying taskgate shut
// down, and the process exits 0 within a few seconds; with a 5 s grace a
// 0.5 s call completes before the exit.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	redisURL := "redis://" + redistest.Start(t)
	up := startLegacy(t)
	key := "e2e-shutdown-owner-key-012345678"
	reader := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key)
	stats := newStatsReader(t, up.URL)

	// client returns a client of gw and one of the reader in its session.
	client := func(gw *gateway, auth string) (*rawClient, *rawClient) {
		c := newRawClient(t, gw.URL)
		c.header.Set("Authorization", auth)
		c.initialize()
		r := newRawClient(t, reader.URL)
		r.header, r.session, r.version = c.header, c.session, c.version
		return c, r
	}
	exit := func(gw *gateway, within time.Duration) time.Duration {
		t.Helper()
		sent := time.Now()
		gw.p.Signal(t, syscall.SIGTERM)
		st, ok := gw.p.WaitExit(within)
		if !ok {
			t.Fatalf("taskgate still runs %v after SIGTERM", within)
		}
		if st.ExitCode() != 0 {
			t.Errorf("taskgate exit code %d after SIGTERM, want 0", st.ExitCode())
		}
		return time.Since(sent)
	}

	t.Run("grace 1s cancels a long call", func(t *testing.T) {
		gw := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key, "--shutdown-grace", "1s")
		c, r := client(gw, "Bearer shutdown-long")
		before := stats.get()
		tk := c.createTask("slow", map[string]any{"seconds": 30, "steps": 30}, nil)
		waitUpstreamRunning(t, stats, 1)
		if d := exit(gw, 10*time.Second); d > 5*time.Second {
			t.Errorf("taskgate took %v to exit with a 1s grace", d)
		}
		g := r.getTask(tk.TaskID)
		if g.Status != "failed" || !strings.Contains(g.StatusMessage, "shut down") {
			t.Errorf("task after the shutdown: %s %q; want failed saying taskgate shut down", g.Status, g.StatusMessage)
		}
		waitFor(t, 10*time.Second, "the upstream to count the call cancelled", func() bool {
			return stats.get().Cancelled > before.Cancelled
		})
	})
	t.Run("grace 5s lets a short call finish", func(t *testing.T) {
		gw := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key, "--shutdown-grace", "5s")
		c, r := client(gw, "Bearer shutdown-short")
		tk := c.createTask("slow", map[string]any{"seconds": 0.5, "steps": 1}, nil)
		if d := exit(gw, 10*time.Second); d > 4*time.Second {
			t.Errorf("taskgate took %v to exit; want soon after the 0.5s call, before the 5s grace", d)
		}
		g := r.getTask(tk.TaskID)
		if g.Status != "completed" {
			t.Fatalf("short task after the shutdown: %s %q; want completed", g.Status, g.StatusMessage)
		}
		var res toolResult
		r.result("tasks/result", map[string]any{"taskId": tk.TaskID}, &res)
		if res.text() != "slept 0.5 seconds" {
			t.Errorf("tasks/result = %q, want \"slept 0.5 seconds\"", res.text())
		}
	})
}

// ---- Redis Cluster ----

// Issue 5 item 7: with redis+cluster:// the task lifecycle works: create,
// get, result (also blocking), list, cancel of a running call; tasks of
// several owners live in different slots on different masters.
func TestRedisClusterLifecycle(t *testing.T) {
	t.Parallel()
	addrs := redistest.StartCluster(t)
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--redis", "redis+cluster://"+strings.Join(addrs, ","))
	stats := newStatsReader(t, up.URL)

	const owners = 8
	clients := make([]*rawClient, owners)
	ids := make([]string, owners)
	for i := range owners {
		c := newRawClient(t, gw.URL)
		c.header.Set("Authorization", fmt.Sprintf("Bearer cluster-owner-%d", i))
		c.initialize()
		clients[i] = c
		ids[i] = c.createTask("echo", map[string]any{"text": fmt.Sprint("owner ", i)}, nil).TaskID
	}
	for i, c := range clients {
		var res toolResult
		c.result("tasks/result", map[string]any{"taskId": ids[i]}, &res)
		if res.text() != fmt.Sprint("owner ", i) {
			t.Errorf("owner %d: tasks/result %q", i, res.text())
		}
		if g := c.getTask(ids[i]); g.Status != "completed" {
			t.Errorf("owner %d: tasks/get %s", i, g.Status)
		}
		list := c.listTasks()
		if len(list.Tasks) != 1 || list.Tasks[0].TaskID != ids[i] {
			t.Errorf("owner %d: tasks/list %+v, want only its task", i, list.Tasks)
		}
		if e := c.rpcErr("tasks/get", map[string]any{"taskId": ids[(i+1)%owners]}); e.Code != -32602 {
			t.Errorf("owner %d reading another owner's task: %d %q, want -32602", i, e.Code, e.Message)
		}
	}
	// Each master's DBSIZE, asked again while asking fails (on CI's
	// loaded machine a failed DBSIZE used to count as a master without
	// keys): a master that cannot be asked fails the test as such.
	holding := 0
	var sizes []string
	for _, a := range addrs {
		var n int
		var lastErr error
		err := e2etest.PollUntil(15*time.Second, func() (bool, error) {
			reply, err := redistest.Command(a, "DBSIZE")
			if err == nil {
				n, err = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(reply, ":")))
			}
			lastErr = err
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v (last: %v)", a, err, lastErr)
		}
		if n > 0 {
			holding++
		}
		sizes = append(sizes, fmt.Sprintf("%s: %d keys", a, n))
	}
	if holding < 2 {
		t.Errorf("only %d of 3 masters hold keys (%s); want the owners' tasks spread over slots", holding, strings.Join(sizes, ", "))
	}

	c := clients[0]
	// A blocking tasks/result is woken through the cluster's pub/sub.
	wait := c.createTask("slow", map[string]any{"seconds": 1, "steps": 1}, nil)
	var res toolResult
	c.result("tasks/result", map[string]any{"taskId": wait.TaskID}, &res)
	if res.text() != "slept 1 seconds" {
		t.Errorf("blocking tasks/result = %q", res.text())
	}
	// Cancel of a running call.
	before := stats.get()
	slow := c.createTask("slow", map[string]any{"seconds": 30, "steps": 30}, nil)
	waitUpstreamRunning(t, stats, 1)
	var cancelled wireTask
	c.result("tasks/cancel", map[string]any{"taskId": slow.TaskID}, &cancelled)
	if cancelled.Status != "cancelled" {
		t.Errorf("tasks/cancel: %s", cancelled.Status)
	}
	waitFor(t, 10*time.Second, "the upstream call to be cancelled", func() bool { return stats.get().Cancelled > before.Cancelled })
	if e := c.rpcErr("tasks/result", map[string]any{"taskId": slow.TaskID}); e.Code != -32603 {
		t.Errorf("tasks/result of the cancelled task: %d %q, want -32603", e.Code, e.Message)
	}
	list := c.listTasks()
	if len(list.Tasks) != 3 {
		t.Errorf("owner 0 lists %d tasks, want 3", len(list.Tasks))
	}
}

// ---- limits as a user sees them ----

// --max-body-size, --max-result-size and --allowed-origins: each refusal
// names its limit (error messages should explain their cause).
func TestLimitsUserErrors(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--max-body-size", "4096", "--max-result-size", "16384",
		"--allowed-origins", "http://good.example")
	c := newRawClient(t, gw.URL)
	c.header.Set("Authorization", "Bearer limits")
	c.initialize()

	t.Run("max-body-size 413", func(t *testing.T) {
		body, _ := c.marshalRequest("tools/call", map[string]any{"name": "echo",
			"arguments": map[string]any{"text": strings.Repeat("x", 8192)}, "task": map[string]any{}})
		r := c.postRaw(body)
		if r.Status != http.StatusRequestEntityTooLarge || r.Msg == nil || r.Msg.Error == nil ||
			!strings.Contains(r.Msg.Error.Message, "exceeds the limit of 4096 bytes") {
			t.Errorf("8 KiB body: HTTP %d %q; want 413 with a JSON-RPC error naming the 4096-byte limit", r.Status, r.Body)
		}
	})
	t.Run("max-result-size", func(t *testing.T) {
		small := c.createTask("large", map[string]any{"bytes": 1024}, nil)
		if g := c.waitTerminal(small.TaskID, 10*time.Second); g.Status != "completed" {
			t.Errorf("1 KiB result: %s %q, want completed", g.Status, g.StatusMessage)
		}
		big := c.createTask("large", map[string]any{"bytes": 65536}, nil)
		g := c.waitTerminal(big.TaskID, 10*time.Second)
		if g.Status != "failed" || !strings.Contains(g.StatusMessage, "result size limit") {
			t.Errorf("64 KiB result over a 16 KiB limit: %s %q; want failed naming the result size limit", g.Status, g.StatusMessage)
		}
		if e := c.rpcErr("tasks/result", map[string]any{"taskId": big.TaskID}); e.Code != -32603 || !strings.Contains(e.Message, "result size limit") {
			t.Errorf("tasks/result: %d %q; want -32603 naming the result size limit", e.Code, e.Message)
		}
	})
	t.Run("allowed-origins 403", func(t *testing.T) {
		before := c.listTasks()
		evil := newRawClient(t, gw.URL)
		evil.header.Set("Authorization", "Bearer limits")
		evil.header.Set("Origin", "http://evil.example")
		evil.session, evil.version = c.session, c.version
		body, _ := evil.marshalRequest("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}})
		r := evil.postRaw(body)
		if r.Status != http.StatusForbidden || r.Msg == nil || r.Msg.Error == nil || !strings.Contains(r.Msg.Error.Message, "origin") {
			t.Errorf("task call from a foreign Origin: HTTP %d %q; want 403 with a JSON-RPC error about the origin", r.Status, r.Body)
		}
		after := c.listTasks()
		if len(after.Tasks) != len(before.Tasks) {
			t.Errorf("the refused call created a task")
		}
	})
}

// T-77, E-42: --task-rate 0.2 --task-burst 3: the fourth task operation in a
// burst gets -32603 "too many task operations" with Retry-After; other
// owners and plain calls are not affected, and after the wait it works.
func TestTaskRateLimit_T77(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--task-rate", "0.2", "--task-burst", "3") // one token per 5 s
	c := newRawClient(t, gw.URL)
	c.header.Set("Authorization", "Bearer rate-limited")
	c.initialize()

	start := time.Now()
	tk := c.createTask("echo", map[string]any{"text": "x"}, nil)
	c.getTask(tk.TaskID)
	c.getTask(tk.TaskID)
	body, _ := c.marshalRequest("tasks/get", map[string]any{"taskId": tk.TaskID})
	r := c.postRaw(body)
	if elapsed := time.Since(start); elapsed > 4500*time.Millisecond {
		t.Fatalf("four task operations took %v; the bucket refilled meanwhile, the test cannot conclude", elapsed)
	}
	if r.Status != http.StatusOK || r.Msg == nil || r.Msg.Error == nil || r.Msg.Error.Code != -32603 ||
		!strings.Contains(r.Msg.Error.Message, "too many task operations") {
		t.Fatalf("fourth task operation: HTTP %d %q; want -32603 \"too many task operations\"", r.Status, r.Body)
	}
	ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Errorf("Retry-After %q, want a positive number of seconds", r.Header.Get("Retry-After"))
	}
	// Plain calls and other owners pass.
	var res toolResult
	c.result("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "plain"}}, &res)
	other := newRawClient(t, gw.URL)
	other.header.Set("Authorization", "Bearer someone-else")
	other.initialize()
	other.createTask("echo", map[string]any{"text": "y"}, nil)
	// After the wait the owner may go on.
	waitFor(t, time.Duration(ra+2)*time.Second, "the rate limit to let tasks/get through", func() bool {
		body, _ := c.marshalRequest("tasks/get", map[string]any{"taskId": tk.TaskID})
		r := c.postRaw(body)
		return r.Msg != nil && r.Msg.Error == nil
	})
}
