package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.uber.org/goleak"

	"github.com/taskgate/taskgate/e2e/e2etest"
	"github.com/taskgate/taskgate/taskstore/redistest"
)

// protocolVersion is the MCP revision whose tasks taskgate adds.
const protocolVersion = "2025-11-25"

// Paths of the binaries built once by TestMain.
var (
	taskgateBin  string
	legacyMCPBin string
	mcpgoPeerBin string // an mcp-go server (questions on its GET stream)
)

// TestMain builds taskgate and the demo servers once (with -race when the
// test binary itself runs with -race, so the children are checked too),
// runs the tests and removes the binaries.
func TestMain(m *testing.M) {
	if spec := os.Getenv(probeEnv); spec != "" {
		os.Exit(runProbeProcess(spec)) // a child of TestLargeResultsUnderLoad
	}
	bins, remove, err := e2etest.Build(raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	taskgateBin, legacyMCPBin, mcpgoPeerBin = bins.Taskgate, bins.LegacyMCP, bins.MCPGoPeer
	code := runTests(m)
	remove()
	os.Exit(code)
}

// runTests runs the tests, then checks for leaked goroutines: the child
// processes are gone by then, and idle keep-alive connections of the
// default client are closed first.
func runTests(m *testing.M) int {
	code := m.Run()
	redistest.Report(os.Stderr)
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: goroutine leak:", err)
			code = 1
		}
	}
	return code
}

// ---- processes ----

// proc is a child process started by startProc.
type proc = e2etest.Proc

// startProc starts bin and kills it in t.Cleanup; a data race report or a
// panic in its output fails the test, and when the test failed its output
// goes to the test log.
func startProc(t testing.TB, name, bin string, args ...string) *proc {
	t.Helper()
	return e2etest.Start(t, name, exec.Command(bin, args...), e2etest.CheckOutput(e2etest.RaceOrPanic))
}

// legacy is a running legacy-mcp.
type legacy struct {
	URL string // the MCP endpoint
	p   *proc
}

// startLegacy starts legacy-mcp with extra flags and waits for its
// "listening on" line.
func startLegacy(t testing.TB, extra ...string) *legacy {
	t.Helper()
	return startServer(t, "legacy-mcp", legacyMCPBin, extra...)
}

// startServer starts an MCP server binary that takes --listen and prints
// "listening on URL", and waits for that line.
func startServer(t testing.TB, name, bin string, extra ...string) *legacy {
	t.Helper()
	var u string
	p := e2etest.StartRetrying(t, func() (*proc, error) {
		args := append([]string{"--listen", e2etest.FreeAddr(t)}, extra...)
		p := startProc(t, name, bin, args...)
		var err error
		if u, err = e2etest.WaitListening(p, 10*time.Second); err != nil {
			p.Kill()
		}
		return p, err
	})
	return &legacy{URL: u, p: p}
}

// gateway is a running taskgate.
type gateway struct {
	URL   string // its MCP endpoint (same path as the upstream's)
	Admin string // http://host:port of the admin server
	p     *proc
}

// startTaskgate starts taskgate in front of upstream (an MCP endpoint URL)
// with extra flags and waits for its /healthz.
func startTaskgate(t testing.TB, upstream string, extra ...string) *gateway {
	t.Helper()
	return startTaskgateBin(t, taskgateBin, upstream, extra...)
}

// startTaskgateBin is startTaskgate with the taskgate binary bin.
func startTaskgateBin(t testing.TB, bin, upstream string, extra ...string) *gateway {
	t.Helper()
	path := "/mcp"
	if u, err := url.Parse(upstream); err == nil && u.Path != "" {
		path = u.Path
	}
	g := &gateway{}
	g.p = e2etest.StartRetrying(t, func() (*proc, error) {
		listen, admin := e2etest.FreeAddr(t), e2etest.FreeAddr(t)
		// No drain delay: tests that stop taskgate need no load balancer
		// to notice; TestDrainOnSIGTERM sets its own.
		args := append([]string{"--upstream", upstream, "--listen", listen, "--admin-listen", admin,
			"--log-level", "debug", "--drain-delay", "0"}, extra...)
		p := startProc(t, "taskgate", bin, args...)
		g.URL, g.Admin = "http://"+listen+path, "http://"+admin
		err := e2etest.WaitReady(p, 10*time.Second, func() bool { return e2etest.HTTPOK(g.Admin + "/healthz") })
		if err != nil {
			p.Kill()
		}
		return p, err
	})
	return g
}

