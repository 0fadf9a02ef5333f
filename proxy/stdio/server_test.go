package stdio

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// logBuf collects the Server's log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServer runs a Server whose children are the fake server in mode.
func startServer(t *testing.T, mode string, tweak func(*Config)) (*Server, *logBuf) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Command: []string{exe}, Env: []string{fakeEnv + "=" + mode, "FAKE_SECRET=s3cret-value"},
		StopGrace: 2 * time.Second, KeepAlive: 200 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	logs := &logBuf{}
	s, err := New(cfg, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if strings.Contains(logs.String(), "s3cret-value") {
			t.Errorf("an environment value reached the log")
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return s, logs
}

// tclient speaks Streamable HTTP to a Server through its Dial.
type tclient struct {
	t   *testing.T
	hc  *http.Client
	sid string
}

func newClient(t *testing.T, s *Server) *tclient {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return s.Dial(ctx) }}
	t.Cleanup(tr.CloseIdleConnections)
	return &tclient{t: t, hc: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
}

type answer struct {
	status int
	header http.Header
	sse    bool
	msgs   []map[string]any
}

// last returns the last message (the response).
func (a answer) last() map[string]any {
	if len(a.msgs) == 0 {
		return nil
	}
	return a.msgs[len(a.msgs)-1]
}

func (c *tclient) post(body string) answer {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://stdio"+Path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.sid != "" {
		req.Header.Set(headerSessionID, c.sid)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", body, err)
	}
	defer resp.Body.Close()
	return readAnswer(c.t, resp)
}

func readAnswer(t *testing.T, resp *http.Response) answer {
	t.Helper()
	a := answer{status: resp.StatusCode, header: resp.Header}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		a.sse = true
		for line := range strings.SplitSeq(string(raw), "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				a.msgs = append(a.msgs, decode(t, data))
			}
		}
	} else if len(raw) > 0 {
		a.msgs = append(a.msgs, decode(t, string(raw)))
	}
	return a
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not JSON: %q", s)
	}
	return m
}

const initBody = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`

func (c *tclient) initialize() answer {
	c.t.Helper()
	a := c.post(initBody)
	if a.status != http.StatusOK || a.last()["result"] == nil {
		c.t.Fatalf("initialize: HTTP %d %v", a.status, a.msgs)
	}
	c.sid = a.header.Get(headerSessionID)
	if c.sid == "" {
		c.t.Fatal("initialize: no Mcp-Session-Id")
	}
	return a
}

func callBody(id int, tool string, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s,"_meta":{"progressToken":"tok-%d"}}}`, id, tool, args, id)
}

func resultText(m map[string]any) string {
	res, _ := m["result"].(map[string]any)
	content, _ := res["content"].([]any)
	if len(content) == 0 {
		return ""
	}
	item, _ := content[0].(map[string]any)
	s, _ := item["text"].(string)
	return s
}

func errorMessage(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for backoff := time.Millisecond; !cond(); backoff = min(2*backoff, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out", what)
		}
		time.Sleep(backoff) // polling interval, not synchronisation
	}
}

func TestPlainCallsJSONAndSSE(t *testing.T) {
	s, _ := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	if a := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); a.status != http.StatusAccepted {
		t.Fatalf("notification: HTTP %d, want 202", a.status)
	}
	// An answer written in three partial writes arrives whole, as JSON.
	a := c.post(callBody(1, "echo", `{"text":"hello"}`))
	if a.sse || resultText(a.last()) != "hello" {
		t.Fatalf("echo: sse=%v %v, want a JSON answer with hello", a.sse, a.msgs)
	}
	// Progress (by token) and a log message go to the request's stream.
	a = c.post(callBody(2, "progress", `{}`))
	if !a.sse || len(a.msgs) != 3 || a.msgs[0]["method"] != methodProgress || a.msgs[1]["method"] != methodLog ||
		resultText(a.last()) != "done" {
		t.Fatalf("progress: sse=%v %v, want progress, log, result on one SSE stream", a.sse, a.msgs)
	}
	// Invalid JSON and a non-JSON-RPC line from the child are dropped.
	a = c.post(callBody(3, "garbage", `{}`))
	if resultText(a.last()) != "after garbage" {
		t.Fatalf("garbage: %v", a.msgs)
	}
	if s.Started() != 1 {
		t.Errorf("started %d children for one session, want 1", s.Started())
	}
}

