package main

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --procs defaults to 1, yields to a GOMAXPROCS variable unless given
// itself, and 0 keeps Go's choice.
func TestProcsFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want int
	}{
		{"default", nil, nil, 1},
		{"flag", []string{"--procs", "3"}, nil, 3},
		{"flag zero keeps Go's choice", []string{"--procs", "0"}, nil, 0},
		{"TASKGATE_PROCS", nil, map[string]string{"TASKGATE_PROCS": "2"}, 2},
		{"GOMAXPROCS without flag", nil, map[string]string{"GOMAXPROCS": "4"}, 0},
		{"flag over GOMAXPROCS", []string{"--procs", "2"}, map[string]string{"GOMAXPROCS": "4"}, 2},
		{"TASKGATE_PROCS over GOMAXPROCS", nil, map[string]string{"TASKGATE_PROCS": "1", "GOMAXPROCS": "4"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			o, err := parseArgs(append([]string{"--upstream", "http://127.0.0.1:1/mcp"}, tc.args...), io.Discard, getenv)
			if err != nil {
				t.Fatalf("parseArgs: %v", err)
			}
			if got := procsFor(o, getenv); got != tc.want {
				t.Errorf("procsFor = %d, want %d", got, tc.want)
			}
		})
	}
	if _, err := parseArgs([]string{"--upstream", "http://127.0.0.1:1/mcp", "--procs", "-1"}, io.Discard,
		func(string) string { return "" }); err == nil {
		t.Error("--procs -1 accepted")
	}
}

// --upstream-ca: a PEM file whose certificates become the upstream's only
// trusted roots; a missing file, a file without certificates and an http
// upstream are errors that name the flag.
func TestUpstreamCA(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	good := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := upstreamTLS(good)
	if err != nil || cfg == nil || cfg.RootCAs == nil {
		t.Fatalf("upstreamTLS(good) = %+v, %v", cfg, err)
	}
	// The pool trusts the server's certificate.
	if _, err := srv.Certificate().Verify(x509.VerifyOptions{Roots: cfg.RootCAs}); err != nil {
		t.Errorf("the loaded pool does not verify the certificate: %v", err)
	}
	if cfg, err := upstreamTLS(""); cfg != nil || err != nil {
		t.Errorf("upstreamTLS(\"\") = %+v, %v; want nil, nil (system roots)", cfg, err)
	}
	for _, f := range []string{bad, filepath.Join(dir, "missing.pem")} {
		if _, err := upstreamTLS(f); err == nil || !strings.Contains(err.Error(), "--upstream-ca") {
			t.Errorf("upstreamTLS(%s) = %v; want an error naming --upstream-ca", f, err)
		}
	}
	var stderr strings.Builder
	if code := run([]string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-ca", good}, io.Discard, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "--upstream-ca: the --upstream is not https") {
		t.Errorf("--upstream-ca with an http upstream: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"--upstream", "https://127.0.0.1:1/mcp", "--upstream-ca", bad, "--admin-listen", ""}, io.Discard, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "no PEM certificate") {
		t.Errorf("--upstream-ca without certificates: exit %d, %q", code, stderr.String())
	}
}

// The stdio flags: --upstream-command excludes --upstream, its companions
// need it, and --upstream-env collects repeated and newline-separated
// entries (the variable's form) without showing values in errors.
func TestStdioFlags(t *testing.T) {
	noEnv := func(string) string { return "" }
	o, err := parseArgs([]string{"--upstream-command", "prog 'a b'", "--upstream-env", "A=1", "--upstream-env", "B=2\nC=3"}, io.Discard, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=1", "B=2", "C=3"}; strings.Join(o.upstreamEnv, ",") != strings.Join(want, ",") {
		t.Errorf("--upstream-env = %q, want %q", o.upstreamEnv, want)
	}
	env := func(k string) string {
		if k == "TASKGATE_UPSTREAM_ENV" {
			return "TOKEN=from-env\nOTHER=x"
		}
		return ""
	}
	if o, err := parseArgs([]string{"--upstream-command", "prog"}, io.Discard, env); err != nil || len(o.upstreamEnv) != 2 {
		t.Errorf("TASKGATE_UPSTREAM_ENV: %v %q, want two entries", err, o.upstreamEnv)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-command", "prog"}, "exclude each other"},
		{[]string{"--upstream-dir", "/tmp"}, "--upstream is required"},
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-dir", "/tmp"}, "need --upstream-command"},
		{[]string{"--upstream-command", `prog "open`}, "unterminated double quote"},
		{[]string{"--upstream-command", "prog", "--upstream-env", "=secret-value"}, "NAME=VALUE"},
		{[]string{"--upstream-command", "prog", "--stdio-max-children", "0"}, "--stdio-max-children"},
		{[]string{"--upstream-command", "prog", "--stdio-init-timeout", "0s"}, "--stdio-init-timeout"},
	} {
		_, err := parseArgs(tc.args, io.Discard, noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseArgs(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-value") {
			t.Errorf("parseArgs(%q) error shows an environment value: %v", tc.args, err)
		}
	}
}