// writePolicy writes a policy file into a temp dir and returns its path.
func writePolicy(t testing.TB, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ---- polling ----

// waitFor polls cond until it holds or fails the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := e2etest.PollUntil(timeout, func() (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// ---- raw JSON-RPC over HTTP ----

// rpcMsg is any JSON-RPC message.
type rpcMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// reply is what one POST brought back.
type reply struct {
	Status int
	Header http.Header
	Body   []byte   // the whole body as received
	Msg    *rpcMsg  // the response message (nil when none)
	Notes  []rpcMsg // notifications and requests seen before it
	Events []sseEvent
}

// rawClient speaks JSON-RPC over HTTP by hand, for edge cases. It keeps
// the Mcp-Session-Id of initialize and sends MCP-Protocol-Version after it.
type rawClient struct {
	t       testing.TB
	url     string
	hc      *http.Client
	header  http.Header // extra headers on every request (e.g. Authorization)
	session string
	version string
	id      atomic.Int64
}

func newRawClient(t testing.TB, endpoint string) *rawClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &rawClient{t: t, url: endpoint, hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}, header: http.Header{}}
}

// request builds an HTTP request with the client's headers.
func (c *rawClient) request(ctx context.Context, method string, body []byte) *http.Request {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url, r)
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	if c.version != "" {
		req.Header.Set("MCP-Protocol-Version", c.version)
	}
	return req
}

// postRaw POSTs body and reads the whole answer (JSON or SSE).
func (c *rawClient) postRaw(body []byte) reply {
	c.t.Helper()
	return c.do(c.request(context.Background(), http.MethodPost, body))
}

func (c *rawClient) do(req *http.Request) reply {
	c.t.Helper()
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading body: %v", req.Method, req.URL, err)
	}
	return parseReply(c.t, resp, body)
}

func parseReply(t testing.TB, resp *http.Response, body []byte) reply {
	t.Helper()
	r := reply{Status: resp.StatusCode, Header: resp.Header, Body: body}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		sr := newSSEReader(bytes.NewReader(body))
		for {
			ev, err := sr.next()
			if err != nil {
				break
			}
			r.Events = append(r.Events, ev)
			if ev.Data == "" {
				continue
			}
			var m rpcMsg
			if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
				t.Fatalf("SSE data is not JSON-RPC: %q: %v", ev.Data, err)
			}
			if m.Method == "" {
				r.Msg = &m
			} else {
				r.Notes = append(r.Notes, m)
			}
		}
	case strings.HasPrefix(ct, "application/json") && len(body) > 0:
		var m rpcMsg
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("JSON body is not JSON-RPC: %q: %v", body, err)
		}
		r.Msg = &m
	}
	return r
}

// nextID returns a fresh request id (a JSON string).
func (c *rawClient) nextID() json.RawMessage {
	return json.RawMessage(strconv.Quote("raw-" + strconv.FormatInt(c.id.Add(1), 10)))
}

// marshalRequest returns the body of a request with a fresh id.
func (c *rawClient) marshalRequest(method string, params any) ([]byte, json.RawMessage) {
	c.t.Helper()
	id := c.nextID()
	m := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		m["params"] = params
	}
	b, err := json.Marshal(m)
	if err != nil {
		c.t.Fatal(err)
	}
	return b, id
}

// call sends a request and returns the reply; it fails the test unless the
// answer is HTTP 200 with a response echoing the id.
func (c *rawClient) call(method string, params any) reply {
	c.t.Helper()
	body, id := c.marshalRequest(method, params)
	r := c.postRaw(body)
	if r.Status != http.StatusOK || r.Msg == nil {
		c.t.Fatalf("%s: HTTP %d, body %q", method, r.Status, r.Body)
	}
	if !bytes.Equal(r.Msg.ID, id) {
		c.t.Fatalf("%s: response id %s, want %s", method, r.Msg.ID, id)
	}
	return r
}

// result calls method and decodes a successful result into out.
func (c *rawClient) result(method string, params, out any) {
	c.t.Helper()
	r := c.call(method, params)
	if r.Msg.Error != nil {
		c.t.Fatalf("%s: JSON-RPC error %d %q", method, r.Msg.Error.Code, r.Msg.Error.Message)
	}
	if out != nil {
		if err := json.Unmarshal(r.Msg.Result, out); err != nil {
			c.t.Fatalf("%s: decoding result %s: %v", method, r.Msg.Result, err)
		}
	}
}

// rpcErr calls method and returns its JSON-RPC error; it fails the test on
// a success.
func (c *rawClient) rpcErr(method string, params any) *rpcError {
	c.t.Helper()
	r := c.call(method, params)
	if r.Msg.Error == nil {
		c.t.Fatalf("%s: got result %s, want a JSON-RPC error", method, r.Msg.Result)
	}
	return r.Msg.Error
}

