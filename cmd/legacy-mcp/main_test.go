package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig is the default configuration, as parseFlags returns it.
func testConfig(t *testing.T, args ...string) config {
	t.Helper()
	cfg, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("parseFlags(%q) error: %v", args, err)
	}
	return cfg
}

// startServer serves newHandler(cfg) on a loopback httptest server and
// returns the endpoint URL.
func startServer(t *testing.T, cfg config) string {
	t.Helper()
	root, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	server := newServer(root, cfg, log)
	srv := httptest.NewServer(newHandler(cfg, server, log))
	t.Cleanup(func() {
		cancel()
		closeSessions(server) // also those raw POSTs without a session made
		srv.Close()
	})
	return srv.URL + cfg.path
}

// connect returns a client session with the SDK's client; version "" lets
// the client pick (it tries 2026-07-28 discovery, then initialize).
func connect(t *testing.T, url string, opts *mcp.ClientOptions, version string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "legacy-mcp-test", Version: "0"}, opts)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("Connect(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s, %v): %v", name, args, err)
	}
	return res
}

// text returns the text of a result holding one text content.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("result has %d contents, want 1: %+v", len(res.Content), res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want *mcp.TextContent", res.Content[0])
	}
	return tc.Text
}

// structured decodes res.StructuredContent into out.
func structured(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
}

func getStats(t *testing.T, cs *mcp.ClientSession) statsOut {
	t.Helper()
	var st statsOut
	structured(t, callTool(t, cs, "stats", map[string]any{}), &st)
	return st
}

