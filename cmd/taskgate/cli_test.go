package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Bad flags and values exit 2 with a message naming the flag and, where a
// common slip explains it, the fix; --help goes to stdout and exits 0;
// --version and version print the version.
func TestCLIErrorsAndExitCodes(t *testing.T) {
	const up = "http://127.0.0.1:1/mcp"
	for _, tc := range []struct {
		name       string
		args       []string
		env        map[string]string
		code       int
		stdout     string // substring of stdout
		stderr     string // substring of stderr
		quietError bool   // nothing on stderr
	}{
		{name: "help", args: []string{"--help"}, code: 0, stdout: "--admin-listen  [TASKGATE_ADMIN_LISTEN]", quietError: true},
		{name: "-h", args: []string{"-h"}, code: 0, stdout: "Usage:", quietError: true},
		{name: "help names the admin default", args: []string{"--help"}, code: 0, stdout: "(default 127.0.0.1:8081)"},
		{name: "--version", args: []string{"--version"}, code: 0, stdout: "taskgate ", quietError: true},
		{name: "version", args: []string{"version"}, code: 0, stdout: "taskgate ", quietError: true},
		{name: "unknown flag", args: []string{"--upstream", up, "--bogus"}, code: 2, stderr: "flag provided but not defined: -bogus"},
		{name: "missing upstream", code: 2, stderr: "--upstream is required"},
		{name: "upstream without scheme", args: []string{"--upstream", "127.0.0.1:3000/mcp"}, code: 2,
			stderr: "did you mean http://127.0.0.1:3000/mcp?"},
		{name: "upstream ftp", args: []string{"--upstream", "ftp://h/mcp"}, code: 2, stderr: "scheme must be http or https"},
		{name: "redis without scheme", args: []string{"--upstream", up, "--redis", "localhost:6379"}, code: 2,
			stderr: "did you mean redis://localhost:6379?"},
		{name: "redis password not echoed", args: []string{"--upstream", up, "--redis", "u:s3cret@localhost:6379"}, code: 2,
			stderr: "redis://<redacted>@localhost:6379"},
		{name: "bad redis URL", args: []string{"--upstream", up, "--redis", "redis://h:1/?bogus_opt=1"}, code: 2, stderr: "--redis:"},
		{name: "redis scheme", args: []string{"--upstream", up, "--redis", "memcache://h:1"}, code: 2, stderr: "unsupported scheme"},
		{name: "listen without port", args: []string{"--upstream", up, "--listen", "8080"}, code: 2, stderr: "did you mean :8080?"},
		{name: "listen bad port", args: []string{"--upstream", up, "--listen", "127.0.0.1:http-alt"}, code: 2, stderr: "--listen"},
		{name: "admin listen bad", args: []string{"--upstream", up, "--admin-listen", "localhost"}, code: 2, stderr: "--admin-listen"},
		{name: "duration flag", args: []string{"--upstream", up, "--lease", "15"}, code: 2, stderr: "e.g. 30s, 5m or 1h30m"},
		{name: "duration env", args: []string{"--upstream", up}, env: map[string]string{"TASKGATE_STORE_TIMEOUT": "3"}, code: 2,
			stderr: "TASKGATE_STORE_TIMEOUT: \"3\" is not a duration: give a number with a unit, e.g. 30s, 5m or 1h30m"},
		{name: "int env", args: []string{"--upstream", up}, env: map[string]string{"TASKGATE_QUEUE_MAX": "4k"}, code: 2,
			stderr: "TASKGATE_QUEUE_MAX=\"4k\": not an integer"},
		{name: "size env", args: []string{"--upstream", up}, env: map[string]string{"TASKGATE_MAX_BODY_SIZE": "4XB"}, code: 2,
			stderr: "TASKGATE_MAX_BODY_SIZE: \"4XB\" is not a size: give bytes or a number with a unit, e.g. 4MiB, 512KiB or 65536"},
		{name: "unknown flag near a flag", args: []string{"--upstrem", up}, code: 2, stderr: "(did you mean --upstream?)"},
		{name: "bool env", args: []string{"--upstream", up}, env: map[string]string{"TASKGATE_REWRITE_HOST": "yes"}, code: 2,
			stderr: "TASKGATE_REWRITE_HOST=\"yes\": not true or false"},
		{name: "listen on an address not of this machine", args: []string{"--upstream", up, "--listen", "192.0.2.1:0", "--admin-listen", ""}, code: 2,
			stderr: "--listen 192.0.2.1:0"},
		{name: "admin listen on an address not of this machine", args: []string{"--upstream", up, "--listen", "127.0.0.1:0", "--admin-listen", "192.0.2.1:0"}, code: 2,
			stderr: "--admin-listen 192.0.2.1:0"},
		{name: "policy file missing", args: []string{"--upstream", up, "--config", "/nonexistent/policy.yaml", "--admin-listen", ""}, code: 2,
			stderr: "policy.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout.String(), tc.stdout)
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.stderr)
			}
			if tc.quietError && stderr.Len() > 0 {
				t.Errorf("stderr %q, want nothing", stderr.String())
			}
			if strings.Contains(stderr.String(), "s3cret") {
				t.Errorf("stderr %q echoes the password", stderr.String())
			}
		})
	}
}

