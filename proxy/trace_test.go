package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// The client's trace context in the tracing tests.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// syncBuffer is a log sink the handler's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the JSON log lines whose message is msg.
func (s *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// newTracedEnv is a task environment whose Handler traces every request
// into an in-memory exporter and logs at info level into the returned
// buffer.
func newTracedEnv(t *testing.T) (*taskEnv, *tracetest.InMemoryExporter, *syncBuffer) {
	t.Helper()
	return newTracedEnvCfg(t, Config{})
}

// newTracedEnvCfg is newTracedEnv with cfg (its Tracer is set here).
func newTracedEnvCfg(t *testing.T, cfg Config) (*taskEnv, *tracetest.InMemoryExporter, *syncBuffer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pol, err := policy.Parse([]byte(testPolicy), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg.Tracer = tracing.New(tp)
	e := newTaskEnvLog(t, pol, cfg, nil, newFakeUpstream(t), zerolog.New(logs).Level(zerolog.InfoLevel))
	return e, exp, logs
}

// findSpan returns the ended span named name of the given kind, or nil.
func findSpan(spans tracetest.SpanStubs, name string, kind trace.SpanKind) *tracetest.SpanStub {
	for i := range spans {
		if spans[i].Name == name && spans[i].SpanKind == kind {
			return &spans[i]
		}
	}
	return nil
}

func attrOf(s *tracetest.SpanStub, key attribute.Key) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.Emit()
		}
	}
	return ""
}

func hasEvent(s *tracetest.SpanStub, name string) bool {
	for _, ev := range s.Events {
		if ev.Name == name {
			return true
		}
	}
	return false
}