// waitFor polls cond with backoff until it holds or 10 s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d := time.Millisecond; !cond(); d = min(2*d, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(d)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    config
		wantErr bool
	}{
		{
			name: "defaults",
			want: config{listen: "127.0.0.1:3000", path: "/mcp", maxProtocolVersion: "2025-11-25",
				logLevel: slog.LevelInfo, shutdownTimeout: 5 * time.Second},
		},
		{
			name: "all",
			args: []string{"--listen", ":0", "--path", "/x", "--stateless", "--json", "--max-protocol-version", "2025-06-18",
				"--log-level", "debug", "--any-host", "--shutdown-timeout", "1s"},
			want: config{listen: ":0", path: "/x", stateless: true, jsonResponse: true, maxProtocolVersion: "2025-06-18",
				logLevel: slog.LevelDebug, anyHost: true, shutdownTimeout: time.Second},
		},
		{name: "unknown version", args: []string{"--max-protocol-version", "2025-01-01"}, wantErr: true},
		{name: "relative path", args: []string{"--path", "mcp"}, wantErr: true},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: true},
		{name: "extra argument", args: []string{"serve"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseFlags(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(config{})); diff != "" {
				t.Errorf("parseFlags(%q) mismatch (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

// TestHelpSaysDevTool: --help says what legacy-mcp is and that it is a
// development tool, before the flags.
func TestHelpSaysDevTool(t *testing.T) {
	var out strings.Builder
	if _, err := parseFlags([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	if !strings.HasPrefix(help, "legacy-mcp: a demo MCP server") || !strings.Contains(help, "A development tool of taskgate, not part of the product.") ||
		!strings.Contains(help, "-fixtures") {
		t.Errorf("--help:\n%s", help)
	}
}

func TestConnectDefaultClient(t *testing.T) {
	// The SDK client first tries 2026-07-28 discovery; the 400 answer must
	// let it fall back to initialize at the server's max version.
	for _, max := range []string{"2025-11-25", "2025-06-18"} {
		t.Run(max, func(t *testing.T) {
			cs := connect(t, startServer(t, testConfig(t, "--max-protocol-version", max)), nil, "")
			if got := cs.InitializeResult().ProtocolVersion; got != max {
				t.Errorf("negotiated protocol version = %q, want %q", got, max)
			}
		})
	}
}

func TestToolsList(t *testing.T) {
	cs := connect(t, startServer(t, testConfig(t)), nil, "2025-11-25")
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s: missing description or input schema", tool.Name)
		}
	}
	want := []string{"ask", "echo", "fail", "large", "rpc_error", "slow", "stats"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}

func TestEcho(t *testing.T) {
	cs := connect(t, startServer(t, testConfig(t)), nil, "2025-11-25")
	res := callTool(t, cs, "echo", map[string]any{"text": "héllo"})
	if res.IsError || text(t, res) != "héllo" {
		t.Errorf("echo = %+v, want text %q", res, "héllo")
	}
}

func TestFail(t *testing.T) {
	cs := connect(t, startServer(t, testConfig(t)), nil, "2025-11-25")
	res := callTool(t, cs, "fail", map[string]any{"reason": "disk on fire"})
	if !res.IsError || text(t, res) != "disk on fire" {
		t.Errorf("fail = %+v, want isError with text %q", res, "disk on fire")
	}
}

func TestRPCError(t *testing.T) {
	tests := []struct {
		name string
		args map[string]any
		want jsonrpc.Error
	}{
		{
			name: "given",
			args: map[string]any{"code": -32001, "message": "quota exceeded"},
			want: jsonrpc.Error{Code: -32001, Message: "quota exceeded", Data: json.RawMessage(`{"code":-32001,"tool":"rpc_error"}`)},
		},
		{
			name: "defaults",
			args: map[string]any{},
			want: jsonrpc.Error{Code: -32603, Message: "rpc_error requested", Data: json.RawMessage(`{"code":-32603,"tool":"rpc_error"}`)},
		},
	}
	url := startServer(t, testConfig(t))
	cs := connect(t, url, nil, "2025-11-25")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "rpc_error", Arguments: tt.args})
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) {
				t.Fatalf("CallTool(rpc_error, %v) error = %v, want a *jsonrpc.Error", tt.args, err)
			}
			if diff := cmp.Diff(&tt.want, werr); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRPCErrorWire checks the raw answer: a JSON-RPC error, no result.
func TestRPCErrorWire(t *testing.T) {
	url := startServer(t, testConfig(t, "--stateless", "--json"))
	status, _, body := post(t, url, "2025-11-25",
		`{"jsonrpc":"2.0","id":"x1","method":"tools/call","params":{"name":"rpc_error","arguments":{"code":-32042,"message":"nope"}}}`)
	if status != http.StatusOK {
		t.Fatalf("status = %d, want 200; body %s", status, body)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	want := map[string]any{
		"jsonrpc": "2.0",
		"id":      "x1",
		"error":   map[string]any{"code": -32042.0, "message": "nope", "data": map[string]any{"code": -32042.0, "tool": "rpc_error"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("wire answer (-want +got):\n%s", diff)
	}
}

func TestLarge(t *testing.T) {
	cs := connect(t, startServer(t, testConfig(t)), nil, "2025-11-25")
	for _, n := range []int{0, 17, 1 << 20, 3<<20 + 5} {
		res := callTool(t, cs, "large", map[string]any{"bytes": n})
		got := text(t, res)
		var out largeOut
		structured(t, res, &out)
		sum := sha256.Sum256([]byte(got))
		if len(got) != n || out.Bytes != n || out.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("large(%d): text %d bytes, structured %+v, text sha256 %x", n, len(got), out, sum)
		}
		if !strings.HasPrefix(largePattern+largePattern, got[:min(n, 32)]) {
			t.Errorf("large(%d): text starts %q, want the pattern %q", n, got[:min(n, 32)], largePattern)
		}
	}
	res := callTool(t, cs, "large", map[string]any{})
	if got := len(text(t, res)); got != largeDefaultBytes {
		t.Errorf("large() = %d bytes, want default %d", got, largeDefaultBytes)
	}
	res = callTool(t, cs, "large", map[string]any{"bytes": largeMaxBytes + 1})
	if !res.IsError {
		t.Errorf("large(max+1) = %+v, want isError", res)
	}
}

func TestSlowProgress(t *testing.T) {
	progress := make(chan *mcp.ProgressNotificationParams, 10)
	logs := make(chan *mcp.LoggingMessageParams, 10)
	cs := connect(t, startServer(t, testConfig(t)), &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params },
		LoggingMessageHandler:       func(_ context.Context, r *mcp.LoggingMessageRequest) { logs <- r.Params },
	}, "2025-11-25")

	params := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"seconds": 0.2, "steps": 2}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, res), "slept 0.2 seconds"; res.IsError || got != want {
		t.Errorf("slow = %+v, want text %q", res, want)
	}
	// Notifications are handled concurrently with the result: wait for them.
	for i := 1; i <= 2; i++ {
		select {
		case p := <-progress:
			want := &mcp.ProgressNotificationParams{ProgressToken: "tok-1", Message: fmt.Sprintf("step %d of 2", i),
				Progress: float64(i), Total: 2}
			if diff := cmp.Diff(want, p); diff != "" {
				t.Errorf("progress %d (-want +got):\n%s", i, diff)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d progress notifications, want 2", i-1)
		}
		select {
		case l := <-logs:
			if l.Level != "info" || l.Logger != "slow" {
				t.Errorf("log %d = %+v, want level info from logger slow", i, l)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d log notifications, want 2", i-1)
		}
	}
	select {
	case p := <-progress:
		t.Errorf("extra progress notification %+v", p)
	default:
	}

	// Without a progress token there is no progress, but still a result.
	res = callTool(t, cs, "slow", map[string]any{"seconds": 0.01})
	if got, want := text(t, res), "slept 0.01 seconds"; got != want {
		t.Errorf("slow(0.01) = %q, want %q", got, want)
	}
}

func TestAsk(t *testing.T) {
	tests := []struct {
		name    string
		answer  *mcp.ElicitResult
		want    string
		wantErr bool
	}{
		{name: "accept", answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "blue"}}, want: "you said: blue"},
		{name: "decline", answer: &mcp.ElicitResult{Action: "decline"}, want: "user did not answer: decline", wantErr: true},
		{name: "cancel", answer: &mcp.ElicitResult{Action: "cancel"}, want: "user did not answer: cancel", wantErr: true},
	}
	url := startServer(t, testConfig(t))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked *mcp.ElicitParams
			cs := connect(t, url, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked = r.Params
					return tt.answer, nil
				},
			}, "2025-11-25")
			res := callTool(t, cs, "ask", map[string]any{"question": "favourite colour?"})
			if got := text(t, res); got != tt.want || res.IsError != tt.wantErr {
				t.Errorf("ask = %q (isError %v), want %q (isError %v)", got, res.IsError, tt.want, tt.wantErr)
			}
			if asked == nil || asked.Message != "favourite colour?" || asked.Mode != "form" {
				t.Errorf("elicitation request = %+v, want form mode with the question", asked)
			}
		})
	}
	t.Run("no elicitation capability", func(t *testing.T) {
		cs := connect(t, url, nil, "2025-11-25")
		if res := callTool(t, cs, "ask", map[string]any{"question": "?"}); !res.IsError {
			t.Errorf("ask without elicitation = %+v, want isError", res)
		}
	})
}