func TestLineOverLimitFailsItsCall(t *testing.T) {
	s, logs := startServer(t, "plain", func(c *Config) { c.MaxLineSize = 64 << 10 })
	c := newClient(t, s)
	c.initialize()
	a := c.post(callBody(1, "big", `{"size":100000}`))
	if msg := errorMessage(a.last()); !strings.Contains(msg, "exceeds the limit of 65536 bytes") {
		t.Fatalf("big answer: %v, want an error naming the limit", a.msgs)
	}
	// The child lives on.
	if a := c.post(callBody(2, "echo", `{"text":"still here"}`)); resultText(a.last()) != "still here" {
		t.Fatalf("after the long line: %v", a.msgs)
	}
	if a := c.post(callBody(3, "big", `{"size":60000}`)); len(resultText(a.last())) != 60000 {
		t.Fatalf("an answer under the limit did not arrive whole")
	}
	if !strings.Contains(logs.String(), "over the size limit") {
		t.Error("the dropped line was not logged")
	}
}

func TestEarlyOutputGoesToGETStream(t *testing.T) {
	s, logs := startServer(t, "early", nil)
	c := newClient(t, s)
	c.initialize()
	req, _ := http.NewRequest(http.MethodGet, "http://stdio"+Path, nil)
	req.Header.Set(headerSessionID, c.sid)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("GET stream ended before the early notification: %v", err)
		}
		if strings.Contains(line, "notifications/tools/list_changed") {
			break
		}
	}
	// A second GET stream of the session is refused.
	req2, _ := http.NewRequest(http.MethodGet, "http://stdio"+Path, nil)
	req2.Header.Set(headerSessionID, c.sid)
	resp2, err := c.hc.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusConflict {
		t.Errorf("second GET stream: HTTP %d, want 409", resp2.StatusCode)
	}
	if !strings.Contains(logs.String(), "not a JSON-RPC message") {
		t.Error("the child's non-JSON line was not logged as dropped")
	}
	if strings.Contains(logs.String(), "this line is not JSON") {
		t.Error("the child's output reached the log")
	}
}

func TestElicitationRoundTrip(t *testing.T) {
	s, _ := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	req, _ := http.NewRequest(http.MethodPost, "http://stdio"+Path, strings.NewReader(callBody(1, "ask", `{}`)))
	req.Header.Set(headerSessionID, c.sid)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var got []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v (got %q)", err, got)
		}
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok {
			continue
		}
		got = append(got, data)
		if strings.Contains(data, "elicitation/create") {
			// The only call in flight owns the server's request; the
			// client answers on a separate POST.
			a := c.post(`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept"}}`)
			if a.status != http.StatusAccepted {
				t.Fatalf("answer: HTTP %d", a.status)
			}
			continue
		}
		if strings.Contains(data, `"id":1`) {
			if !strings.Contains(data, `answer {\"action\":\"accept\"}`) {
				t.Fatalf("result %s does not carry the answer", data)
			}
			return
		}
	}
}

