package e2e

// The operator's view: the admin task API, the `taskgate tasks` CLI and
// the dashboard, driven in a real headless Chromium, across two replicas
// on one Redis.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// adminToken is the operators' token of these tests.
const adminToken = "e2e-operator-token-0123456789"

// chromium returns the path of Debian's chromium, or skips the test when
// it is not installed (.ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (.ci/run installs Debian's chromium package)")
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns a
// context of one tab; everything is stopped in t.Cleanup.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], // headless, no first run, no background networking, no sync
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// adminCluster is taskgate replicas sharing tasks, with the admin API on.
type adminCluster struct {
	a, b     *gateway
	up       *legacy
	tokFile  string
	stats    *statsReader
	backends string
}

// startAdminCluster starts two replicas on one redis-server.
func startAdminCluster(t *testing.T) *adminCluster {
	t.Helper()
	c := &adminCluster{up: startLegacy(t)}
	c.tokFile = filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(c.tokFile, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	redisURL := "redis://" + redistest.Start(t)
	c.a = startTaskgate(t, c.up.URL, "--redis", redisURL, "--admin-token-file", c.tokFile)
	c.b = startTaskgate(t, c.up.URL, "--redis", redisURL, "--admin-token-file", c.tokFile)
	c.stats = newStatsReader(t, c.up.URL)
	return c
}

// adminGet GETs an admin API path of g with the operators' token.
func adminDo(t *testing.T, g *gateway, method, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, g.Admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type adminTask struct {
	TaskID, Status, StatusMessage, Tool, Owner, Runner, Era string
}

// Sign in on replica B's dashboard, see the running tasks of two owners
// created through replica A, cancel one with the confirmation dialog, see
// it cancelled — the owner sees it too, and the upstream call running on
// replica A is aborted.
func TestDashboardCancelAcrossReplicas(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	c := startAdminCluster(t)

	owner := func(token string) *rawClient {
		rc := newRawClient(t, c.a.URL)
		rc.header.Set("Authorization", "Bearer "+token)
		rc.initialize()
		return rc
	}
	alice, bob := owner("alice-token"), owner("bob-token")
	slow := map[string]any{"seconds": 300, "steps": 1}
	t1 := alice.createTask("slow", slow, nil)
	t2 := bob.createTask("slow", slow, nil)
	t3 := bob.createTask("echo", map[string]any{"text": "hello"}, nil)
	waitUpstreamRunning(t, c.stats, 2)
	bob.waitStatus(t3.TaskID, "completed", 10*time.Second)
	before := c.stats.get().Cancelled

	// The API on B sees both owners' tasks, under distinct owner hashes.
	code, body := adminDo(t, c.b, "GET", "/admin/v1/tasks?status=working&tool=slow")
	var list struct{ Tasks []adminTask }
	if err := json.Unmarshal(body, &list); code != 200 || err != nil || len(list.Tasks) != 2 {
		t.Fatalf("GET /admin/v1/tasks on B = %d %s", code, body)
	}
	if list.Tasks[0].Owner == list.Tasks[1].Owner || strings.Contains(string(body), "alice-token") {
		t.Errorf("owners %q, %q: want two distinct hashes, never a token", list.Tasks[0].Owner, list.Tasks[1].Owner)
	}
	for _, tk := range list.Tasks {
		if tk.Era != "2025-11-25" {
			t.Errorf("task %s era %q, want 2025-11-25", tk.TaskID, tk.Era)
		}
	}

	ctx := browser(t, chrome)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	row := func(id, status string) chromedp.CSS {
		return chromedp.CSS(`#tasks tbody tr[data-id="` + id + `"][data-status="` + status + `"]`)
	}
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	within := chromedp.WithPollingTimeout(10 * time.Second)
	err := chromedp.Do(ctx,
		chromedp.Navigate(c.b.Admin+"/admin/"),
		chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#token"), "wrong-token"),
		chromedp.Click(css("#signin")),
		chromedp.Poll[chromedp.Void](`document.getElementById("signin-error").textContent.includes("refused")`, within),
		chromedp.SendKeys(css("#token"), adminToken),
		chromedp.Click(css("#signin")),
		chromedp.WaitVisible(row(t1.TaskID, "working")),
		chromedp.WaitVisible(row(t2.TaskID, "working")),
		chromedp.WaitVisible(row(t3.TaskID, "completed")),
	)
	if err != nil {
		t.Fatalf("signing in and seeing the tasks on B's dashboard: %v", err)
	}
	total, err1 := chromedp.Run(ctx, chromedp.Text(css("#count-total")))
	working, err2 := chromedp.Run(ctx, chromedp.Text(css("#count-working")))
	if total != "3" || working != "2" || err1 != nil || err2 != nil {
		t.Errorf("dashboard counts: total %q working %q (%v, %v), want 3 and 2", total, working, err1, err2)
	}
	// The token lives in the tab's session storage, nowhere else.
	stored, err1 := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem("taskgate-admin-token") || ""`))
	elsewhere, err2 := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(localStorage) + document.cookie`))
	if stored != adminToken || strings.Contains(elsewhere, adminToken) || err1 != nil || err2 != nil {
		t.Errorf("token storage: session %q, elsewhere %q (%v, %v)", stored, elsewhere, err1, err2)
	}

	// Cancel alice's task: the dialog first, "Keep running" keeps it;
	// then from the task's detail, confirmed.
	err = chromedp.Do(ctx,
		chromedp.Click(css(`button.cancel[data-id="`+t1.TaskID+`"]`)),
		chromedp.WaitVisible(css("#confirm-no")),
		chromedp.Click(css("#confirm-no")),
		chromedp.WaitNotVisible(css("#confirm")),
		chromedp.WaitVisible(row(t1.TaskID, "working")),
		chromedp.Click(row(t1.TaskID, "working")),
		chromedp.WaitVisible(css("#detail")),
		chromedp.Poll[chromedp.Void](`document.getElementById("d-task") && document.getElementById("d-task").textContent === "`+t1.TaskID+`"`, within),
		chromedp.Click(css("#detail-cancel")),
		chromedp.WaitVisible(css("#confirm-yes")),
		chromedp.Click(css("#confirm-yes")),
		chromedp.WaitVisible(row(t1.TaskID, "cancelled")),
		chromedp.Poll[chromedp.Void](`document.getElementById("d-message").textContent === "cancelled by an operator"`, within),
	)
	if err != nil {
		t.Fatalf("cancelling through the dashboard: %v", err)
	}
	if shot := os.Getenv("TASKGATE_DASHBOARD_SCREENSHOT"); shot != "" {
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Bob's task still runs; alice sees her task cancelled by an operator
	// through replica A, where its call ran, and the upstream call ended.
	if g := bob.getTask(t2.TaskID); g.Status != "working" {
		t.Errorf("bob's task after alice's was cancelled: %s", g.Status)
	}
	if g := alice.getTask(t1.TaskID); g.Status != "cancelled" || g.StatusMessage != "cancelled by an operator" {
		t.Errorf("alice's task through A: %s %q, want cancelled by an operator", g.Status, g.StatusMessage)
	}
	waitFor(t, 10*time.Second, "the upstream call to be cancelled", func() bool { return c.stats.get().Cancelled > before })

	// The gauges on B's /metrics count the store's tasks.
	resp, err := http.Get(c.b.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`taskgate_tasks{status="working"} 1`, `taskgate_tasks{status="cancelled"} 1`,
		`taskgate_task_oldest_running_age_seconds{tool="slow"}`, `taskgate_store_errors_total{op="create"} 0`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("B's /metrics lacks %s", want)
		}
	}

	// The CLI, the real binary, against B.
	cli := func(args ...string) (int, string, string) {
		cmd := exec.Command(taskgateBin, append([]string{"tasks"}, args...)...)
		cmd.Env = append(os.Environ(), "TASKGATE_ADMIN_LISTEN="+strings.TrimPrefix(c.b.Admin, "http://"),
			"TASKGATE_ADMIN_TOKEN_FILE="+c.tokFile)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	if code, out, errOut := cli("list", "--status", "working"); code != 0 || !strings.Contains(out, t2.TaskID) || strings.Contains(out, t1.TaskID) {
		t.Errorf("taskgate tasks list --status working = %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := cli("get", t1.TaskID, "--json"); code != 0 || !strings.Contains(out, `"status":"cancelled"`) {
		t.Errorf("taskgate tasks get --json = %d %s", code, out)
	}
	if code, out, errOut := cli("cancel", t2.TaskID); code != 0 || !strings.Contains(out, "cancelled") {
		t.Errorf("taskgate tasks cancel = %d %s%s", code, out, errOut)
	}
	if code, _, errOut := cli("cancel", t2.TaskID); code != 1 || !strings.Contains(errOut, "already finished") {
		t.Errorf("taskgate tasks cancel again = %d %s, want 1", code, errOut)
	}
	if code, _, _ := cli("get", "0123456789abcdef0123456789abcdef"); code != 1 {
		t.Errorf("taskgate tasks get of an unknown task = %d, want 1", code)
	}

	// The admin log names the operator's token by fingerprint only.
	if out := c.b.p.Output(); !strings.Contains(out, "task cancelled by an operator") || strings.Contains(out, adminToken) {
		t.Errorf("B's log: want the cancel logged without the token")
	}
	// Reload without --config: refused, nothing changes.
	if code, body := adminDo(t, c.b, "POST", "/admin/v1/reload"); code != 409 {
		t.Errorf("POST /admin/v1/reload without --config = %d %s, want 409", code, body)
	}
}

// POST /admin/v1/reload re-reads the policy file like SIGHUP: a valid file
// applies to the next request, a broken one is refused with its error and
// the previous policy stays; without the token nothing is reloaded.
func TestAdminReloadPolicy(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	tok := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tok, []byte(adminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := writePolicy(t, "rules:\n  - match: echo\n    taskSupport: optional\n")
	gw := startTaskgate(t, up.URL, "--config", pol, "--admin-token-file", tok)
	c := newRawClient(t, gw.URL)
	c.initialize()
	support := func() string { return toolTaskSupport(c, "echo") }
	if err := os.WriteFile(pol, []byte("rules:\n  - match: echo\n    taskSupport: forbidden\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(gw.Admin+"/admin/v1/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || support() != "optional" {
		t.Errorf("reload without the token: HTTP %d, echo %q; want 401 and the old policy", resp.StatusCode, support())
	}
	if code, body := adminDo(t, gw, "POST", "/admin/v1/reload"); code != 200 || strings.TrimSpace(string(body)) != `{"reloaded":true}` {
		t.Fatalf("reload = %d %s", code, body)
	}
	if s := support(); s != "forbidden" {
		t.Errorf("echo after the reload answered: %q, want forbidden", s)
	}
	if err := os.WriteFile(pol, []byte("rules:\n  - match: echo\n    taskSupport: sometimes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, body := adminDo(t, gw, "POST", "/admin/v1/reload")
	if code != 422 || !strings.Contains(string(body), "sometimes") || !strings.Contains(string(body), "previous policy stays") {
		t.Errorf("reload of a broken file = %d %s; want 422 naming the bad value", code, body)
	}
	if s := support(); s != "forbidden" {
		t.Errorf("echo after a refused reload: %q, want forbidden (kept)", s)
	}
	// `taskgate reload`, the real binary, for images without a shell.
	if err := os.WriteFile(pol, []byte("rules:\n  - match: echo\n    taskSupport: required\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(taskgateBin, "reload")
	cmd.Env = append(os.Environ(), "TASKGATE_ADMIN_LISTEN="+strings.TrimPrefix(gw.Admin, "http://"), "TASKGATE_ADMIN_TOKEN_FILE="+tok)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "policy reloaded") {
		t.Errorf("taskgate reload: %v %s", err, out)
	}
	if s := support(); s != "required" {
		t.Errorf("echo after taskgate reload: %q, want required", s)
	}
	// The file watcher reloads each change of the file on disk as well, so
	// the counters are at least the API's and the CLI's reloads.
	for _, c := range []struct {
		name string
		min  int
	}{{`taskgate_policy_reloads_total{result="ok"}`, 2}, {`taskgate_policy_reloads_total{result="error"}`, 1}} {
		if n, err := strconv.Atoi(metricValue(gw, c.name)); err != nil || n < c.min {
			t.Errorf("%s = %d (%v), want at least %d", c.name, n, err, c.min)
		}
	}
}

// The admin API lists the tasks of both wire eras with their era, and an
// operator's cancel reaches a 2026-07-28 client's task as well.
func TestAdminTasksOfBothEras(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	tok := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tok, []byte(adminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startTaskgate(t, up.URL, "--admin-token-file", tok, "--promote-window", "20ms")
	old := newRawClient(t, gw.URL)
	old.header.Set("Authorization", "Bearer carol-token")
	old.initialize()
	legacyTask := old.createTask("slow", map[string]any{"seconds": 300, "steps": 1}, nil)
	modern := newModernClient(t, gw.URL, withTasks())
	modern.header.Set("Authorization", "Bearer dave-token")
	d := modern.call("slow", map[string]any{"seconds": 300, "steps": 1})
	if d.TaskID == "" {
		t.Fatalf("2026 call of slow did not become a task: %+v", d)
	}
	code, body := adminDo(t, gw, "GET", "/admin/v1/tasks?tool=slow")
	var list struct{ Tasks []adminTask }
	if err := json.Unmarshal(body, &list); code != 200 || err != nil {
		t.Fatalf("list = %d %s", code, body)
	}
	eras := map[string]string{}
	for _, tk := range list.Tasks {
		eras[tk.TaskID] = tk.Era
	}
	if eras[legacyTask.TaskID] != "2025-11-25" || eras[d.TaskID] != "2026-07-28" {
		t.Errorf("eras = %v; want %s 2025-11-25 and %s 2026-07-28", eras, legacyTask.TaskID, d.TaskID)
	}
	if code, body := adminDo(t, gw, "POST", "/admin/v1/tasks/"+d.TaskID+"/cancel"); code != 200 {
		t.Fatalf("cancel of the 2026 task = %d %s", code, body)
	}
	got := modern.waitModern(d.TaskID, "cancelled", statusIs("cancelled"))
	if got.StatusMessage != "cancelled by an operator" {
		t.Errorf("2026 client's tasks/get after the cancel: %q, want cancelled by an operator", got.StatusMessage)
	}
}