// notify sends a notification and returns the HTTP status.
func (c *rawClient) notify(method string, params any) int {
	c.t.Helper()
	m := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		m["params"] = params
	}
	b, _ := json.Marshal(m)
	return c.postRaw(b).Status
}

// initResult is the part of InitializeResult the tests look at.
type initResult struct {
	ProtocolVersion string                     `json:"protocolVersion"`
	Capabilities    map[string]json.RawMessage `json:"capabilities"`
	ServerInfo      struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"serverInfo"`
	Instructions string `json:"instructions"`
}

// initialize runs the handshake (initialize + notifications/initialized).
func (c *rawClient) initialize() initResult {
	c.t.Helper()
	return c.initializeWith(map[string]any{})
}

// initializeWith runs the handshake declaring the client capabilities caps
// (e.g. elicitation, which the upstream checks before asking).
func (c *rawClient) initializeWith(caps map[string]any) initResult {
	c.t.Helper()
	body, _ := c.marshalRequest("initialize", map[string]any{
		"protocolVersion": protocolVersion,
		"capabilities":    caps,
		"clientInfo":      map[string]any{"name": "taskgate-e2e", "version": "0"},
	})
	r := c.postRaw(body)
	if r.Status != http.StatusOK || r.Msg == nil || r.Msg.Error != nil {
		c.t.Fatalf("initialize: HTTP %d, body %q", r.Status, r.Body)
	}
	var res initResult
	if err := json.Unmarshal(r.Msg.Result, &res); err != nil {
		c.t.Fatalf("initialize: %v", err)
	}
	c.session = r.Header.Get("Mcp-Session-Id")
	c.version = res.ProtocolVersion
	if st := c.notify("notifications/initialized", nil); st != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: HTTP %d, want 202", st)
	}
	return res
}

// toolResult is a CallToolResult as JSON.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage            `json:"structuredContent"`
	IsError           bool                       `json:"isError"`
	Meta              map[string]json.RawMessage `json:"_meta"`
}

func (r *toolResult) text() string {
	if len(r.Content) == 0 {
		return ""
	}
	return r.Content[0].Text
}

// wireTask is a Task as JSON; Ttl is raw so that null and absence differ.
type wireTask struct {
	TaskID        string          `json:"taskId"`
	Status        string          `json:"status"`
	StatusMessage string          `json:"statusMessage"`
	CreatedAt     string          `json:"createdAt"`
	LastUpdatedAt string          `json:"lastUpdatedAt"`
	TTL           json.RawMessage `json:"ttl"`
	PollInterval  *int64          `json:"pollInterval"`
}

// taskPage is a ListTasksResult.
type taskPage struct {
	Tasks      []wireTask `json:"tasks"`
	NextCursor string     `json:"nextCursor"`
}

// listTasks returns the first tasks/list page.
func (c *rawClient) listTasks() taskPage {
	c.t.Helper()
	var page taskPage
	c.result("tasks/list", nil, &page)
	return page
}

// createTask sends a task-augmented tools/call and returns the task.
func (c *rawClient) createTask(tool string, args any, task map[string]any) wireTask {
	c.t.Helper()
	if task == nil {
		task = map[string]any{}
	}
	var res struct {
		Task wireTask `json:"task"`
	}
	c.result("tools/call", map[string]any{"name": tool, "arguments": args, "task": task}, &res)
	if res.Task.TaskID == "" {
		c.t.Fatalf("tools/call %s as a task: no task in the result", tool)
	}
	return res.Task
}

func (c *rawClient) getTask(id string) wireTask {
	c.t.Helper()
	var tk wireTask
	c.result("tasks/get", map[string]any{"taskId": id}, &tk)
	return tk
}

// waitStatus polls tasks/get until the task has status.
func (c *rawClient) waitStatus(id, status string, timeout time.Duration) wireTask {
	c.t.Helper()
	var last wireTask
	waitFor(c.t, timeout, "task "+id+" to be "+status, func() bool {
		last = c.getTask(id)
		return last.Status == status
	})
	return last
}

// ---- SSE ----

type sseEvent struct {
	ID       string
	HasID    bool
	Name     string
	Data     string
	Retry    string
	Comments []string
}

type sseReader struct{ br *bufio.Reader }

func newSSEReader(r io.Reader) *sseReader { return &sseReader{br: bufio.NewReader(r)} }

// next returns the next event (an event may hold only comments).
func (r *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data []string
	seen := false
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			if seen && errors.Is(err, io.EOF) {
				ev.Data = strings.Join(data, "\n")
				return ev, nil
			}
			return ev, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if !seen {
				continue
			}
			ev.Data = strings.Join(data, "\n")
			return ev, nil
		}
		seen = true
		if strings.HasPrefix(line, ":") {
			ev.Comments = append(ev.Comments, line)
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			data = append(data, value)
		case "id":
			ev.ID, ev.HasID = value, true
		case "event":
			ev.Name = value
		case "retry":
			ev.Retry = value
		}
	}
}

// ---- upstream statistics ----

// upstreamStats is legacy-mcp's stats tool output.
type upstreamStats struct {
	Calls     map[string]int64 `json:"calls"`
	Cancelled int64            `json:"cancelled"`
	Running   int64            `json:"running"`
}

// statsReader reads legacy-mcp's counters over its own session, directly
// (not through taskgate).
type statsReader struct {
	c *rawClient
}

func newStatsReader(t testing.TB, upstream string) *statsReader {
	c := newRawClient(t, upstream)
	c.initialize()
	return &statsReader{c: c}
}

func (s *statsReader) get() upstreamStats {
	s.c.t.Helper()
	var res struct {
		StructuredContent upstreamStats `json:"structuredContent"`
	}
	s.c.result("tools/call", map[string]any{"name": "stats", "arguments": map[string]any{}}, &res)
	return res.StructuredContent
}

// ---- a recording tap between taskgate and the upstream ----

// tap is a reverse proxy that records the JSON-RPC messages POSTed through
// it, to show what reached the upstream.
type tap struct {
	URL string
	mu  sync.Mutex
	got []rpcMsg
}

func startTap(t testing.TB, upstream string) *tap {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			var m rpcMsg
			if json.Unmarshal(body, &m) != nil {
				m = rpcMsg{Method: "<not a single message>", Params: body}
			}
			tp.mu.Lock()
			tp.got = append(tp.got, m)
			tp.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rp.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	tp.URL = "http://" + ln.Addr().String() + u.Path
	return tp
}

func (tp *tap) messages() []rpcMsg {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]rpcMsg(nil), tp.got...)
}

// ---- mcp-go client ----

// newMCPClient connects the mcp-go client to endpoint with extra headers
// and client options (e.g. an elicitation handler) and runs the 2025-11-25
// handshake.
func newMCPClient(t testing.TB, endpoint string, headers map[string]string, copts ...client.ClientOption) (*client.Client, *mcp.InitializeResult) {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if headers != nil {
		opts = append(opts, transport.WithHTTPHeaders(headers))
	}
	trans, err := transport.NewStreamableHTTP(endpoint, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(trans, copts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = protocolVersion
	req.Params.ClientInfo = mcp.Implementation{Name: "taskgate-e2e-mcp-go", Version: "0"}
	res, err := c.Initialize(ctx, req)
	if err != nil {
		t.Fatalf("mcp-go initialize: %v", err)
	}
	return c, res
}

// mcpCreateTask sends a task-augmented tools/call through the mcp-go
// client's transport: v1.2.1's CallTool parses every answer as a
// CallToolResult and cannot return a CreateTaskResult.
func mcpCreateTask(t testing.TB, c *client.Client, tool string, args any, ttl *int64) mcp.Task {
	t.Helper()
	resp := mcpSend(t, c, "tools/call", map[string]any{
		"name": tool, "arguments": args, "task": mcp.TaskParams{TTL: ttl},
	})
	if resp.Error != nil {
		t.Fatalf("tools/call %s as a task: JSON-RPC error %d %q", tool, resp.Error.Code, resp.Error.Message)
	}
	var res mcp.CreateTaskResult
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		t.Fatalf("CreateTaskResult %s: %v", resp.Result, err)
	}
	return res.Task
}

var mcpSendID atomic.Int64

// mcpSend sends one request through the mcp-go client's transport (same
// session, protocol version and headers) and returns the raw response,
// with JSON-RPC errors as data.
func mcpSend(t testing.TB, c *client.Client, method string, params any) *transport.JSONRPCResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.GetTransport().SendRequest(ctx, transportRequest(method, params))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return resp
}

// transportRequest builds a request with a fresh id for mcp-go's transport.
func transportRequest(method string, params any) transport.JSONRPCRequest {
	return transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION,
		ID:      mcp.NewRequestId("e2e-" + strconv.FormatInt(mcpSendID.Add(1), 10)),
		Method:  method,
		Params:  params,
	}
}

// ctxT is a context for one client call.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
