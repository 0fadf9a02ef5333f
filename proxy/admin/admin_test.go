package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/taskgate/taskgate/taskstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	ownerA = "ownerhashaaaaaaaaaaaaaaaaaaaaaaa"
	ownerB = "ownerhashbbbbbbbbbbbbbbbbbbbbbbb"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is an admin Server over a real embedded store.
type env struct {
	t       *testing.T
	store   *taskstore.Embedded
	clk     *clock
	srv     *httptest.Server
	token   string
	tokFile string
	logs    *syncBuf
	reload  func() error
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := &clock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	st, closeStore, err := taskstore.NewEmbedded(taskstore.Config{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStore)
	e := &env{t: t, store: st, clk: clk, token: "s3cret-admin-token", logs: &syncBuf{}}
	e.tokFile = filepath.Join(t.TempDir(), "token")
	writeFile(t, e.tokFile, e.token+"\n")
	s, err := New(Config{
		TokenFile: e.tokFile,
		Store:     st,
		Cancel: func(ctx context.Context, owner, id, msg string) (*taskstore.Task, error) {
			return st.Cancel(ctx, owner, id, msg)
		},
		Reload: func() error { return e.reload() },
		Now:    clk.now,
	}, zerolog.New(e.logs))
	if err != nil {
		t.Fatal(err)
	}
	e.reload = func() error { return nil }
	e.srv = httptest.NewServer(s)
	t.Cleanup(e.srv.Close)
	return e
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// create stores a working task of owner created now, then moves the clock
// on by a millisecond so creation times differ.
func (e *env) create(owner, tool, runner string) *taskstore.Task {
	e.t.Helper()
	id, _ := taskstore.NewID()
	task := &taskstore.Task{ID: id, Owner: owner, Tool: tool, Runner: runner, TTL: time.Hour, Era: "2025-11-25",
		UpstreamID: `"up-1"`}
	if err := e.store.Create(context.Background(), task, taskstore.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.clk.add(time.Millisecond)
	return task
}

// do sends a request with the env's token (auth "" = none) and returns
// the status and body.
func (e *env) do(method, path, auth string) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (e *env) api(method, path string) (int, []byte) {
	return e.do(method, path, "Bearer "+e.token)
}

func (e *env) list(query string) TaskList {
	e.t.Helper()
	code, b := e.api("GET", "/admin/v1/tasks"+query)
	if code != 200 {
		e.t.Fatalf("GET /admin/v1/tasks%s = %d %s", query, code, b)
	}
	var l TaskList
	if err := json.Unmarshal(b, &l); err != nil {
		e.t.Fatal(err)
	}
	return l
}

func ids(l TaskList) []string {
	var out []string
	for _, t := range l.Tasks {
		out = append(out, t.TaskID)
	}
	return out
}

func TestAuth(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"no header", "", 401},
		{"wrong token", "Bearer not-the-token", 401},
		{"token prefix", "Bearer s3cret", 401},
		{"token plus more", "Bearer s3cret-admin-token-and-more", 401},
		{"basic scheme", "Basic czNjcmV0LWFkbWluLXRva2Vu", 401},
		{"empty bearer", "Bearer ", 401},
		{"right token", "Bearer s3cret-admin-token", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []string{"/admin/v1/tasks", "/admin/v1/stats", "/admin/v1/tasks/abc"} {
				want := tc.want
				if want == 200 && p == "/admin/v1/tasks/abc" {
					want = 404
				}
				code, body := e.do("GET", p, tc.auth)
				if code != want {
					t.Errorf("GET %s with %q = %d %s, want %d", p, tc.auth, code, body, want)
				}
				if code == 401 && !strings.Contains(string(body), `"code":"unauthorized"`) {
					t.Errorf("401 body = %s, want a JSON error", body)
				}
			}
		})
	}
	// A POST is refused alike without the token, and the task stays.
	task := e.create(ownerA, "slow", "r1")
	if code, _ := e.do("POST", "/admin/v1/tasks/"+task.ID+"/cancel", "Bearer wrong"); code != 401 {
		t.Errorf("cancel with a wrong token = %d, want 401", code)
	}
	if got, _ := e.store.Get(context.Background(), ownerA, task.ID); got.Status != taskstore.Working {
		t.Errorf("after a refused cancel the task is %s, want working", got.Status)
	}
	if logs := e.logs.String(); strings.Contains(logs, e.token) || strings.Contains(logs, "not-the-token") {
		t.Errorf("the log holds a token:\n%s", logs)
	}
}