// An upstream URL without a path is accepted with a warning saying what
// it means; one with a path is not warned about.
func TestUpstreamWithoutPathWarns(t *testing.T) {
	warn, err := checkUpstream("http://host:3000")
	if err != nil || !strings.Contains(warn, "has no path") || !strings.Contains(warn, "http://host:3000/mcp") {
		t.Errorf("checkUpstream(no path) = %q, %v; want a warning suggesting /mcp", warn, err)
	}
	for _, u := range []string{"http://host:3000/mcp", "http://host:3000/"} {
		if warn, err := checkUpstream(u); warn != "" || err != nil {
			t.Errorf("checkUpstream(%s) = %q, %v; want no warning", u, warn, err)
		}
	}
}

// The console format colours only a terminal.
func TestConsoleNoColourWhenNotTerminal(t *testing.T) {
	var buf bytes.Buffer
	o := &options{logLevel: "info", logFormat: "console"}
	l := newLogger(o, &buf, isTerminal(&buf))
	l.Warn().Str("k", "v").Msg("hello")
	if strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("console output to a buffer has colour codes: %q", buf.String())
	}
	buf.Reset()
	l = newLogger(o, &buf, true)
	l.Warn().Str("k", "v").Msg("hello")
	if !strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("console output for a terminal has no colour codes: %q", buf.String())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file counts as a terminal")
	}
}

// go-redis's own messages become JSON log lines.
func TestRedisLoggerIsStructured(t *testing.T) {
	var buf bytes.Buffer
	redisLogger{zerolog.New(&buf)}.Printf(t.Context(), "redis: connection pool: %s", "failed to dial")
	var line map[string]any
	if err := zerologJSON(buf.Bytes(), &line); err != nil || line["component"] != "go-redis" ||
		line["message"] != "redis: connection pool: failed to dial" {
		t.Errorf("go-redis message logged as %q (%v)", buf.String(), err)
	}
}

