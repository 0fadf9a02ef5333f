package proxy

import (
	"context"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/taskstore"
)

// Tracing (Config.Tracer, package tracing). Off, h.tr is nil and every
// step below sits behind a nil check: a request allocates nothing for it.
// On:
//
//   - A JSON-RPC request or notification of a method taskgate answers or
//     rewrites (methodSpec.traced: initialize, tools/list, tools/call,
//     tasks/*, and the 2026 wire's server/discover, tasks/update and
//     subscriptions/listen) gets a server span, child of the client's
//     traceparent, from the parsed envelope until its answer ends (a
//     stream's last byte): "{mcp.method.name} {tool}" for tools/call, the
//     method otherwise. Its traceparent replaces the client's on the
//     request, so what taskgate forwards of it (a rewritten initialize, a
//     tools/call without a task) reaches the upstream as its child.
//   - Pure pass-through (other methods, batches, responses, GET and
//     DELETE, other paths) gets no span: taskgate adds nothing there, and
//     the client's traceparent reaches the upstream unchanged, so the
//     upstream's spans are the client's children as if taskgate were not
//     there.
//   - A task's background call is a client span "tools/call {tool}",
//     child of the creating request's span: it is part of that request's
//     work, outlives it as an asynchronous child does, and its trace is the
//     client's, so the upstream (which gets this span's traceparent) joins
//     the client's trace. A link would start a new trace and split the
//     call from the client's view. The task's lifecycle is its events.
//   - Store operations under either span are child spans (tracing.Store).
//   - Log lines written inside a traced request or call carry trace_id and
//     span_id.

// Log field names of the trace context.
const (
	logTraceID = "trace_id"
	logSpanID  = "span_id"
)

// traced reports whether a message of method s gets a span: taskgate
// answers it or rewrites its answer on one of the wires.
func (s *methodSpec) traced() bool {
	if s == nil {
		return false
	}
	switch s.serve {
	case serveInitialize, serveToolsList, serveToolsCall, serveTasks:
		return true
	}
	switch s.serve26 {
	case serveToolsCall, serveTasks, serveDiscover, serveListen:
		return true
	}
	return false
}

// startSpan starts the server span of the intercepted message env and
// makes info's context and logger carry it.
func (h *Handler) startSpan(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) {
	name, tool := env.method, ""
	if env.method == methodToolsCall && env.params != nil {
		if vals, err := jsonx.Members(env.params, "name"); err == nil {
			if t, ok := jsonx.UnquoteValue(vals[0]); ok && t != "" {
				name, tool = name+" "+t, t
			}
		}
	}
	ctx, span := h.tr.StartServer(h.root, &rc.Request.Header, name)
	if span.IsRecording() {
		// Attributes only for sampled spans: an unsampled one still
		// propagates its context and puts its ids in the logs.
		attrs := make([]attribute.KeyValue, 0, 9)
		attrs = append(attrs, tracing.MethodName.String(env.method),
			tracing.NetTransport.String("tcp"), tracing.NetProtocol.String("http"))
		if env.id != nil {
			attrs = append(attrs, tracing.RequestID.String(rpcIDString(env.id)))
		}
		if tool != "" {
			attrs = append(attrs, tracing.ToolName.String(tool), tracing.OperationName.String("execute_tool"))
		}
		if sid := rc.Request.Header.Peek(headerSessionID); len(sid) > 0 {
			// The keyed hash logs show: a session id is a credential.
			attrs = append(attrs, tracing.SessionID.String(h.hashShort(sid)))
		}
		if v := rc.Request.Header.Peek(headerProtocolVersion); len(v) > 0 {
			attrs = append(attrs, tracing.ProtocolVersion.String(string(v)))
		}
		span.SetAttributes(attrs...)
	}
	info.ctx, info.span = ctx, span
	traceID, spanID := tracing.LogIDs(span)
	l := h.log.With().Str(logTraceID, traceID).Str(logSpanID, spanID).Logger()
	info.log = &l
	h.tr.Inject(ctx, &rc.Request.Header)
}

// rpcIDString is a JSON-RPC id as the jsonrpc.request.id attribute
// shows it: a string's content, a number's digits.
func rpcIDString(id []byte) string {
	if s, ok := jsonx.UnquoteValue(id); ok {
		return s
	}
	return string(id)
}

// endSpan ends the request's span with what its log line reports.
func endSpan(r *reqRecord) {
	span := r.span
	if !span.IsRecording() {
		span.End()
		return
	}
	if r.taskID != "" {
		span.SetAttributes(tracing.TaskID.String(r.taskID))
	}
	span.SetAttributes(tracing.Outcome.String(r.outcome),
		attribute.Int("http.response.status_code", r.status))
	if r.status >= 400 || r.outcome == "rpc_error" || r.outcome == outcomeClientGone {
		span.SetAttributes(tracing.ErrorType.String(r.outcome))
		span.SetStatus(codes.Error, r.outcome)
	}
	span.End()
}

