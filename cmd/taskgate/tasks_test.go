package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy/admin"
	"github.com/taskgate/taskgate/taskstore"
)

// adminFixture is the admin API on a real embedded store, served on
// loopback, with a token file.
type adminFixture struct {
	store     *taskstore.Embedded
	addr      string // host:port
	tokenFile string
	closeAll  func()
}

func newAdminFixture(t *testing.T) *adminFixture {
	t.Helper()
	return newAdminFixtureReload(t, nil)
}

// newAdminFixtureReload is newAdminFixture whose policy reload is reload.
func newAdminFixtureReload(t *testing.T, reload func() error) *adminFixture {
	t.Helper()
	st, closeStore, err := taskstore.NewEmbedded(taskstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("cli-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := admin.New(admin.Config{TokenFile: tok, Store: st,
		Cancel: func(ctx context.Context, owner, id, msg string) (*taskstore.Task, error) {
			return st.Cancel(ctx, owner, id, msg)
		}, Reload: reload}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	f := &adminFixture{store: st, addr: strings.TrimPrefix(srv.URL, "http://"), tokenFile: tok}
	f.closeAll = func() { srv.Close(); closeStore() }
	t.Cleanup(f.closeAll)
	return f
}

func (f *adminFixture) create(t *testing.T, owner, tool string) *taskstore.Task {
	t.Helper()
	task := &taskstore.Task{Owner: owner, Tool: tool, Runner: "replica-1", TTL: time.Hour, Era: "2026-07-28"}
	if err := f.store.Create(context.Background(), task, taskstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return task
}

// runTasks runs `taskgate tasks args...` as the command line does.
func runTasks(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(append([]string{"tasks"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestTasksCLI(t *testing.T) {
	f := newAdminFixture(t)
	a := f.create(t, "owner-a-hash", "slow")
	b := f.create(t, "owner-b-hash", "echo")
	env := map[string]string{"TASKGATE_ADMIN_LISTEN": f.addr, "TASKGATE_ADMIN_TOKEN_FILE": f.tokenFile}
	getenv := func(k string) string { return env[k] }
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := tasksCommand(args, &out, &errb, getenv)
		return code, out.String(), errb.String()
	}

	// list: a table with both owners' tasks; filters reach the API.
	code, out, errOut := cli("list")
	if code != 0 || !strings.Contains(out, "TASK") || !strings.Contains(out, a.ID) || !strings.Contains(out, b.ID) {
		t.Errorf("tasks list = %d\n%s%s", code, out, errOut)
	}
	code, out, _ = cli("list", "--tool", "echo", "--status", "working,input_required")
	if code != 0 || strings.Contains(out, a.ID) || !strings.Contains(out, b.ID) {
		t.Errorf("tasks list --tool echo = %d\n%s", code, out)
	}
	code, out, errOut = cli("list", "--older-than", "1h")
	if code != 0 || strings.Contains(out, a.ID) || !strings.Contains(errOut, "no task matches") {
		t.Errorf("tasks list --older-than 1h = %d\n%s%s", code, out, errOut)
	}
	// --json is the API's answer.
	code, out, _ = cli("list", "--json", "--limit", "1")
	var page admin.TaskList
	if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil || len(page.Tasks) != 1 || page.NextCursor == "" {
		t.Errorf("tasks list --json --limit 1 = %d %q (%v)", code, out, err)
	}
	code, out, _ = cli("list", "--json", "--cursor", page.NextCursor)
	var page2 admin.TaskList
	if err := json.Unmarshal([]byte(out), &page2); code != 0 || err != nil || len(page2.Tasks) != 1 || page2.Tasks[0].TaskID == page.Tasks[0].TaskID {
		t.Errorf("tasks list --cursor = %d %q (%v)", code, out, err)
	}

	// get, flags after the id too.
	code, out, _ = cli("get", a.ID)
	if code != 0 || !strings.Contains(out, "status:") || !strings.Contains(out, "owner-a-hash") || !strings.Contains(out, "2026-07-28") {
		t.Errorf("tasks get = %d\n%s", code, out)
	}
	code, out, _ = cli("get", a.ID, "--json")
	var got admin.Task
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.TaskID != a.ID || got.Status != "working" {
		t.Errorf("tasks get --json = %d %q (%v)", code, out, err)
	}

	// cancel, then again: refused.
	code, out, _ = cli("cancel", a.ID)
	if code != 0 || !strings.Contains(out, "cancelled: "+admin.OperatorCancelMessage) {
		t.Errorf("tasks cancel = %d %q", code, out)
	}
	if st, _ := f.store.Get(context.Background(), "owner-a-hash", a.ID); st.Status != taskstore.Cancelled {
		t.Errorf("after tasks cancel the task is %s", st.Status)
	}
	code, _, errOut = cli("cancel", a.ID)
	if code != tasksRefused || !strings.Contains(errOut, "already finished") || !strings.Contains(errOut, "HTTP 409") {
		t.Errorf("second tasks cancel = %d %q, want 1 already finished", code, errOut)
	}

	// Flags win over the variables.
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-it"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadAddr := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"unknown id", []string{"get", "0123456789abcdef0123456789abcdef"}, tasksRefused, "no such task"},
		{"bad id", []string{"get", "bad!id"}, tasksRefused, "not a task id"},
		{"wrong token", []string{"list", "--admin-token-file", wrong}, tasksRefused, "HTTP 401"},
		{"bad status", []string{"list", "--status", "running"}, tasksRefused, "status \"running\""},
		{"no subcommand", nil, tasksUsage, "Usage:"},
		{"unknown subcommand", []string{"kill"}, tasksUsage, "unknown subcommand \"kill\""},
		{"get without id", []string{"get"}, tasksUsage, "takes one task id"},
		{"cancel two ids", []string{"cancel", "a", "b"}, tasksUsage, "takes one task id"},
		{"list with an argument", []string{"list", "x"}, tasksUsage, "unexpected argument"},
		{"unknown flag", []string{"list", "--bogus"}, tasksUsage, "-bogus"},
		{"list flag on get", []string{"get", "x", "--tool", "t"}, tasksUsage, "-tool"},
		{"bad duration", []string{"list", "--older-than", "5"}, tasksUsage, "not a duration"},
		{"missing token file", []string{"list", "--admin-token-file", "/nonexistent/token"}, tasksUsage, "--admin-token-file"},
		{"bad address", []string{"list", "--admin-listen", "8081"}, tasksUsage, "did you mean :8081?"},
		{"nobody listening", []string{"list", "--admin-listen", deadAddr}, tasksUnreachable, "cannot reach the admin server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := cli(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("taskgate tasks %v = %d %q, want %d and %q", tc.args, code, errOut, tc.code, tc.stderr)
			}
		})
	}

	// Without a token variable or flag: usage.
	var out2, err2 bytes.Buffer
	if code := tasksCommand([]string{"list"}, &out2, &err2, func(k string) string {
		if k == "TASKGATE_ADMIN_LISTEN" {
			return f.addr
		}
		return ""
	}); code != tasksUsage || !strings.Contains(err2.String(), "no token") {
		t.Errorf("tasks list without a token = %d %q", code, err2.String())
	}

	// The store down: 503, exit 3.
	_ = f.store.Close()
	if code, _, errOut := cli("list"); code != tasksUnreachable || !strings.Contains(errOut, "HTTP 503") {
		t.Errorf("tasks list with the store closed = %d %q, want 3 and HTTP 503", code, errOut)
	}
}

// `taskgate tasks --help` prints the usage with the exit codes on stdout.
func TestTasksHelp(t *testing.T) {
	code, out, _ := runTasks("--help")
	if code != 0 || !strings.Contains(out, "Exit status: 0 done; 1 refused") || !strings.Contains(out, "-older-than") {
		t.Errorf("taskgate tasks --help = %d\n%s", code, out)
	}
}

// `taskgate reload` asks the admin API to reload the policy: 0 when it
// did, 1 with the reason when the file was refused or there is none.
func TestReloadCLI(t *testing.T) {
	var result error
	f := newAdminFixtureReload(t, func() error { return result })
	getenv := func(k string) string {
		return map[string]string{"TASKGATE_ADMIN_LISTEN": f.addr, "TASKGATE_ADMIN_TOKEN_FILE": f.tokenFile}[k]
	}
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := reloadCommand(args, &out, &errb, getenv)
		return code, out.String(), errb.String()
	}
	if code, out, errOut := cli(); code != 0 || !strings.Contains(out, "policy reloaded") {
		t.Errorf("taskgate reload = %d %q %q", code, out, errOut)
	}
	if code, out, _ := cli("--json"); code != 0 || strings.TrimSpace(out) != `{"reloaded":true}` {
		t.Errorf("taskgate reload --json = %d %q", code, out)
	}
	result = errors.New("policy.yaml:2: taskSupport \"sometimes\"")
	if code, _, errOut := cli(); code != tasksRefused || !strings.Contains(errOut, "taskgate reload: policy.yaml:2") || !strings.Contains(errOut, "HTTP 422") {
		t.Errorf("taskgate reload of a bad file = %d %q, want 1 naming the file", code, errOut)
	}
	if code, _, errOut := cli("extra"); code != tasksUsage || !strings.Contains(errOut, "taskgate reload: unexpected argument") {
		t.Errorf("taskgate reload extra = %d %q, want 2", code, errOut)
	}
	var out bytes.Buffer
	if code := run([]string{"reload", "--help"}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), "Usage: taskgate reload") {
		t.Errorf("taskgate reload --help = %d %q", code, out.String())
	}
}
