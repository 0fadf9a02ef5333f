package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/wire"
	v20251125 "github.com/taskgate/taskgate/proxy/wire/v20251125"
)

// replica starts a second Handler on e's store and upstream (another
// taskgate process sharing the Redis) and returns an env that talks to it.
func (e *taskEnv) replica(cfg Config) *taskEnv {
	e.t.Helper()
	cfg.Upstream = e.up.url()
	cfg.OwnerKey = e.h.cfg.OwnerKey
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = time.Second
	}
	h, err := New(cfg, policy.Default(), e.store, zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h.ServeFastHTTP}
	go func() { _ = srv.Serve(ln) }()
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Close(ctx)
		_ = srv.Shutdown()
	})
	return &taskEnv{t: e.t, up: e.up, h: h, store: e.store,
		c: &fasthttp.HostClient{Addr: "taskgate", Dial: func(string) (net.Conn, error) { return ln.Dial() }}}
}

// stream is an open SSE answer read event by event.
type stream struct {
	t    *testing.T
	r    *sse.Reader
	resp *fasthttp.Response
}

// openStream sends a request whose answer is an SSE stream (a POST body,
// or a GET when body is "").
func (e *taskEnv) openStream(who identity, body string) *stream {
	e.t.Helper()
	c := &fasthttp.HostClient{Addr: "taskgate", Dial: e.c.Dial, StreamResponseBody: true}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	req.SetRequestURI("http://taskgate/mcp")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	for k, v := range who {
		req.Header.Set(k, v)
	}
	if body == "" {
		req.Header.SetMethod("GET")
	} else {
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
	}
	if err := c.Do(req, resp); err != nil {
		e.t.Fatal(err)
	}
	if !wire.IsEventStream(resp.Header.ContentType()) {
		e.t.Fatalf("answer is %q (HTTP %d), not SSE: %s", resp.Header.ContentType(), resp.StatusCode(), resp.Body())
	}
	s := &stream{t: e.t, r: sse.NewReader(resp.BodyStream(), 0), resp: resp}
	e.t.Cleanup(func() {
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
	})
	return s
}

// sseMsg is a JSON-RPC message read from a stream.
type sseMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	raw    string
}

// next returns the next message (skipping events without data); comments
// seen on the way are reported through comments when not nil.
func (s *stream) next(comments *int) sseMsg {
	s.t.Helper()
	for {
		ev, err := s.r.Next()
		if err != nil {
			s.t.Fatalf("stream ended: %v", err)
		}
		if comments != nil && strings.Contains(string(ev.Raw), ": keep-alive") {
			*comments++
		}
		if len(ev.Data) == 0 {
			continue
		}
		var m sseMsg
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			s.t.Fatalf("event data is not JSON: %q", ev.Data)
		}
		m.raw = string(ev.Data)
		return m
	}
}

// nextMethod skips messages until one with the given method (status
// notifications may interleave with task messages on GET streams).
func (s *stream) nextMethod(method string) sseMsg {
	s.t.Helper()
	for {
		if m := s.next(nil); m.Method == method {
			return m
		}
	}
}

func relatedTaskOf(t *testing.T, m sseMsg) string {
	t.Helper()
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	_ = json.Unmarshal(m.Params, &p)
	var rel struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(p.Meta[v20251125.MetaRelatedTask], &rel)
	return rel.TaskID
}

// E-34, E-35, E-37, E-38, E-39, T-42, T-48, T-49, T-62..T-65: progress, a log
// message and an elicitation request reach the open tasks/result stream in
// order with related-task meta and the client's progressToken; the answer
// POSTed to another replica reaches the upstream; the task goes back to
// working and its result ends the same stream.
func TestInputRequiredThroughResultStream(t *testing.T) {
	e := newTaskEnv(t, "", Config{OwnerKey: []byte("0123456789abcdef0123")})
	b := e.replica(Config{})
	task := e.createTask(alice, "asker", `{}`, `{}`)
	got := e.waitStatus(alice, task.TaskID, "input_required")
	if !strings.Contains(got.StatusMessage, "elicitation/create") || got.LastUpdatedAt < got.CreatedAt {
		t.Errorf("input_required task = %+v, want a statusMessage naming the request", got)
	}
	s := e.openStream(alice, fmt.Sprintf(`{"jsonrpc":"2.0","id":"res-1","method":"tasks/result","params":{"taskId":%q}}`, task.TaskID))
	progress := s.next(nil)
	if progress.Method != wire.MethodProgress || !strings.Contains(string(progress.Params), `"progressToken":"p-7"`) || relatedTaskOf(t, progress) != task.TaskID {
		t.Fatalf("first message = %s, want the progress with token p-7 and related-task meta", progress.raw)
	}
	if m := s.next(nil); m.Method != "notifications/message" || relatedTaskOf(t, m) != task.TaskID {
		t.Fatalf("second message = %s, want the log message (FIFO)", m.raw)
	}
	ask := s.next(nil)
	if ask.Method != "elicitation/create" || !strings.HasPrefix(string(ask.ID), `"`+wire.QuestionIDPrefix) || relatedTaskOf(t, ask) != task.TaskID {
		t.Fatalf("third message = %s, want the elicitation request with related-task meta (T-63) under a question id", ask.raw)
	}
	r := b.send(alice, `{"jsonrpc":"2.0","id":`+string(ask.ID)+`,"result":{"action":"accept","content":{"answer":"42"}}}`, "")
	if r.httpStatus != fasthttp.StatusAccepted {
		t.Fatalf("answer through replica B: HTTP %d %s, want 202", r.httpStatus, r.raw)
	}
	waitFor(t, 5*time.Second, "the upstream to get the answer under its own id", func() bool { return e.up.gotAnswer(`"srv-e1"`) })
	if m := s.next(nil); m.Method != wire.MethodProgress || !strings.Contains(string(m.Params), `"progress":2`) {
		t.Fatalf("after the answer: %s, want progress 2", m.raw)
	}
	final := s.next(nil)
	if string(final.ID) != `"res-1"` || !strings.Contains(string(final.Result), `you said {\"action\":\"accept\",\"content\":{\"answer\":\"42\"}}`) {
		t.Fatalf("final message = %s, want the result carrying the client's answer", final.raw)
	}
	if got := e.waitStatus(alice, task.TaskID, "completed"); got.Status != "completed" {
		t.Fatal(got)
	}
}