// TestStatsCancelled cancels a slow call on the client and checks, through
// stats, that the cancellation reached the server.
func TestStatsCancelled(t *testing.T) {
	cs := connect(t, startServer(t, testConfig(t)), nil, "2025-11-25")
	callTool(t, cs, "echo", map[string]any{"text": "x"})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"seconds": 3600}})
		done <- err
	}()
	waitFor(t, "slow to run", func() bool { return getStats(t, cs).Running == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled CallTool error = %v, want context.Canceled", err)
	}
	waitFor(t, "cancelled == 1", func() bool { return getStats(t, cs).Cancelled == 1 })

	got := getStats(t, cs)
	want := statsOut{Calls: map[string]int64{"echo": 1, "slow": 1, "stats": got.Calls["stats"]}, Cancelled: 1, Running: 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// post sends one JSON-RPC message without a session and returns the status,
// Content-Type and body.
func post(t *testing.T, url, version, body string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if version != "" {
		req.Header.Set(headerProtocolVersion, version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// TestMaxProtocolVersion: a server capped at 2025-06-18 negotiates it and
// refuses newer MCP-Protocol-Version headers with HTTP 400 (spec H-14).
func TestMaxProtocolVersion(t *testing.T) {
	url := startServer(t, testConfig(t, "--max-protocol-version", "2025-06-18"))

	cs := connect(t, url, nil, "2025-11-25")
	if got := cs.InitializeResult().ProtocolVersion; got != "2025-06-18" {
		t.Errorf("initialize with 2025-11-25: protocolVersion = %q, want 2025-06-18", got)
	}
	if res := callTool(t, cs, "echo", map[string]any{"text": "ok"}); text(t, res) != "ok" {
		t.Errorf("echo over 2025-06-18 = %+v", res)
	}

	const ping = `{"jsonrpc":"2.0","id":7,"method":"ping"}`
	tests := []struct {
		version string
		want    int
	}{
		{version: "2025-11-25", want: http.StatusBadRequest},
		{version: "2026-07-28", want: http.StatusBadRequest},
		{version: "2025-06-18", want: http.StatusOK},
		{version: "2025-03-26", want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			status, ctype, body := post(t, url, tt.version, ping)
			if status != tt.want {
				t.Fatalf("POST ping with %s %s: status %d, want %d; body %s", headerProtocolVersion, tt.version, status, tt.want, body)
			}
			if status != http.StatusBadRequest {
				return
			}
			var resp struct {
				ID    int            `json:"id"`
				Error *jsonrpc.Error `json:"error"`
			}
			if err := json.Unmarshal(body, &resp); err != nil || ctype != "application/json" || resp.ID != 7 ||
				resp.Error == nil || resp.Error.Code != jsonrpc.CodeInvalidRequest {
				t.Errorf("400 body = %s (%s), want a JSON-RPC invalid request error for id 7", body, ctype)
			}
		})
	}
}

func TestStateless(t *testing.T) {
	url := startServer(t, testConfig(t, "--stateless"))
	cs := connect(t, url, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "x"}}, nil
		},
	}, "2025-11-25")
	if id := cs.ID(); id != "" {
		t.Errorf("stateless session ID = %q, want none", id)
	}
	if res := callTool(t, cs, "echo", map[string]any{"text": "a"}); text(t, res) != "a" {
		t.Errorf("echo = %+v", res)
	}
	// Server-to-client requests have no way back without a session.
	if res := callTool(t, cs, "ask", map[string]any{"question": "?"}); !res.IsError {
		t.Errorf("stateless ask = %+v, want isError", res)
	}
}

