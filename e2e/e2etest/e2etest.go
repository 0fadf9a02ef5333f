// Package e2etest runs the real processes of taskgate's end-to-end tests
// (packages e2e and e2e/interop): it builds taskgate and the demo servers
// once, starts child processes whose output reaches the test log when the
// test fails, finds free loopback ports, and polls a process until it is
// ready (its "listening on" line, an HTTP health check). Throwaway
// redis-servers come from taskstore/redistest.
//
// Everything here kills what it started in t.Cleanup and polls with
// backoff; nothing sleeps for synchronization.
package e2etest

import (
	"bytes"
	"errors"
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

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// Binaries are the paths of the programs the end-to-end tests run.
type Binaries struct {
	Taskgate  string // cmd/taskgate
	LegacyMCP string // cmd/legacy-mcp, the demo upstream without tasks
	MCPGoPeer string // cmd/mcpgo-peer, an mcp-go server
}

// BinDirEnv names a directory with prebuilt binaries (taskgate,
// legacy-mcp, mcpgo-peer): set, Build builds nothing and uses those (to
// test a release build, or to skip the build while iterating).
const BinDirEnv = "TASKGATE_E2E_BINDIR"

// Build builds the Binaries into a new temporary directory (with -race
// when race is set, so the children are checked too) and returns them
// with a function removing the directory; with BinDirEnv set it returns
// the binaries found there and a no-op. It is meant for TestMain, so it
// takes no testing.TB; go build's output goes to stderr.
func Build(race bool) (Binaries, func(), error) {
	if pre := os.Getenv(BinDirEnv); pre != "" {
		return binariesIn(pre), func() {}, nil
	}
	dir, err := os.MkdirTemp("", "taskgate-e2e-")
	if err != nil {
		return Binaries{}, nil, err
	}
	remove := func() { _ = os.RemoveAll(dir) }
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "github.com/taskgate/taskgate/cmd/taskgate", "github.com/taskgate/taskgate/cmd/legacy-mcp",
		"github.com/taskgate/taskgate/cmd/mcpgo-peer")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		remove()
		return Binaries{}, nil, fmt.Errorf("go build: %w", err)
	}
	return binariesIn(dir), remove, nil
}

func binariesIn(dir string) Binaries {
	return Binaries{
		Taskgate:  filepath.Join(dir, "taskgate"),
		LegacyMCP: filepath.Join(dir, "legacy-mcp"),
		MCPGoPeer: filepath.Join(dir, "mcpgo-peer"),
	}
}

// Proc is a started child process. Its combined output is kept (Output)
// and written to the test log when the test fails. Methods are safe for
// concurrent use.
type Proc struct {
	Name string
	Cmd  *exec.Cmd

	out     Buffer
	exited  chan struct{}
	state   *os.ProcessState // set before exited is closed
	checks  []func(out string) string
	logTail int
	always  bool
}

// Option adjusts Start.
type Option func(*Proc)

// CheckOutput runs check on the process's whole output after it was killed
// in t.Cleanup; a non-empty answer fails the test with it.
func CheckOutput(check func(out string) string) Option {
	return func(p *Proc) { p.checks = append(p.checks, check) }
}

// RaceOrPanic is a CheckOutput check for Go children built with -race: a
// data race report or a panic in the output fails the test.
func RaceOrPanic(out string) string {
	if strings.Contains(out, "WARNING: DATA RACE") || strings.Contains(out, "panic:") {
		return "reported a data race or a panic"
	}
	return ""
}

// LogTail makes a failed test log only the last n bytes of the output
// (default: all of it).
func LogTail(n int) Option { return func(p *Proc) { p.logTail = n } }

// AlwaysLog makes the output go to the test log even when the test passed
// (for reading a passing run's traffic, e.g. INTEROP_LOGS=1).
func AlwaysLog(on bool) Option { return func(p *Proc) { p.always = on } }

// Start starts cmd, with stdout and stderr captured, and registers in
// t.Cleanup: kill it and wait for it, run the CheckOutput checks, and when
// the test failed log its command line and output. A failed start fails
// the test.
func Start(t testing.TB, name string, cmd *exec.Cmd, opts ...Option) *Proc {
	t.Helper()
	p := &Proc{Name: name, Cmd: cmd, exited: make(chan struct{})}
	for _, o := range opts {
		o(p)
	}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Kill()
		out := p.out.String()
		for _, check := range p.checks {
			if msg := check(out); msg != "" {
				t.Errorf("%s %s", name, msg)
			}
		}
		if t.Failed() || p.always {
			if p.logTail > 0 {
				out = Tail(out, p.logTail)
			}
			t.Logf("---- output of %s (%s) ----\n%s", name, strings.Join(cmd.Args, " "), out)
		}
	})
	return p
}

