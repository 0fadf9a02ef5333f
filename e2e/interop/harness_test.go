package interop

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/e2e/e2etest"
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
	bins, remove, err := e2etest.Build(false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
	taskgateBin, legacyMCPBin, mcpgoPeerBin = bins.Taskgate, bins.LegacyMCP, bins.MCPGoPeer
	code := m.Run()
	remove()
	os.Exit(code)
}

// startProc starts cmd and kills it in t.Cleanup; when the test failed,
// the last 6000 bytes of its output go to the test log.
func startProc(t testing.TB, name string, cmd *exec.Cmd) *e2etest.Proc {
	t.Helper()
	return e2etest.Start(t, name, cmd, e2etest.LogTail(6000), e2etest.AlwaysLog(os.Getenv("INTEROP_LOGS") == "1"))
}

// startHTTPServer starts an MCP server that prints "listening on URL" once
// it accepts connections (legacy-mcp, mcpgo-peer, tsv2-server.mjs with
// --listen 127.0.0.1:0) and returns that URL.
func startHTTPServer(t testing.TB, name string, cmd *exec.Cmd) string {
	t.Helper()
	p := startProc(t, name, cmd)
	url, err := e2etest.WaitListening(p, 60*time.Second)
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
	var listen string
	e2etest.StartRetrying(t, func() (*e2etest.Proc, error) {
		var admin string
		listen, admin = e2etest.FreeAddr(t), e2etest.FreeAddr(t)
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
		err := e2etest.WaitReady(p, 30*time.Second, func() bool { return e2etest.HTTPOK("http://" + admin + "/healthz") })
		if err != nil {
			p.Kill() // a port taken meanwhile: StartRetrying tries others
		}
		return p, err
	})
	return "http://" + listen + "/mcp"
}