// ctxOf is the context of info's request: h.root, with the request's
// span when it is traced.
func (h *Handler) ctxOf(info *reqInfo) context.Context {
	if info.ctx != nil {
		return info.ctx
	}
	return h.root
}

// waitCtxOf is the context of a result wait of info's request: the
// engine's WaitRoot (on shutdown the wait goes on until this process's
// calls have recorded their outcomes, so it ends with one), carrying the
// request's trace span when the request is traced.
func (h *Handler) waitCtxOf(info *reqInfo) context.Context {
	if info.ctx == nil {
		return h.eng.WaitRoot()
	}
	return trace.ContextWithSpan(h.eng.WaitRoot(), trace.SpanFromContext(info.ctx))
}

// logOf is the logger of info's request: h.log, with the trace context
// when the request is traced.
func (h *Handler) logOf(info *reqInfo) *zerolog.Logger {
	if info.log != nil {
		return info.log
	}
	return &h.log
}

// traceCall starts the span of the background call of j, a task created
// by info's traced request: the request span gets the task's id and a
// created event, the call's upstream request the call span's traceparent,
// the job's log lines its ids. It runs before the task is stored and
// returns the context to store it under (the store's create is the call
// span's first child); endCall ends the span.
func (h *Handler) traceCall(info *reqInfo, j *job, t *taskstore.Task) context.Context {
	info.span.SetAttributes(tracing.TaskID.String(t.ID))
	upID, _ := jsonx.UnquoteValue([]byte(t.UpstreamID))
	ctx, span := h.tr.StartClient(info.ctx, methodToolsCall+" "+t.Tool,
		tracing.MethodName.String(methodToolsCall), tracing.ToolName.String(t.Tool),
		tracing.OperationName.String("execute_tool"), tracing.TaskID.String(t.ID),
		tracing.RequestID.String(upID))
	j.span = span
	h.tr.Inject(ctx, &j.req.Header)
	return ctx
}

// tracedCreated records the created event once the task is stored.
func (j *job) tracedCreated(info *reqInfo) {
	ev := trace.WithAttributes(tracing.TaskID.String(j.Task.ID), tracing.TaskStatus.String(string(j.Task.Status)))
	info.span.AddEvent(tracing.EventCreated, ev)
	j.span.AddEvent(tracing.EventCreated, ev)
	j.Log.SetTrace(tracing.LogIDs(j.span))
}

// failCall ends the call span of a task whose creation failed.
func (j *job) failCall(err error) {
	if j.span == nil {
		return
	}
	j.span.RecordError(err)
	j.span.SetAttributes(tracing.ErrorType.String("task_not_created"))
	j.span.SetStatus(codes.Error, "task not created")
	j.span.End()
}

// traceEvent adds a lifecycle event to j's call span, when traced.
func (j *job) traceEvent(name string, attrs ...attribute.KeyValue) {
	if j.span != nil {
		j.span.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// endCall ends j's call span with its terminal status (none when the
// runner stored none: a cancel or an expiry, told by a stopped event).
func (j *job) endCall() {
	if j.span == nil {
		return
	}
	if ft, _ := j.Final(); ft != nil {
		j.span.AddEvent(tracing.EventTerminal, trace.WithAttributes(tracing.TaskStatus.String(string(ft.Status))))
		j.span.SetAttributes(tracing.TaskStatus.String(string(ft.Status)))
		if ft.Status == taskstore.Failed {
			j.span.SetAttributes(tracing.ErrorType.String("task_failed"))
			j.span.SetStatus(codes.Error, ft.StatusMessage)
		}
	}
	j.span.End()
}

// callContext is the engine's CallContext hook: a traced call runs under
// its span.
func callContext(ej *engine.Job, ctx context.Context) context.Context {
	if j := jobOf(ej); j.span != nil {
		return trace.ContextWithSpan(ctx, j.span)
	}
	return ctx
}

// logContext is the engine's LogContext hook: a line written under a
// span carries its ids.
func logContext(ctx context.Context, log *zerolog.Logger) *zerolog.Logger {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return log
	}
	l := log.With().Str(logTraceID, sc.TraceID().String()).Str(logSpanID, sc.SpanID().String()).Logger()
	return &l
}

// leaseLost records a task failed by lease recovery: its own span (the
// call's trace died with the process that ran it) with a lease_lost event.
func (h *Handler) leaseLost(t *taskstore.Task) {
	_, span := h.tr.StartInternal(h.root, "taskgate lease recovery", tracing.TaskID.String(t.ID), tracing.ToolName.String(t.Tool))
	span.AddEvent(tracing.EventLeaseLost, trace.WithAttributes(tracing.TaskID.String(t.ID),
		attribute.String("taskgate.runner", t.Runner), tracing.TaskStatus.String(string(taskstore.Failed))))
	span.SetStatus(codes.Error, "runner lost")
	span.SetAttributes(tracing.ErrorType.String("lease_lost"))
	span.End()
}
