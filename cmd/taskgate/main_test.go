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