// E-34, E-40, T-45, T-46, issue 4 items 3 and 4: without a tasks/result
// stream, task messages go to the session's GET stream (here taskgate's
// own, the upstream has none), with status notifications and keep-alives.
func TestGetStreamCarriesTaskMessagesAndStatus(t *testing.T) {
	e := newTaskEnv(t, "", Config{KeepAlive: 30 * time.Millisecond})
	g := e.openStream(alice, "")
	keepAlives := 0
	task := e.createTask(alice, "asker", `{}`, `{}`)
	first := g.nextMethod(wire.MethodProgress)
	if relatedTaskOf(t, first) != task.TaskID {
		t.Fatalf("first GET stream message = %s, want the task's progress", first.raw)
	}
	ask := g.nextMethod("elicitation/create")
	if relatedTaskOf(t, ask) != task.TaskID {
		t.Fatalf("elicitation on GET stream = %s", ask.raw)
	}
	r := e.send(alice, `{"jsonrpc":"2.0","id":`+string(ask.ID)+`,"result":{"action":"accept","content":{"answer":"x"}}}`, "")
	if r.httpStatus != fasthttp.StatusAccepted {
		t.Fatalf("answer: HTTP %d", r.httpStatus)
	}
	for {
		m := g.next(&keepAlives)
		if m.Method != wire.MethodTaskStatus {
			continue
		}
		var st wireTask
		if err := json.Unmarshal(m.Params, &st); err != nil || st.TaskID != task.TaskID || st.CreatedAt == "" || st.TTL == nil {
			t.Fatalf("status notification = %s, want the full task (T-46)", m.raw)
		}
		if strings.Contains(m.raw, "related-task") {
			t.Fatalf("status notification carries related-task meta (T-45): %s", m.raw)
		}
		if st.Status == "completed" {
			break
		}
	}
	if keepAlives == 0 {
		g.waitKeepAlive() // the stream stays open and idle: keep-alives follow
	}
}

// waitKeepAlive reads until a keep-alive comment.
func (s *stream) waitKeepAlive() {
	s.t.Helper()
	for {
		ev, err := s.r.Next()
		if err != nil {
			s.t.Fatalf("stream ended before a keep-alive: %v", err)
		}
		if strings.Contains(string(ev.Raw), ": keep-alive") {
			return
		}
	}
}

// E-30: a cancel while input_required drops the pending request; a late
// answer is accepted and harmless.
func TestCancelDuringInputRequired(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	task := e.createTask(alice, "asker", `{}`, `{}`)
	e.waitStatus(alice, task.TaskID, "input_required")
	if r := e.call(alice, 1, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, task.TaskID)); r.Error != nil {
		t.Fatal(r.raw)
	}
	r := e.send(alice, `{"jsonrpc":"2.0","id":"srv-e1","result":{"action":"accept","content":{"answer":"late"}}}`, "")
	if r.httpStatus != fasthttp.StatusAccepted {
		t.Errorf("late answer: HTTP %d, want 202", r.httpStatus)
	}
	if got, _ := e.get(alice, task.TaskID); got.Status != "cancelled" {
		t.Errorf("status = %q, want cancelled", got.Status)
	}
	wantRPCError(t, e.call(alice, 2, "tasks/result", fmt.Sprintf(`{"taskId":%q}`, task.TaskID)), wire.CodeInternalError, "cancelled")
}