// A task-augmented tools/call with a traceparent: taskgate's server span
// is the client's child, the background call's span is the server span's
// child and its traceparent is what the upstream receives, store calls
// are children of the spans they serve, the lifecycle is events, and the
// log lines carry the span's ids.
func TestTracingTaskCall(t *testing.T) {
	e, exp, logs := newTracedEnv(t)
	who := identity{"Authorization": "Bearer alice-token", "Mcp-Session-Id": "sess-a", "Traceparent": clientParent}
	task := e.createTask(who, "echo", `{"text":"hi"}`, `{"ttl":60000}`)
	e.waitStatus(who, task.TaskID, "completed")
	var call *tracetest.SpanStub
	pollUntil(t, 5*time.Second, func() bool {
		call = findSpan(exp.GetSpans(), "tools/call echo", trace.SpanKindClient)
		return call != nil
	}, "the background call's span to end")
	spans := exp.GetSpans()
	srv := findSpan(spans, "tools/call echo", trace.SpanKindServer)
	if srv == nil {
		t.Fatalf("no server span tools/call echo among %d spans", len(spans))
	}
	if got := srv.SpanContext.TraceID().String(); got != clientTraceID {
		t.Errorf("server span trace id = %s, want the client's %s", got, clientTraceID)
	}
	if got := srv.Parent.SpanID().String(); got != clientSpanID || !srv.Parent.IsRemote() {
		t.Errorf("server span parent = %s (remote %v), want the client's span %s", got, srv.Parent.IsRemote(), clientSpanID)
	}
	for key, want := range map[attribute.Key]string{
		tracing.MethodName:      "tools/call",
		tracing.ToolName:        "echo",
		tracing.OperationName:   "execute_tool",
		tracing.RequestID:       "c-echo",
		tracing.TaskID:          task.TaskID,
		tracing.ProtocolVersion: "2025-11-25",
	} {
		if got := attrOf(srv, key); got != want {
			t.Errorf("server span %s = %q, want %q", key, got, want)
		}
	}
	if sid := attrOf(srv, tracing.SessionID); sid == "" || sid == "sess-a" {
		t.Errorf("server span mcp.session.id = %q, want the session's keyed hash", sid)
	}
	if !hasEvent(srv, tracing.EventCreated) {
		t.Errorf("server span events %v lack %s", srv.Events, tracing.EventCreated)
	}

	if call.SpanContext.TraceID() != srv.SpanContext.TraceID() || call.Parent.SpanID() != srv.SpanContext.SpanID() {
		t.Errorf("call span parent = %s/%s, want the server span %s", call.Parent.TraceID(), call.Parent.SpanID(), srv.SpanContext.SpanID())
	}
	if got := attrOf(call, tracing.TaskID); got != task.TaskID {
		t.Errorf("call span mcp.task.id = %q, want %q", got, task.TaskID)
	}
	if got := attrOf(call, tracing.RequestID); !strings.HasPrefix(got, wire.UpstreamIDPrefix) {
		t.Errorf("call span jsonrpc.request.id = %q, want the upstream request's id", got)
	}
	for _, ev := range []string{tracing.EventCreated, tracing.EventTerminal} {
		if !hasEvent(call, ev) {
			t.Errorf("call span events %v lack %s", call.Events, ev)
		}
	}
	if got := attrOf(call, tracing.TaskStatus); got != "completed" {
		t.Errorf("call span mcp.task.status = %q, want completed", got)
	}

	// The upstream got the call span's context, not the client's.
	var upParent string
	reqs, _, _ := e.up.snapshot()
	for _, r := range reqs {
		if r.method == "tools/call" {
			upParent = r.headers["Traceparent"]
		}
	}
	if want := "00-" + clientTraceID + "-" + call.SpanContext.SpanID().String() + "-01"; upParent != want {
		t.Errorf("upstream traceparent = %q, want the call span's %q", upParent, want)
	}

	// Store operations are children of the spans they serve.
	for _, tc := range []struct{ name, parent string }{
		{name: "taskstore create", parent: call.SpanContext.SpanID().String()},
		{name: "taskstore finish", parent: call.SpanContext.SpanID().String()},
	} {
		s := findSpan(spans, tc.name, trace.SpanKindClient)
		if s == nil {
			t.Errorf("no %s span", tc.name)
			continue
		}
		if got := s.Parent.SpanID().String(); got != tc.parent {
			t.Errorf("%s parent = %s, want %s", tc.name, got, tc.parent)
		}
		if got := attrOf(s, tracing.TaskID); got != task.TaskID {
			t.Errorf("%s mcp.task.id = %q, want %q", tc.name, got, task.TaskID)
		}
	}
	get := findSpan(spans, "tasks/get", trace.SpanKindServer)
	if get == nil || attrOf(get, tracing.TaskID) != task.TaskID {
		t.Errorf("tasks/get span = %+v, want one with mcp.task.id %s", get, task.TaskID)
	}

	// Log lines inside the traced request and call carry its ids.
	created := logs.lines(t, "task created")
	if len(created) != 1 || created[0][wire.LogTraceID] != clientTraceID || created[0][wire.LogSpanID] != srv.SpanContext.SpanID().String() {
		t.Errorf("task created lines = %v, want one with trace_id %s span_id %s", created, clientTraceID, srv.SpanContext.SpanID())
	}
	finished := logs.lines(t, "task finished")
	if len(finished) != 1 || finished[0][wire.LogSpanID] != call.SpanContext.SpanID().String() {
		t.Errorf("task finished lines = %v, want one with the call span's span_id %s", finished, call.SpanContext.SpanID())
	}
	var sawCreate bool
	for _, l := range logs.lines(t, "request") {
		if l[wire.LogRPCMethod] == "tools/call" {
			sawCreate = true
			if l[wire.LogTraceID] != clientTraceID || l[wire.LogSpanID] != srv.SpanContext.SpanID().String() {
				t.Errorf("request line %v lacks the server span's ids", l)
			}
		}
	}
	if !sawCreate {
		t.Error("no request line for the tools/call")
	}
}

