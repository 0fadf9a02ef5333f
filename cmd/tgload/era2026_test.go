package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseEras(t *testing.T) {
	c, err := parseFlags([]string{"--era", "2025,2026-07-28", "--compare", "tg=http://h/mcp"}, discard{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.eras, []string{era2025, era2026}) || c.era != era2025 {
		t.Errorf("eras %q, era %q", c.eras, c.era)
	}
	// One endpoint in two eras: two targets, named by era, in --era order.
	want := []compareTarget{{"tg/2025", "http://h/mcp", era2025}, {"tg/2026", "http://h/mcp", era2026}}
	if !slices.Equal(c.compare, want) {
		t.Errorf("targets %+v, want %+v", c.compare, want)
	}
	for _, bad := range [][]string{{"--era", "2024"}, {"--era", "2026,2026"}, {"--era", ""},
		{"--era", "2026", "--mode", "mixed"}, {"--compare", "tg=http://h/mcp"}, {"--poll-interval", "-1s"}} {
		if _, err := parseFlags(bad, discard{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestErasThroughTaskgate runs the task path of both wires side by side
// (--compare with one endpoint and --era 2025,2026) through the taskgate
// binary, built here, in front of an MCP server without tasks. The 2026 run
// must have used that wire's tasks: every create answered with a
// CreateTaskResult (resultType "task") or the result inline, every poll a
// tasks/get whose result is inline once completed; each answer's shape is
// checked, so a run on the wrong wire shows as errors.
func TestErasThroughTaskgate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds taskgate")
	}
	// The tool takes 100 ms, far longer than the 1 ms promote window, so
	// 2026 calls become tasks and are polled.
	upstream := echoServer(t, 100*time.Millisecond)
	tg := startTaskgate(t, "--upstream", upstream, "--promote-window", "1ms", "--task-rate", "-1", "--max-tasks-per-owner", "-1")

	cfg, err := parseFlags([]string{"--compare", "tg=" + tg, "--era", "2025,2026", "--mode", "create-result",
		"--rounds", "2", "--duration", "500ms", "--warmup", "100ms", "-c", "2", "--poll-interval", "10ms"}, discard{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := runCompare(cfg, "create-result", make(chan struct{}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Targets) != 2 || s.Targets[0].Name != "tg/2025" || s.Targets[1].Name != "tg/2026" {
		t.Fatalf("targets %+v", s.Targets)
	}
	for _, ts := range s.Targets {
		if ts.Errors != 0 || ts.RPS == 0 {
			t.Errorf("%s: %d errors, %.1f/s", ts.Name, ts.Errors, ts.RPS)
		}
	}
	for r, round := range s.Runs {
		old, modern := round[0], round[1]
		if old.Era != "" || modern.Era != era2026 {
			t.Errorf("round %d: eras %q and %q", r, old.Era, modern.Era)
		}
		if old.Ops["result"].N == 0 || old.Ops["get"].N != 0 {
			t.Errorf("round %d, 2025: ops %+v, want creates and blocking results", r, old.Ops)
		}
		// Every iteration that got a task polled it at least once, and
		// calls 100 times longer than the promote window got tasks.
		if tasks := modern.Ops["create"].N - modern.Inline; modern.Ops["result"].N != 0 || tasks == 0 || modern.Ops["get"].N < tasks {
			t.Errorf("round %d, 2026: ops %+v with %d answered inline, want creates and polls", r, modern.Ops, modern.Inline)
		}
		if modern.LastError != "" {
			t.Errorf("round %d, 2026: %s", r, modern.LastError)
		}
	}
}

// startTaskgate builds cmd/taskgate, starts it on a free loopback port with
// the embedded store and args, and returns its MCP endpoint.
func startTaskgate(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "taskgate")
	build := exec.Command("go", "build", "-o", bin, "github.com/taskgate/taskgate/cmd/taskgate")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "", "--log-level", "info"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	// The start-up line names the address; the rest of the log is read
	// (and dropped) so taskgate never blocks on a full pipe.
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Message, Listen string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "taskgate listening" {
				addr <- line.Listen
			}
		}
		close(addr)
	}()
	a, ok := <-addr
	if !ok || !strings.HasPrefix(a, "127.0.0.1:") {
		t.Fatalf("taskgate did not start (listen %q)", a)
	}
	return "http://" + a + "/mcp"
}