// Output returns what the process wrote to stdout and stderr so far.
func (p *Proc) Output() string { return p.out.String() }

// Kill kills the process and waits until it is gone.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.exited
}

// Signal sends sig (e.g. SIGTERM) to the process.
func (p *Proc) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("sending %v to %s: %v", sig, p.Name, err)
	}
}

// WaitExit waits up to timeout for the process to exit and returns its
// state; ok is false when it still runs.
func (p *Proc) WaitExit(timeout time.Duration) (state *os.ProcessState, ok bool) {
	select {
	case <-p.exited:
		return p.state, true
	case <-time.After(timeout):
		return nil, false
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Buffer collects output written by exec's copying goroutines. The zero
// value is ready; it is safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Tail returns the last n bytes of s, marked with "…" when cut.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// FreeAddr returns a loopback address ("127.0.0.1:port") that was free a
// moment ago. Another process may take it before the caller binds it:
// start through StartRetrying.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// StartRetrying calls start, which starts a process on fresh ports and
// waits until it is ready, until it succeeds; a start that failed because
// a port was taken meanwhile ("address already in use" in the error) is
// retried, up to five times. Any other failure fails the test.
func StartRetrying(t testing.TB, start func() (*Proc, error)) *Proc {
	t.Helper()
	var last error
	for range 5 {
		p, err := start()
		if err == nil {
			return p
		}
		last = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatal(last)
	return nil
}

// PollUntil calls cond with backoff (5 ms doubling up to 100 ms) until it
// returns true or an error, or timeout passes.
func PollUntil(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met within %v", timeout)
		}
		time.Sleep(backoff) // polling interval, not synchronization
	}
}

// ErrExited is wrapped by the Wait functions when the process exited
// before it was ready; the error then carries the tail of its output
// (where "address already in use" shows a port taken meanwhile).
var ErrExited = errors.New("exited early")

func exited(p *Proc) error {
	return fmt.Errorf("%s %w: %s", p.Name, ErrExited, Tail(p.Output(), 4000))
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

// WaitListening waits up to timeout for p to print "listening on URL" (as
// legacy-mcp, mcpgo-peer and the interop servers do once they accept
// connections) and returns that URL.
func WaitListening(p *Proc, timeout time.Duration) (string, error) {
	var url string
	err := PollUntil(timeout, func() (bool, error) {
		if m := listeningRE.FindStringSubmatch(p.Output()); m != nil {
			url = m[1]
			return true, nil
		}
		if p.Exited() {
			return false, exited(p)
		}
		return false, nil
	})
	return url, err
}

// WaitReady waits up to timeout until ready reports p up, failing early
// when p exits.
func WaitReady(p *Proc, timeout time.Duration, ready func() bool) error {
	return PollUntil(timeout, func() (bool, error) {
		if p.Exited() {
			return false, exited(p)
		}
		return ready(), nil
	})
}

// HTTPOK reports whether a GET of url answers 200.
func HTTPOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// StartRedis starts redis-server with args, which must make it listen on
// addr (a fixed address, so that a test can stop and restart the same
// server; redistest.Start is simpler when any port does), and waits up to
// 10 s until it answers PING there: +PONG, or -NOAUTH when args set a
// password. It skips the test when redis-server is not on PATH and fails
// it when the server exits first.
func StartRedis(t testing.TB, addr string, args []string, opts ...Option) *Proc {
	t.Helper()
	bin := redistest.Need(t, "redis-server")
	p := Start(t, "redis-server", exec.Command(bin, args...), opts...)
	err := WaitReady(p, 10*time.Second, func() bool {
		reply, err := redistest.Command(addr, "PING")
		return err == nil && (strings.HasPrefix(reply, "+PONG") || strings.HasPrefix(reply, "-NOAUTH"))
	})
	if err != nil {
		t.Fatalf("redis-server on %s: %v", addr, err)
	}
	return p
}
