package e2e

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// An upstream reached over TLS with a certificate of a private CA (a TLS
// reverse proxy in front of the demo server): with --upstream-ca,
// initialize, a plain call and a task work through taskgate; without it,
// the system's roots refuse the upstream, a call gets 502 saying why and
// /readyz reports it.
func TestTLSUpstream(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	target, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	rp.FlushInterval = -1 // SSE events as they come
	front := httptest.NewTLSServer(rp)
	t.Cleanup(front.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	gw := startTaskgate(t, front.URL+target.Path, "--upstream-ca", ca)
	c, init := newMCPClient(t, gw.URL, nil)
	if init.Capabilities.Tasks == nil {
		t.Fatalf("initialize over TLS: no tasks capability: %+v", init.Capabilities)
	}
	plain, err := c.CallTool(ctxT(t), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "over tls"}}})
	if err != nil || textOf(plain.Content) != "over tls" {
		t.Fatalf("plain tools/call over TLS: %v %+v", err, plain)
	}
	tk := mcpCreateTask(t, c, "echo", map[string]any{"text": "task over tls"}, nil)
	if res := taskResult(t, c, tk.TaskId); textOf(res.Content) != "task over tls" {
		t.Errorf("task result %q, want \"task over tls\"", textOf(res.Content))
	}

	untrusted := startTaskgate(t, front.URL+target.Path)
	rc := newRawClient(t, untrusted.URL)
	body, _ := rc.marshalRequest("initialize", map[string]any{
		"protocolVersion": protocolVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "taskgate-e2e", "version": "0"},
	})
	r := rc.postRaw(body)
	if r.Status != http.StatusBadGateway || r.Msg == nil || r.Msg.Error == nil ||
		!strings.Contains(r.Msg.Error.Message, "certificate not trusted") {
		t.Errorf("initialize without --upstream-ca: HTTP %d, %s; want 502 naming the certificate", r.Status, r.Body)
	}
	for _, g := range []struct {
		gw    *gateway
		ready bool
	}{{gw, true}, {untrusted, false}} {
		resp, err := http.Get(g.gw.Admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ready := resp.StatusCode == http.StatusOK; ready != g.ready || (!ready && !strings.Contains(string(body), "certificate")) {
			t.Errorf("/readyz of %s: %d %q; want ready %v (else naming the certificate)", g.gw.URL, resp.StatusCode, body, g.ready)
		}
	}
}