func TestDisabledWithoutTokenFile(t *testing.T) {
	s, err := New(Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if s.Enabled() {
		t.Error("Enabled() without a token file")
	}
	for _, p := range []string{"/admin/v1/tasks", "/admin/", "/admin/v1/stats"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", p, nil)
		req.Header.Set("Authorization", "Bearer anything")
		s.ServeHTTP(rec, req)
		if rec.Code != 404 || !strings.Contains(rec.Body.String(), `"code":"disabled"`) {
			t.Errorf("GET %s without a token file = %d %s, want 404 disabled", p, rec.Code, rec.Body)
		}
	}
	if _, err := New(Config{TokenFile: filepath.Join(t.TempDir(), "missing"), Store: &taskstore.Embedded{},
		Cancel: func(context.Context, string, string, string) (*taskstore.Task, error) { return nil, nil }}, zerolog.Nop()); err == nil {
		t.Error("New with a missing token file: no error")
	}
	empty := filepath.Join(t.TempDir(), "empty")
	writeFile(t, empty, " \n")
	if _, err := New(Config{TokenFile: empty, Store: &taskstore.Embedded{},
		Cancel: func(context.Context, string, string, string) (*taskstore.Task, error) { return nil, nil }}, zerolog.Nop()); !errors.Is(err, errEmptyToken) {
		t.Errorf("New with an empty token file: %v, want errEmptyToken", err)
	}
}

// The token file is re-read when it changes: rewritten in place, replaced,
// and swapped the way a Kubernetes Secret volume does it (the visible name
// is a symlink through ..data, which is atomically re-pointed at a new
// directory). An emptied file keeps the last token.
func TestTokenFileReload(t *testing.T) {
	e := newEnv(t)
	ok := func(tok string) bool {
		code, _ := e.do("GET", "/admin/v1/stats", "Bearer "+tok)
		return code == 200
	}
	writeFile(t, e.tokFile, "second-token")
	if ok(e.token) || !ok("second-token") {
		t.Errorf("after rewriting the file: old accepted %v, new accepted %v; want false, true", ok(e.token), ok("second-token"))
	}
	writeFile(t, e.tokFile, "")
	if !ok("second-token") {
		t.Error("an emptied token file revoked the last token; it should stay")
	}

	// Kubernetes layout: dir/token -> ..data/token, ..data -> ..v1.
	dir := t.TempDir()
	for _, v := range []string{"..v1", "..v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "..v1", "token"), "k8s-token-one")
	writeFile(t, filepath.Join(dir, "..v2", "token"), "k8s-token-two")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("..v1", filepath.Join(dir, "..data")))
	must(os.Symlink(filepath.Join("..data", "token"), filepath.Join(dir, "token")))
	tf, err := openTokenFile(filepath.Join(dir, "token"), zerolog.Nop())
	must(err)
	if _, good := tf.check([]byte("k8s-token-one")); !good {
		t.Fatal("first Secret version refused")
	}
	must(os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	if _, good := tf.check([]byte("k8s-token-one")); good {
		t.Error("after the Secret's symlink swap the old token is still accepted")
	}
	fp, good := tf.check([]byte("k8s-token-two"))
	if !good {
		t.Error("after the Secret's symlink swap the new token is refused")
	}
	if len(fp) != 8 || strings.Contains("k8s-token-two", fp) {
		t.Errorf("fingerprint %q: want 8 hex digits", fp)
	}
}

func TestListFilters(t *testing.T) {
	e := newEnv(t)
	a1 := e.create(ownerA, "slow", "r1")
	e.clk.add(10 * time.Minute)
	b1 := e.create(ownerB, "slow", "r2")
	a2 := e.create(ownerA, "echo", "r2")
	b2 := e.create(ownerB, "echo", "r1")
	if _, err := e.store.Update(context.Background(), ownerB, b2.ID, taskstore.InputRequired, "asks"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Finish(context.Background(), ownerA, a2.ID, taskstore.Completed, "",
		taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: json.RawMessage(`{"secret":"payload"}`)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{b2.ID, a2.ID, b1.ID, a1.ID}},
		{"?status=working", []string{b1.ID, a1.ID}},
		{"?status=working,input_required", []string{b2.ID, b1.ID, a1.ID}},
		{"?status=completed&status=input_required", []string{b2.ID, a2.ID}},
		{"?tool=echo", []string{b2.ID, a2.ID}},
		{"?runner=r1", []string{b2.ID, a1.ID}},
		{"?olderThan=5m", []string{a1.ID}},
		{"?olderThan=1h", nil},
		{"?tool=slow&status=working&runner=r2", []string{b1.ID}},
		{"?tool=nosuch", nil},
	} {
		if got := ids(e.list(tc.query)); !slices.Equal(got, tc.want) {
			t.Errorf("list%s = %v, want %v", tc.query, got, tc.want)
		}
	}
	// Paging: each task once, newest first.
	var all []string
	cursor := ""
	for range 10 {
		q := "?limit=1"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		l := e.list(q)
		all = append(all, ids(l)...)
		if cursor = l.NextCursor; cursor == "" {
			break
		}
	}
	if want := []string{b2.ID, a2.ID, b1.ID, a1.ID}; !slices.Equal(all, want) {
		t.Errorf("pages of one = %v, want %v", all, want)
	}
	// The JSON is metadata only: exactly these members, owner the hash.
	code, body := e.api("GET", "/admin/v1/tasks?tool=echo&status=completed")
	if code != 200 || strings.Contains(string(body), "payload") {
		t.Fatalf("list = %d %s; want 200 without the payload", code, body)
	}
	var raw struct{ Tasks []map[string]any }
	if err := json.Unmarshal(body, &raw); err != nil || len(raw.Tasks) != 1 {
		t.Fatalf("list body %s: %v", body, err)
	}
	var keys []string
	for k := range raw.Tasks[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"createdAt", "era", "lastUpdatedAt", "owner", "runner", "status", "taskId", "tool", "ttl"}; !slices.Equal(keys, want) {
		t.Errorf("task members = %v, want %v", keys, want)
	}
	if raw.Tasks[0]["owner"] != ownerA || raw.Tasks[0]["era"] != "2025-11-25" || raw.Tasks[0]["ttl"] != 3600000.0 {
		t.Errorf("task = %v", raw.Tasks[0])
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		method, path string
		code         int
		kind         string
	}{
		{"GET", "/admin/v1/tasks?status=running", 400, "bad_filter"},
		{"GET", "/admin/v1/tasks?status=working,", 400, "bad_filter"},
		{"GET", "/admin/v1/tasks?olderThan=5", 400, "bad_filter"},
		{"GET", "/admin/v1/tasks?olderThan=-5m", 400, "bad_filter"},
		{"GET", "/admin/v1/tasks?limit=0", 400, "bad_filter"},
		{"GET", "/admin/v1/tasks?limit=1001", 400, "bad_filter"},
		{"GET", "/admin/v1/tasks?limit=ten", 400, "bad_filter"},
		{"GET", "/admin/v1/tasks?older_than=5m", 400, "bad_filter"},
		{"GET", "/admin/v1/tasks?tool=a&tool=b", 400, "bad_filter"},
		{"GET", "/admin/v1/tasks?cursor=garbage", 400, "bad_cursor"},
		{"GET", "/admin/v1/tasks/bad!id", 400, "bad_id"},
		{"GET", "/admin/v1/tasks/" + strings.Repeat("a", 129), 400, "bad_id"},
		{"GET", "/admin/v1/tasks/0123456789abcdef0123456789abcdef", 404, "not_found"},
		{"POST", "/admin/v1/tasks/0123456789abcdef0123456789abcdef/cancel", 404, "not_found"},
		{"POST", "/admin/v1/tasks", 405, "method_not_allowed"},
		{"GET", "/admin/v1/tasks/x/cancel", 405, "method_not_allowed"},
		{"DELETE", "/admin/v1/tasks/x", 405, "method_not_allowed"},
		{"GET", "/admin/v1/reload", 405, "method_not_allowed"},
		{"GET", "/admin/v1/nothing", 404, "not_found"},
		{"GET", "/admin/nothing", 404, "not_found"},
	} {
		code, body := e.api(tc.method, tc.path)
		var ae apiError
		if err := json.Unmarshal(body, &ae); err != nil || code != tc.code || ae.Code != tc.kind || ae.Error == "" {
			t.Errorf("%s %s = %d %s, want %d with code %q", tc.method, tc.path, code, body, tc.code, tc.kind)
		}
	}
}

func TestGetAndCancel(t *testing.T) {
	e := newEnv(t)
	task := e.create(ownerB, "slow", "r9")
	code, body := e.api("GET", "/admin/v1/tasks/"+task.ID)
	var got Task
	if err := json.Unmarshal(body, &got); code != 200 || err != nil {
		t.Fatalf("get = %d %s", code, body)
	}
	want := Task{TaskID: task.ID, Status: "working", Tool: "slow", Owner: ownerB, CreatedAt: "2026-12-03T10:00:00.000Z",
		LastUpdatedAt: "2026-12-03T10:00:00.000Z", TTL: 3600000, Runner: "r9", Era: "2025-11-25"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("get (-want +got):\n%s", d)
	}
	code, body = e.api("POST", "/admin/v1/tasks/"+task.ID+"/cancel")
	if err := json.Unmarshal(body, &got); code != 200 || err != nil || got.Status != "cancelled" || got.StatusMessage != OperatorCancelMessage {
		t.Fatalf("cancel = %d %s, want the task cancelled by an operator", code, body)
	}
	stored, err := e.store.Get(context.Background(), ownerB, task.ID)
	if err != nil || stored.Status != taskstore.Cancelled || stored.StatusMessage != OperatorCancelMessage {
		t.Errorf("stored task after cancel = %+v, %v", stored, err)
	}
	if code, body = e.api("POST", "/admin/v1/tasks/"+task.ID+"/cancel"); code != 409 || !strings.Contains(string(body), `"code":"finished"`) {
		t.Errorf("second cancel = %d %s, want 409 finished", code, body)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, `"message":"task cancelled by an operator"`) || !strings.Contains(logs, `"token_fp":"`) {
		t.Errorf("no log line of the cancel with the token fingerprint:\n%s", logs)
	}
}

func TestStatsAndGauges(t *testing.T) {
	e := newEnv(t)
	e.create(ownerA, "slow", "r1")
	e.clk.add(time.Minute)
	e.create(ownerB, "slow", "r1")
	done := e.create(ownerB, "echo", "r1")
	if _, err := e.store.Finish(context.Background(), ownerB, done.ID, taskstore.Failed, "boom", taskstore.Outcome{Kind: taskstore.OutcomeInternal}); err != nil {
		t.Fatal(err)
	}
	e.clk.add(time.Minute - 3*time.Millisecond)
	code, body := e.api("GET", "/admin/v1/stats")
	var st Stats
	if err := json.Unmarshal(body, &st); code != 200 || err != nil {
		t.Fatalf("stats = %d %s", code, body)
	}
	want := Stats{Now: "2026-12-03T10:02:00.000Z", Total: 3,
		ByStatus: map[string]int{"working": 2, "input_required": 0, "completed": 0, "failed": 1, "cancelled": 0},
		Tools: []ToolStats{
			{Tool: "echo", ByStatus: map[string]int{"failed": 1}},
			{Tool: "slow", ByStatus: map[string]int{"working": 2}, OldestRunningCreatedAt: "2026-12-03T10:00:00.000Z", OldestRunningAgeSeconds: 120},
		}}
	if d := cmp.Diff(want, st); d != "" {
		t.Errorf("stats (-want +got):\n%s", d)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(e.store, e.clk.now, zerolog.Nop()))
	exp := `
# HELP taskgate_task_oldest_running_age_seconds Age of the oldest working or input_required task, by tool (tools past the 50 oldest are folded into "other"); absent when none runs.
# TYPE taskgate_task_oldest_running_age_seconds gauge
taskgate_task_oldest_running_age_seconds{tool="slow"} 120
# HELP taskgate_tasks Live (unexpired) tasks in the task store by status, across every replica sharing it.
# TYPE taskgate_tasks gauge
taskgate_tasks{status="cancelled"} 0
taskgate_tasks{status="completed"} 0
taskgate_tasks{status="failed"} 1
taskgate_tasks{status="input_required"} 0
taskgate_tasks{status="working"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "taskgate_tasks", "taskgate_task_oldest_running_age_seconds"); err != nil {
		t.Error(err)
	}
}

func TestReloadEndpoint(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		err  error
		code int
		body string
	}{
		{nil, 200, `{"reloaded":true}`},
		{errors.New("policy.yaml:3: bad timeout"), 422, `{"reloaded":false,"error":"policy.yaml:3: bad timeout; the previous policy stays","code":"bad_policy"}`},
		{fmt.Errorf("%w: no --config", ErrNothingToReload), 409, `{"reloaded":false,"error":"no policy file to reload: no --config","code":"nothing_to_reload"}`},
	} {
		e.reload = func() error { return tc.err }
		code, body := e.api("POST", "/admin/v1/reload")
		if code != tc.code || strings.TrimSpace(string(body)) != tc.body {
			t.Errorf("reload with %v = %d %s, want %d %s", tc.err, code, body, tc.code, tc.body)
		}
	}
	if code, _ := e.do("POST", "/admin/v1/reload", ""); code != 401 {
		t.Errorf("reload without a token = %d, want 401", code)
	}
}

// The dashboard is one self-contained page: no external script, style or
// font, and a CSP that forbids loading any.
func TestDashboardPage(t *testing.T) {
	e := newEnv(t)
	resp, err := http.Get(e.srv.URL + "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /admin/ = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("CSP = %q", csp)
	}
	for _, bad := range []string{"http://", "https://", "<script src", "<link", "@import", "innerHTML"} {
		if strings.Contains(string(body), bad) {
			t.Errorf("the dashboard contains %q", bad)
		}
	}
	resp, err = http.Get(e.srv.URL + "/admin")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/admin/" {
		t.Errorf("/admin led to %s, want a redirect to /admin/", resp.Request.URL.Path)
	}
}

// The oldest-task gauge names at most 50 tools (the oldest); the rest, and
// a tool literally named "other", share tool="other" with the oldest age
// among them, so a scrape never fails on a duplicate series.
func TestGaugeToolBound(t *testing.T) {
	e := newEnv(t)
	e.create(ownerA, "other", "r1") // the oldest of all
	for i := range maxToolSeries + 2 {
		e.create(ownerA, fmt.Sprintf("tool%02d", i), "r1")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(e.store, e.clk.now, zerolog.Nop()))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	series := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "taskgate_task_oldest_running_age_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			series[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if len(series) != maxToolSeries+1 {
		t.Errorf("%d tool series, want %d named and other", len(series), maxToolSeries)
	}
	// Created 1 ms apart: "other" is 53 ms old, tool50 and tool51 are folded.
	if got := series["other"]; got != 0.053 {
		t.Errorf("other = %v, want 0.053 (the folded tool named other)", got)
	}
	if _, ok := series["tool50"]; ok {
		t.Error("tool50 has its own series beyond the bound")
	}
	if got := series["tool00"]; got != 0.052 {
		t.Errorf("tool00 = %v, want 0.052", got)
	}
}
