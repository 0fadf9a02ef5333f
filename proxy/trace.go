package proxy

import (
	"context"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/wire"
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

// startSpan starts the server span of the intercepted message env and
// makes info's context and logger carry it.
func (h *Handler) startSpan(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) {
	name, tool := env.Method, ""
	if env.Method == wire.MethodToolsCall && env.Params != nil {
		if vals, err := jsonx.Members(env.Params, "name"); err == nil {
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
		attrs = append(attrs, tracing.MethodName.String(env.Method),
			tracing.NetTransport.String("tcp"), tracing.NetProtocol.String("http"))
		if env.ID != nil {
			attrs = append(attrs, tracing.RequestID.String(rpcIDString(env.ID)))
		}
		if tool != "" {
			attrs = append(attrs, tracing.ToolName.String(tool), tracing.OperationName.String("execute_tool"))
		}
		if sid := rc.Request.Header.Peek(wire.HeaderSessionID); len(sid) > 0 {
			// The keyed hash logs show: a session id is a credential.
			attrs = append(attrs, tracing.SessionID.String(h.id.hashShort(sid)))
		}
		if v := rc.Request.Header.Peek(wire.HeaderProtocolVersion); len(v) > 0 {
			attrs = append(attrs, tracing.ProtocolVersion.String(string(v)))
		}
		span.SetAttributes(attrs...)
	}
	info.Ctx, info.Span = ctx, span
	traceID, spanID := tracing.LogIDs(span)
	l := h.log.With().Str(wire.LogTraceID, traceID).Str(wire.LogSpanID, spanID).Logger()
	info.Log = &l
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
	if r.status >= 400 || r.outcome == "rpc_error" || r.outcome == wire.OutcomeClientGone {
		span.SetAttributes(tracing.ErrorType.String(r.outcome))
		span.SetStatus(codes.Error, r.outcome)
	}
	span.End()
}

// leaseLost records a task failed by lease recovery: its own span (the
// call's trace died with the process that ran it) with a lease_lost event.
func leaseLost(tr *tracing.Tracer, root context.Context, t *taskstore.Task) {
	_, span := tr.StartInternal(root, "taskgate lease recovery", tracing.TaskID.String(t.ID), tracing.ToolName.String(t.Tool))
	span.AddEvent(tracing.EventLeaseLost, trace.WithAttributes(tracing.TaskID.String(t.ID),
		attribute.String("taskgate.runner", t.Runner), tracing.TaskStatus.String(string(taskstore.Failed))))
	span.SetStatus(codes.Error, "runner lost")
	span.SetAttributes(tracing.ErrorType.String("lease_lost"))
	span.End()
}