// taskgate healthcheck: 0 on HTTP 200 from the admin path, 1 otherwise,
// 2 on bad flags; 0.0.0.0 means loopback; TASKGATE_ADMIN_LISTEN is read.
func TestHealthcheckSubcommand(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		http.Error(w, "store: down", http.StatusServiceUnavailable)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
	}{
		{"healthz", []string{"--admin-listen", "127.0.0.1:" + port}, nil, 0},
		{"unspecified host", []string{"--admin-listen", "0.0.0.0:" + port}, nil, 0},
		{"from env", nil, map[string]string{"TASKGATE_ADMIN_LISTEN": ":" + port}, 0},
		{"flag over env", []string{"--admin-listen", "127.0.0.1:" + port}, map[string]string{"TASKGATE_ADMIN_LISTEN": "127.0.0.1:1"}, 0},
		{"not ready", []string{"--admin-listen", "127.0.0.1:" + port, "--path", "/readyz"}, nil, 1},
		{"nothing listening", []string{"--admin-listen", freePort(t)}, nil, 1},
		{"bad flag", []string{"--bogus"}, nil, 2},
		{"bad address", []string{"--admin-listen", "nowhere"}, nil, 2},
		{"disabled admin", nil, map[string]string{"TASKGATE_ADMIN_LISTEN": ""}, 1},
		{"help", []string{"--help"}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := healthcheck(tc.args, &stdout, &stderr, env(tc.env))
			if tc.name == "disabled admin" {
				// An empty variable means unset: the default address, where
				// nothing listens in this test (or something else does).
				if code == 2 {
					t.Errorf("exit 2 for an unset TASKGATE_ADMIN_LISTEN")
				}
				return
			}
			if code != tc.code {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", code, tc.code, stdout.String(), stderr.String())
			}
		})
	}
	var stderr bytes.Buffer
	if code := run([]string{"healthcheck", "--admin-listen", "127.0.0.1:" + port}, io.Discard, &stderr); code != 0 {
		t.Errorf("taskgate healthcheck through run: exit %d, %q", code, stderr.String())
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The log writer keeps every line at shutdown, in order, and never blocks
// a writer: with its output blocked, writes return and the excess is
// dropped and counted, then reported in the output.
func TestLogWriter(t *testing.T) {
	t.Run("flush at close", func(t *testing.T) {
		var out lockedBuffer
		w := newLogWriter(&out, 16)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 200 {
					fmt.Fprintf(w, "g%d line %d\n", g, i)
				}
			})
		}
		wg.Wait()
		_ = w.Close()
		fmt.Fprintf(w, "after close\n")
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		got := 0
		for _, l := range lines {
			if strings.HasPrefix(l, "g") {
				got++
			}
		}
		if got+int(w.Dropped()) != 800 {
			t.Errorf("%d lines written + %d dropped, want 800", got, w.Dropped())
		}
		if lines[len(lines)-1] != "after close" {
			t.Errorf("last line %q, want the line written after Close", lines[len(lines)-1])
		}
	})
	t.Run("blocked output", func(t *testing.T) {
		out := &blockingWriter{release: make(chan struct{})}
		w := newLogWriter(out, 4)
		done := make(chan struct{})
		go func() {
			for i := range 100 {
				fmt.Fprintf(w, "line %d\n", i)
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Write blocked on a blocked output")
		}
		if w.Dropped() == 0 {
			t.Error("nothing dropped with a blocked output and a queue of 4")
		}
		close(out.release)
		_ = w.Close()
		if !strings.Contains(out.String(), `"dropped_lines":`) {
			t.Errorf("the output does not report the dropped lines: %q", out.String())
		}
	})
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct {
	release chan struct{}
	lockedBuffer
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	<-b.release
	return b.lockedBuffer.Write(p)
}

func zerologJSON(b []byte, v any) error { return json.Unmarshal(bytes.TrimSpace(b), v) }

// The dropped-lines notice matches the log format.
func TestLogWriterDroppedNoticeFormat(t *testing.T) {
	for _, console := range []bool{false, true} {
		w := &logWriter{console: console}
		line := string(w.appendDropped(nil, 3))
		var v map[string]any
		isJSON := json.Unmarshal([]byte(line), &v) == nil
		if isJSON == console || !strings.Contains(line, "3") {
			t.Errorf("console=%v: notice %q (JSON: %v)", console, line, isJSON)
		}
	}
}

// A port in use is a failure of the moment (exit 1), not a bad value.
func TestListenInUseExits1(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var stderr bytes.Buffer
	if code := run([]string{"--upstream", "http://127.0.0.1:1/mcp", "--listen", l.Addr().String(), "--admin-listen", ""}, io.Discard, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "address already in use") {
		t.Errorf("--listen on a port in use: exit %d, %q; want 1 saying the address is in use", code, stderr.String())
	}
}

// Log lines carry their time with milliseconds, in JSON and console format.
func TestLogTimeMilliseconds(t *testing.T) {
	ms := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)`)
	for _, format := range []string{"json", "console"} {
		var buf bytes.Buffer
		l := newLogger(&options{logLevel: "info", logFormat: format}, &buf, false)
		l.Info().Msg("hello")
		if !ms.MatchString(buf.String()) {
			t.Errorf("%s log line %q: no time with milliseconds", format, buf.String())
		}
	}
}

// taskgate_build_info shows the version set with -ldflags -X main.version,
// not the module's "(devel)".
func TestBuildInfoVersion(t *testing.T) {
	old := version
	version = "v1.2.3-test"
	t.Cleanup(func() { version = old })
	reg := prometheus.NewRegistry()
	newMetrics(reg)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		if f.GetName() != "taskgate_build_info" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "version" {
					got = append(got, l.GetValue())
				}
			}
		}
	}
	if len(got) != 1 || got[0] != "v1.2.3-test" {
		t.Errorf("taskgate_build_info versions = %v, want [v1.2.3-test]", got)
	}
}