func TestChildExitEndsSession(t *testing.T) {
	s, logs := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	done := make(chan answer, 1)
	go func() { done <- c.post(callBody(1, "hang", `{}`)) }()
	waitFor(t, "the hanging call to be in flight", func() bool {
		ss := s.lookup([]byte(c.sid))
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return len(ss.calls) == 1
	})
	a := c.post(callBody(2, "die", `{}`))
	hung := <-done
	for _, ans := range []answer{a, hung} {
		if ans.status != http.StatusOK {
			t.Errorf("call of a crashed child: HTTP %d, want 200 with a JSON-RPC error", ans.status)
		}
		if msg := errorMessage(ans.last()); !strings.Contains(msg, "exited (exit status 3)") {
			t.Errorf("call of a crashed child: %v, want an error naming exit status 3", ans.msgs)
		}
	}
	if a := c.post(callBody(3, "echo", `{"text":"x"}`)); a.status != http.StatusNotFound {
		t.Errorf("call after the crash: HTTP %d, want 404 (initialize again)", a.status)
	}
	c.sid = ""
	c.initialize()
	if s.Started() != 2 {
		t.Errorf("started %d children, want a new one for the new session", s.Started())
	}
	if got := testutil.ToFloat64(s.m.exits.WithLabelValues("crashed")); got != 1 {
		t.Errorf("taskgate_stdio_exits_total{reason=crashed} = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), `"exit":"exit status 3"`) {
		t.Error("the exit status was not logged")
	}
	if !strings.Contains(logs.String(), "fake stdio server ready") {
		t.Error("the child's stderr was not logged")
	}
}

func TestInitializeTimeoutKillsChild(t *testing.T) {
	s, _ := startServer(t, "noinit", func(c *Config) { c.InitTimeout = 300 * time.Millisecond; c.KeepAlive = time.Minute })
	c := newClient(t, s)
	a := c.post(initBody)
	if a.status != http.StatusGatewayTimeout || !strings.Contains(errorMessage(a.last()), "did not answer initialize within 300ms") {
		t.Fatalf("initialize of a silent child: HTTP %d %v", a.status, a.msgs)
	}
	waitFor(t, "the silent child to be gone", func() bool { return s.Children() == 0 })
	waitFor(t, "the exit to be counted", func() bool {
		return testutil.ToFloat64(s.m.exits.WithLabelValues("init_timeout")) == 1
	})
}

func TestMaxChildren(t *testing.T) {
	s, _ := startServer(t, "plain", func(c *Config) { c.MaxChildren = 2 })
	a, b := newClient(t, s), newClient(t, s)
	a.initialize()
	b.initialize()
	third := newClient(t, s)
	r := third.post(initBody)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(errorMessage(r.last()), "all 2 stdio MCP server processes are in use") {
		t.Fatalf("third session: HTTP %d %v, want 503 naming the limit", r.status, r.msgs)
	}
	// DELETE frees a place.
	req, _ := http.NewRequest(http.MethodDelete, "http://stdio"+Path, nil)
	req.Header.Set(headerSessionID, a.sid)
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: HTTP %d", resp.StatusCode)
	}
	waitFor(t, "the deleted session's child to stop", func() bool { return s.Children() == 1 })
	third.initialize()
	if got := testutil.ToFloat64(s.m.refused.WithLabelValues("full")); got != 1 {
		t.Errorf("taskgate_stdio_refused_total{reason=full} = %v, want 1", got)
	}
}

func TestDeleteWaitsForCallsInFlight(t *testing.T) {
	s, _ := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	asked, done := make(chan struct{}), make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://stdio"+Path, strings.NewReader(callBody(1, "ask", `{}`)))
		req.Header.Set(headerSessionID, c.sid)
		resp, err := c.hc.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				done <- "stream ended: " + err.Error()
				return
			}
			if strings.Contains(line, "elicitation/create") {
				close(asked)
			}
			if strings.Contains(line, `"id":1`) {
				done <- line
				return
			}
		}
	}()
	<-asked
	req, _ := http.NewRequest(http.MethodDelete, "http://stdio"+Path, nil)
	req.Header.Set(headerSessionID, c.sid)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The session drains: new requests are refused, answers still reach
	// the child, and the call finishes.
	if a := c.post(callBody(2, "echo", `{"text":"x"}`)); a.status != http.StatusNotFound {
		t.Errorf("new call while draining: HTTP %d, want 404", a.status)
	}
	if a := c.post(`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"decline"}}`); a.status != http.StatusAccepted {
		t.Fatalf("answer while draining: HTTP %d", a.status)
	}
	if got := <-done; !strings.Contains(got, "decline") {
		t.Fatalf("call in flight at DELETE: %s", got)
	}
	waitFor(t, "the drained session's child to stop", func() bool { return s.Children() == 0 })
}