func TestJSONResponse(t *testing.T) {
	url := startServer(t, testConfig(t, "--json"))
	status, ctype, body := post(t, url, "",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if status != http.StatusOK || ctype != "application/json" {
		t.Fatalf("initialize: status %d, Content-Type %q, want 200 application/json; body %s", status, ctype, body)
	}
	if !bytes.Contains(body, []byte(`"protocolVersion":"2025-11-25"`)) {
		t.Errorf("initialize body = %s, want protocolVersion 2025-11-25", body)
	}
	cs := connect(t, url, nil, "2025-11-25")
	if res := callTool(t, cs, "echo", map[string]any{"text": "j"}); text(t, res) != "j" {
		t.Errorf("echo = %+v", res)
	}
}

func TestOtherPath404(t *testing.T) {
	url := startServer(t, testConfig(t))
	status, _, _ := post(t, strings.TrimSuffix(url, "/mcp")+"/other", "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if status != http.StatusNotFound {
		t.Errorf("POST /other: status %d, want 404", status)
	}
}

// TestRun starts the real server loop, waits for its ready line, uses it and
// shuts it down with a slow call running.
func TestRun(t *testing.T) {
	cfg := testConfig(t, "--listen", "127.0.0.1:0", "--shutdown-timeout", "100ms")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, cfg, slog.New(slog.DiscardHandler), pw)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading ready line: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/mcp") {
		t.Fatalf("ready line = %q, want \"listening on http://127.0.0.1:PORT/mcp\"", line)
	}

	cs := connect(t, url, nil, "")
	slowDone := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"seconds": 3600}})
		slowDone <- res
	}()
	waitFor(t, "slow to run", func() bool { return getStats(t, cs).Running == 1 })

	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("run() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	<-slowDone
	_ = cs.Close()
}
