package interop

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binaries built once by TestMain, and the npm project's directory.
var (
	taskgateBin  string
	legacyMCPBin string
	mcpgoPeerBin string
	npmDir       string // testdata: package.json, the drivers, node_modules after npm ci
	nodeMissing  string // why the JavaScript parts cannot run, or ""
)

// TestMain builds taskgate and the two Go demo servers, and checks that
// node and the npm project's packages are installed.
func TestMain(m *testing.M) {
	var err error
	npmDir, err = filepath.Abs("testdata")
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
	if _, err := exec.LookPath("node"); err != nil {
		nodeMissing = "node is not installed"
	} else if _, err := os.Stat(filepath.Join(npmDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		nodeMissing = "the npm project is not installed: run npm ci in e2e/interop/testdata"
	}
	dir, err := os.MkdirTemp("", "taskgate-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
	// TASKGATE_E2E_BINDIR names a directory with prebuilt binaries (to test
	// a release build, or to skip the build while iterating).
	if pre := os.Getenv("TASKGATE_E2E_BINDIR"); pre != "" {
		taskgateBin, legacyMCPBin, mcpgoPeerBin = filepath.Join(pre, "taskgate"), filepath.Join(pre, "legacy-mcp"), filepath.Join(pre, "mcpgo-peer")
	} else {
		taskgateBin, legacyMCPBin, mcpgoPeerBin = filepath.Join(dir, "taskgate"), filepath.Join(dir, "legacy-mcp"), filepath.Join(dir, "mcpgo-peer")
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
			"github.com/taskgate/taskgate/cmd/taskgate", "github.com/taskgate/taskgate/cmd/legacy-mcp",
			"github.com/taskgate/taskgate/cmd/mcpgo-peer")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "interop: go build:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a child process whose combined output is kept for the test log.
type proc struct {
	cmd    *exec.Cmd
	out    syncBuffer
	exited chan struct{}
}

// startProc starts cmd and kills it in t.Cleanup; when the test failed, its
// output goes to the test log.
func startProc(t testing.TB, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() || os.Getenv("INTEROP_LOGS") == "1" {
			t.Logf("---- output of %s (%s) ----\n%s", name, strings.Join(cmd.Args, " "), tail(p.out.String(), 6000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// pollUntil calls cond every 20 ms until it is true, fails, or timeout passes.
func pollUntil(timeout time.Duration, cond func() (bool, error)) error {
	end := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("not reached within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

// startHTTPServer starts an MCP server that prints "listening on URL" once
// it accepts connections (legacy-mcp, mcpgo-peer, tsv2-server.mjs with
// --listen 127.0.0.1:0) and returns that URL.
func startHTTPServer(t testing.TB, name string, cmd *exec.Cmd) string {
	t.Helper()
	p := startProc(t, name, cmd)
	var url string
	err := pollUntil(60*time.Second, func() (bool, error) {
		if m := listeningRE.FindStringSubmatch(p.out.String()); m != nil {
			url = m[1]
			return true, nil
		}
		if p.hasExited() {
			return false, fmt.Errorf("%s exited: %s", name, p.out.String())
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s did not start: %v", name, err)
	}
	return url
}

// startTaskgate starts taskgate (embedded store) in front of the upstream:
// a URL, or a stdio command line with its environment. It returns the
// client endpoint once /healthz answers. --promote-window 1ns: a 2026 task
// call is always answered with its task, never with an early plain result,
// so the task checks take the task path however fast the machine is.
func startTaskgate(t testing.TB, up target, policy string) string {
	t.Helper()
	var config string
	if policy != "" {
		config = filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(config, []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		listen, admin := freeAddr(t), freeAddr(t)
		args := []string{"--listen", listen, "--admin-listen", admin, "--log-level", "info", "--promote-window", "1ns"}
		if config != "" {
			args = append(args, "--config", config)
		}
		if up.URL != "" {
			args = append(args, "--upstream", up.URL)
		} else {
			args = append(args, "--upstream-command", strings.Join(append([]string{up.Command}, up.Args...), " "))
			for k, v := range up.Env {
				args = append(args, "--upstream-env", k+"="+v)
			}
		}
		p := startProc(t, "taskgate", exec.Command(taskgateBin, args...))
		last = pollUntil(30*time.Second, func() (bool, error) {
			if p.hasExited() {
				return false, fmt.Errorf("taskgate exited: %s", tail(p.out.String(), 2000))
			}
			resp, err := http.Get("http://" + admin + "/healthz")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
		if last == nil {
			return "http://" + listen + "/mcp"
		}
		_ = p.cmd.Process.Kill() // a port taken meanwhile: try others
	}
	t.Fatalf("taskgate did not start: %v", last)
	return ""
}