func TestIdleSessionEnds(t *testing.T) {
	s, logs := startServer(t, "plain", func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	c := newClient(t, s)
	c.initialize()
	// The child is gone a moment before its end is logged: wait for both.
	waitFor(t, "the idle session to end and its end to be logged (idle for longer than ...)", func() bool {
		return s.Children() == 0 && strings.Contains(logs.String(), "idle for longer than")
	})
	if a := c.post(callBody(1, "echo", `{"text":"x"}`)); a.status != http.StatusNotFound {
		t.Errorf("call after the idle end: HTTP %d, want 404", a.status)
	}
}

func TestSessionsHaveTheirOwnChild(t *testing.T) {
	s, _ := startServer(t, "plain", nil)
	a, b := newClient(t, s), newClient(t, s)
	a.initialize()
	b.initialize()
	pa := resultText(a.post(callBody(1, "pid", `{}`)).last())
	pb := resultText(b.post(callBody(1, "pid", `{}`)).last())
	if pa == "" || pa == pb {
		t.Fatalf("sessions share a process: pids %q and %q", pa, pb)
	}
	// Both use id 1 at the same time: answers never cross.
	var wg sync.WaitGroup
	for i, c := range []*tclient{a, b} {
		wg.Go(func() {
			for j := range 20 {
				want := fmt.Sprintf("c%d-%d", i, j)
				if got := resultText(c.post(callBody(7, "echo", fmt.Sprintf(`{"text":%q}`, want))).last()); got != want {
					t.Errorf("session %d got %q, want %q", i, got, want)
				}
			}
		})
	}
	wg.Wait()
}

func TestDuplicateIDInFlight(t *testing.T) {
	s, _ := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	go c.post(callBody(5, "hang", `{}`))
	waitFor(t, "the call to be in flight", func() bool {
		ss := s.lookup([]byte(c.sid))
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return len(ss.calls) == 1
	})
	a := c.post(callBody(5, "echo", `{"text":"x"}`))
	if a.status != http.StatusBadRequest || !strings.Contains(errorMessage(a.last()), "already in flight") {
		t.Fatalf("duplicate id: HTTP %d %v", a.status, a.msgs)
	}
	// notifications/cancelled ends the hanging call's stream.
	if a := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`); a.status != http.StatusAccepted {
		t.Fatalf("cancel: HTTP %d", a.status)
	}
	waitFor(t, "the cancelled call to be forgotten", func() bool {
		ss := s.lookup([]byte(c.sid))
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return len(ss.calls) == 0
	})
}

func TestEnvironment(t *testing.T) {
	t.Setenv("TASKGATE_TEST_INHERITED", "from-parent")
	s, _ := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	if got := resultText(c.post(callBody(1, "env", `{"name":"TASKGATE_TEST_INHERITED"}`)).last()); got != "from-parent" {
		t.Errorf("inherited variable = %q", got)
	}
	if got := resultText(c.post(callBody(2, "env", `{"name":"FAKE_SECRET"}`)).last()); got != "s3cret-value" {
		t.Errorf("configured variable = %q", got)
	}
}

func TestCloseStopsChildren(t *testing.T) {
	s, _ := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	pid := resultText(c.post(callBody(1, "pid", `{}`)).last())
	ss := s.lookup([]byte(c.sid))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ss.child.exited:
	default:
		t.Fatalf("child %s still running after Close", pid)
	}
	if !ss.child.state.Exited() || ss.child.state.ExitCode() != 0 {
		t.Errorf("child ended with %v, want a clean exit on stdin EOF", ss.child.state)
	}
}

// BenchmarkCall measures one request and its answer through the in-process
// endpoint and a child's stdin and stdout (the fake server answers at once).
func BenchmarkCall(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Command: []string{exe}, Env: []string{fakeEnv + "=plain"}}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	}()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return s.Dial(ctx) }}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	post := func(sid, body string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, "http://stdio"+Path, strings.NewReader(body))
		if sid != "" {
			req.Header.Set(headerSessionID, sid)
		}
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, raw
	}
	resp, _ := post("", initBody)
	sid := resp.Header.Get(headerSessionID)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pid","arguments":{}}}`
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, raw := post(sid, body); !bytes.Contains(raw, []byte(`"result"`)) {
			b.Fatalf("answer %s", raw)
		}
	}
}

// With two requests in flight, a request of the child cannot be given to
// either: it goes to the session's GET stream.
func TestServerRequestWithSeveralInFlightGoesToGET(t *testing.T) {
	s, _ := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	req, _ := http.NewRequest(http.MethodGet, "http://stdio"+Path, nil)
	req.Header.Set(headerSessionID, c.sid)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	go c.post(callBody(1, "hang", `{}`))
	ss := s.lookup([]byte(c.sid))
	waitFor(t, "the hanging call", func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return len(ss.calls) == 1
	})
	a := c.post(callBody(2, "ping-then-answer", `{}`))
	if len(a.msgs) != 1 || resultText(a.last()) != "pinged" {
		t.Fatalf("the second call's answer carries %v, want only its result", a.msgs)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("GET stream ended before the ping: %v", err)
		}
		if strings.Contains(line, `"srv-2"`) {
			return
		}
	}
}