// A question of the upstream is an input_required event on the call span;
// a cancel a stopped event with its reason, and the tasks/cancel span names
// the task.
func TestTracingInputRequiredAndCancel(t *testing.T) {
	e, exp, logs := newTracedEnv(t)
	who := identity{"Authorization": "Bearer alice-token", "Mcp-Session-Id": "sess-a", "Traceparent": clientParent}
	task := e.createTask(who, "asker", `{}`, `{}`)
	e.waitStatus(who, task.TaskID, "input_required")
	if r := e.call(who, 9, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, task.TaskID)); r.Error != nil {
		t.Fatalf("tasks/cancel: %+v", r.Error)
	}
	var call *tracetest.SpanStub
	pollUntil(t, 5*time.Second, func() bool {
		call = findSpan(exp.GetSpans(), "tools/call asker", trace.SpanKindClient)
		return call != nil
	}, "the background call's span to end")
	for _, ev := range []string{tracing.EventCreated, tracing.EventInputRequired, tracing.EventStopped} {
		if !hasEvent(call, ev) {
			t.Errorf("call span events %v lack %s", call.Events, ev)
		}
	}
	for _, ev := range call.Events {
		if ev.Name == tracing.EventStopped && !strings.Contains(fmt.Sprint(ev.Attributes), "cancelled by the client") {
			t.Errorf("stopped event attributes %v, want the cancel's reason", ev.Attributes)
		}
	}
	cancel := findSpan(exp.GetSpans(), "tasks/cancel", trace.SpanKindServer)
	if cancel == nil || attrOf(cancel, tracing.TaskID) != task.TaskID || cancel.SpanContext.TraceID().String() != clientTraceID {
		t.Fatalf("tasks/cancel span = %+v, want one in the client's trace with mcp.task.id %s", cancel, task.TaskID)
	}
	// The engine's line, written inside the tasks/cancel request.
	lines := logs.lines(t, "task cancelled")
	if len(lines) != 1 || lines[0][wire.LogSpanID] != cancel.SpanContext.SpanID().String() || lines[0][wire.LogTraceID] != clientTraceID {
		t.Errorf("task cancelled lines = %v, want one with the tasks/cancel span's ids", lines)
	}
}

