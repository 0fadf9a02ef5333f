// Package redistest starts throwaway redis-server processes for tests.
//
// Servers listen on 127.0.0.1 on a free port, keep nothing on disk
// (--save "" --appendonly no, working directory t.TempDir()) and are killed
// in t.Cleanup. They never touch a shared Redis on 6379.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Start spawns a standalone redis-server and returns its "127.0.0.1:port"
// address once it answers PING. It skips the test when redis-server is not
// on PATH.
func Start(t testing.TB) (addr string) {
	t.Helper()
	bin := lookPath(t, "redis-server")
	return spawn(t, bin)
}

// URL returns a redis:// URL for a test: a server spawned by Start when
// redis-server is on PATH, else $REDIS_URL (a shared server: use unique key
// prefixes), else it skips the test.
func URL(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err == nil {
		return "redis://" + Start(t)
	}
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	t.Skip("redis-server not on PATH and REDIS_URL unset")
	return ""
}

// StartCluster spawns three cluster-enabled redis-server masters, joins
// them with redis-cli --cluster create (no replicas) and returns their
// addresses once CLUSTER INFO reports cluster_state:ok on every node. It
// skips the test when redis-server or redis-cli is not on PATH.
func StartCluster(t testing.TB) []string {
	t.Helper()
	bin := lookPath(t, "redis-server")
	cli := lookPath(t, "redis-cli")
	addrs := make([]string, 3)
	for i := range addrs {
		addrs[i] = spawn(t, bin, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		waitFor(t, a, "CLUSTER INFO", func(reply string) bool {
			return strings.Contains(reply, "cluster_state:ok")
		})
	}
	return addrs
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	return Need(t, name)
}

// skipped lists the tests skipped because a program was missing, by
// program, for Report.
var skipped struct {
	mu    sync.Mutex
	tests map[string][]string
}

// Need returns the path of the program name (e.g. "redis-server"), or
// skips the test when it is not on PATH, recording the skip for Report.
func Need(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		skipped.mu.Lock()
		if skipped.tests == nil {
			skipped.tests = map[string][]string{}
		}
		skipped.tests[name] = append(skipped.tests[name], t.Name())
		skipped.mu.Unlock()
		t.Skipf("redistest: %s not on PATH", name)
	}
	return p
}

// ttyPath is where Report also writes (tests clear it).
var ttyPath = "/dev/tty"

// Report writes one banner naming the tests Need skipped, if any, to w
// and to the terminal (/dev/tty) when there is one: go test shows a passing
// package's output only with -v, and a skipped store or end-to-end suite
// must not pass unnoticed. Call it from TestMain after m.Run.
func Report(w io.Writer) {
	skipped.mu.Lock()
	defer skipped.mu.Unlock()
	if len(skipped.tests) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("\n==================== TESTS SKIPPED ====================\n")
	for prog, tests := range skipped.tests {
		fmt.Fprintf(&b, "%s is not on PATH: %d tests skipped (install it, e.g. apt-get install redis-server):\n  %s\n",
			prog, len(tests), strings.Join(tests, "\n  "))
	}
	b.WriteString("=======================================================\n")
	_, _ = io.WriteString(w, b.String())
	if tty, err := os.OpenFile(ttyPath, os.O_WRONLY, 0); ttyPath != "" && err == nil {
		_, _ = io.WriteString(tty, b.String())
		tty.Close()
	}
}

// spawn starts bin on a free port, retrying when another process grabbed
// the port between our probe and the server's bind.
func spawn(t testing.TB, bin string, extra ...string) string {
	t.Helper()
	var lastErr error
	for range 5 {
		addr, err := trySpawn(t, bin, extra)
		if err == nil {
			return addr
		}
		lastErr = err
	}
	t.Fatalf("redistest: start %s: %v", bin, lastErr)
	return ""
}

func trySpawn(t testing.TB, bin string, extra []string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(t.TempDir(), strconv.Itoa(port))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	kill := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(startTimeout)
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		if reply, err := Command(addr, "PING"); err == nil && strings.Contains(reply, "PONG") {
			break
		}
		select {
		case <-exited:
			return "", fmt.Errorf("redis-server exited early:\n%s", out.String())
		case <-time.After(backoff):
		}
		if time.Now().After(deadline) {
			kill()
			return "", fmt.Errorf("redis-server on %s did not answer PING within %v:\n%s", addr, startTimeout, out.String())
		}
	}
	t.Cleanup(kill)
	return addr, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls cmd on addr until ok accepts the reply.
func waitFor(t testing.TB, addr, cmd string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	var last string
	for backoff := 5 * time.Millisecond; time.Now().Before(deadline); backoff = min(2*backoff, 100*time.Millisecond) {
		reply, err := Command(addr, cmd)
		if err == nil && ok(reply) {
			return
		}
		last = fmt.Sprint(reply, err)
		time.Sleep(backoff)
	}
	t.Fatalf("redistest: %s on %s: no success within %v, last: %s", cmd, addr, startTimeout, last)
}

// Command sends cmd as one inline command to the Redis at addr and returns
// the reply: a simple string, error or integer line as sent ("+PONG\r\n"),
// or the payload of one bulk string followed by "\r\n" ("$-1\r\n" for
// nil). Each call dials anew; it is meant for readiness checks and
// inspecting a server in tests.
func Command(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(line, "$") {
		return line, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 {
		return line, err
	}
	body := make([]byte, n+2)
	_, err = io.ReadFull(r, body)
	return string(body), err
}

// syncBuffer collects server output written by exec's copy goroutine.
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