// A child that answers initialize with an error is stopped: the client
// cannot use that session.
func TestInitializeRefusedEndsSession(t *testing.T) {
	s, _ := startServer(t, "refuse", nil)
	c := newClient(t, s)
	a := c.post(initBody)
	if a.status != http.StatusOK || !strings.Contains(errorMessage(a.last()), "unsupported protocol version") {
		t.Fatalf("refused initialize: HTTP %d %v, want the child's error", a.status, a.msgs)
	}
	waitFor(t, "the refusing child to stop", func() bool { return s.Children() == 0 })
}

// A session with a call in flight (a task's background call is one) is
// never idle, however long the call runs; without one it is.
func TestCallInFlightIsNotIdle(t *testing.T) {
	s, _ := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	ss := s.lookup([]byte(c.sid))
	if d := ss.idleFor(time.Now().Add(time.Hour)); d < time.Hour {
		t.Fatalf("idle session: idleFor = %v, want about an hour", d)
	}
	go c.post(callBody(1, "hang", `{}`))
	waitFor(t, "the call to be in flight", func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return len(ss.calls) == 1
	})
	if d := ss.idleFor(time.Now().Add(time.Hour)); d != 0 {
		t.Errorf("session with a call in flight: idleFor = %v, want 0", d)
	}
}

// A child flooding stderr is logged up to the burst; the rest is counted.
func TestStderrFloodIsBounded(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		logStderr(&child{stderr: r}, zerolog.New(logs), 10)
	}()
	for i := range 5000 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	w.Close()
	<-done
	r.Close()
	out := logs.String()
	logged := strings.Count(out, `"message":"stdio server stderr"`)
	if logged < 100 || logged > 200 {
		t.Errorf("logged %d of 5000 lines at 10/s with a burst of 100, want about 100", logged)
	}
	if !strings.Contains(out, `"stderr_dropped":`) {
		t.Error("the dropped lines were not counted in the log")
	}
}

// BenchmarkInmemoryHop measures the HTTP exchange over the in-process
// listener alone (a fixed answer, no child): what the proxy pays per
// message for reaching a stdio server through HTTP.
func BenchmarkInmemoryHop(b *testing.B) {
	ln := fasthttputil.NewInmemoryListener()
	body := []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"x"}]}}`)
	srv := &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) {
		rc.Response.Header.SetContentType("application/json")
		rc.SetBody(body)
	}}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	hc := &fasthttp.HostClient{Addr: "stdio", Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("http://stdio" + Path)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetBodyString(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pid","arguments":{}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := hc.Do(req, resp); err != nil {
			b.Fatal(err)
		}
	}
}

// TestClosedConnectionIsNotAWarning: the proxy aborts a call (tasks/cancel)
// by closing its in-memory connection; the server notices when it writes
// the answer. That is logged at debug once, under its own component (each
// JSON key once), never as a fasthttp WARN.
func TestClosedConnectionIsNotAWarning(t *testing.T) {
	s, logs := startServer(t, "plain", nil)
	c := newClient(t, s)
	c.initialize()
	conn, err := s.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	body := callBody(1, "ask", `{}`)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: stdio\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s",
		Path, headerSessionID, c.sid, len(body), body)
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the call's stream: %v", err)
		}
		if strings.Contains(line, "elicitation/create") {
			break
		}
	}
	_ = conn.Close() // the proxy aborts the call
	// The answer lets the child finish the call; the server then writes
	// its result to the closed connection.
	if a := c.post(`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"decline"}}`); a.status != http.StatusAccepted {
		t.Fatalf("answer: HTTP %d", a.status)
	}
	waitFor(t, "the closed connection's debug line", func() bool {
		return strings.Contains(logs.String(), "closed an in-memory connection")
	})
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		if strings.Count(line, `"component"`) > 1 {
			t.Errorf("log line with a repeated key: %s", line)
		}
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "connection closed") {
			t.Errorf("closed connection logged as a warning: %s", line)
		}
	}
}