// A task failed by lease recovery (its runner gone) is a span of its own
// with a lease_lost event naming the task.
func TestTracingLeaseLost(t *testing.T) {
	e, exp, _ := newTracedEnvCfg(t, Config{Lease: 100 * time.Millisecond})
	owner, _ := e.h.id.owner(headerOf(alice))
	now := time.Now().UTC().Truncate(time.Millisecond)
	id, _ := taskstore.NewID()
	if err := e.store.Create(context.Background(), &taskstore.Task{
		ID: id, Owner: owner, Status: taskstore.Working, CreatedAt: now, UpdatedAt: now,
		TTL: time.Hour, Tool: "echo", UpstreamID: `"x"`, Runner: "dead-process",
	}, taskstore.CreateOptions{Lease: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	var lost *tracetest.SpanStub
	pollUntil(t, 5*time.Second, func() bool {
		lost = findSpan(exp.GetSpans(), "taskgate lease recovery", trace.SpanKindInternal)
		return lost != nil
	}, "the lease recovery span")
	if attrOf(lost, tracing.TaskID) != id || !hasEvent(lost, tracing.EventLeaseLost) {
		t.Errorf("lease recovery span = %+v, want mcp.task.id %s and a %s event", lost, id, tracing.EventLeaseLost)
	}
}

// Pure pass-through gets no span and forwards the client's traceparent
// unchanged; a forwarded method taskgate knows (tools/list) is traced and
// reaches the upstream as taskgate's child.
func TestTracingPassThrough(t *testing.T) {
	e, exp, _ := newTracedEnv(t)
	who := identity{"Authorization": "Bearer alice-token", "Mcp-Session-Id": "sess-a", "Traceparent": clientParent}
	if r := e.call(who, 1, "resources/list", `{}`); r.Error != nil {
		t.Fatalf("resources/list: %+v", r.Error)
	}
	if r := e.call(who, 2, "tools/list", `{}`); r.Error != nil {
		t.Fatalf("tools/list: %+v", r.Error)
	}
	spans := exp.GetSpans()
	if s := findSpan(spans, "resources/list", trace.SpanKindServer); s != nil {
		t.Errorf("pass-through resources/list got a span: %+v", s)
	}
	list := findSpan(spans, "tools/list", trace.SpanKindServer)
	if list == nil {
		t.Fatalf("no tools/list span among %d", len(spans))
	}
	got := map[string]string{}
	reqs, _, _ := e.up.snapshot()
	for _, r := range reqs {
		got[r.method] = r.headers["Traceparent"]
	}
	if got["resources/list"] != clientParent {
		t.Errorf("pass-through traceparent = %q, want the client's %q", got["resources/list"], clientParent)
	}
	if want := "00-" + clientTraceID + "-" + list.SpanContext.SpanID().String() + "-01"; got["tools/list"] != want {
		t.Errorf("tools/list traceparent = %q, want the server span's %q", got["tools/list"], want)
	}
}

// tracedPassThrough is a Handler in front of an in-memory upstream that
// answers a tools/call with JSON, with tracing off (tr nil) or on.
func tracedPassThrough(tb testing.TB, tr *tracing.Tracer) (*testProxy, *fasthttp.Request) {
	tp := newTestProxy(tb, jsonAnswer(`{"jsonrpc":"2.0","id":17,"result":{"content":[{"type":"text","text":"hello"}]}}`),
		withConfig(func(c *Config) { c.Tracer = tr }))
	req := newPost(string(benchSmallCall), "Mcp-Session-Id", "bench", "Mcp-Protocol-Version", "2025-11-25",
		"Authorization", "Bearer t", "Traceparent", clientParent)
	return tp, req
}

// serveOnce runs one request through tp's handler on rc.
func serveOnce(tb testing.TB, tp *testProxy, req *fasthttp.Request, rc *fasthttp.RequestCtx) {
	req.CopyTo(&rc.Request)
	tp.h.ServeFastHTTP(rc)
	if rc.Response.StatusCode() != fasthttp.StatusOK {
		tb.Fatalf("status %d: %s", rc.Response.StatusCode(), rc.Response.Body())
	}
	if err := rc.Response.BodyWriteTo(io.Discard); err != nil {
		tb.Fatal(err)
	}
	rc.Response.Reset()
	tp.up.mu.Lock()
	tp.up.reqs = tp.up.reqs[:0]
	tp.up.mu.Unlock()
}

// BenchmarkTracing is the cost of tracing per proxied request (a
// tools/call without a task, with a traceparent): off (no Tracer), on
// with every request sampled (spans built and handed to a batching no-op
// exporter), and on with none sampled.
func BenchmarkTracing(b *testing.B) {
	for _, bc := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: tracing off
	}{
		{name: "off"},
		{name: "on always_on", sampler: sdktrace.AlwaysSample()},
		{name: "on always_off", sampler: sdktrace.NeverSample()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var tr *tracing.Tracer
			if bc.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(bc.sampler))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				tr = tracing.New(tp)
			}
			tp, req := tracedPassThrough(b, tr)
			var rc fasthttp.RequestCtx
			rc.Init(req, nil, nil)
			b.ReportAllocs()
			for b.Loop() {
				serveOnce(b, tp, req, &rc)
			}
		})
	}
}

// TestTracingOffAllocs is the allocation budget of tracing when it is
// off: a traced-method request (a tools/call with a traceparent) through a
// Handler without a Tracer allocates exactly what it allocated before
// tracing existed, and tracing on allocates more, so the budget can fail.
func TestTracingOffAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation budget: checked without the race detector (.ci/run runs it so)")
	}
	measure := func(tr *tracing.Tracer) float64 {
		tp, req := tracedPassThrough(t, tr)
		var rc fasthttp.RequestCtx
		rc.Init(req, nil, nil)
		serveOnce(t, tp, req, &rc) // warm the connection pool
		return testing.AllocsPerRun(200, func() { serveOnce(t, tp, req, &rc) })
	}
	off := measure(nil)
	if off > passThroughAllocBudget {
		t.Errorf("a traced-method request with tracing off allocates %v times, budget %v (the count before tracing)", off, passThroughAllocBudget)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	if on := measure(tracing.New(tp)); on <= off {
		t.Errorf("tracing on allocates %v times, off %v: the budget cannot tell them apart", on, off)
	}
}

// passThroughAllocBudget is what TestTracingOffAllocs's request allocated
// before tracing existed: measured with the same request and upstream on
// the commit before tracing (the handler, the in-memory upstream and its
// copy of the request together). A change of the pass-through path that
// moves it must say so here.
const passThroughAllocBudget = 29
