package wire

import (
	"bufio"
	"bytes"
	"context"
	"fmt"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/taskstore"
)

// Job is a task call as the eras and their upstream client see it: the
// engine's job (task, policy, supervision, outcome) and what the engine
// does not know: the upstream request, owned by the runner, and the
// era's side of the call (Call). Its engine.Job.Call points back to it.
type Job struct {
	engine.Job
	// Req is the upstream request; a call a Sender writes early releases
	// it once it is written (nil then).
	Req *fasthttp.Request
	// Hdr is Req's headers as wire bytes, copied before the call starts,
	// for the messages sent beside it (answers, cancels, the session's
	// end): Req itself belongs to the goroutine writing the call. Bytes,
	// parsed again by Header when such a message is sent, because a call
	// may wait for minutes, thousands at once, and a parsed copy costs
	// about three times as much memory per call.
	Hdr []byte
	// Call is the era's side of the call: how it runs and how its
	// messages, the client's answers and its end are delivered.
	Call Call
	// Span is the call's trace span (nil when not traced); set before the
	// task is stored, ended by EndCall.
	Span trace.Span
	// Sent and SendErr are what an early Send left for Run: the request
	// written, or why writing it failed.
	Sent    *upstream.Call
	SendErr error
}

// JobOf returns the job whose engine part is ej.
func JobOf(ej *engine.Job) *Job { return ej.Call.(*Job) }

// Header parses the call's headers (Hdr) into dst.
func (j *Job) Header(dst *fasthttp.RequestHeader) error {
	if err := dst.Read(bufio.NewReaderSize(bytes.NewReader(j.Hdr), len(j.Hdr))); err != nil {
		return fmt.Errorf("reading the call's copied request headers: %w", err)
	}
	return nil
}

// TracedCreated records the created event once the task is stored.
func (j *Job) TracedCreated(info *Info) {
	ev := trace.WithAttributes(tracing.TaskID.String(j.Task.ID), tracing.TaskStatus.String(string(j.Task.Status)))
	info.Span.AddEvent(tracing.EventCreated, ev)
	j.Span.AddEvent(tracing.EventCreated, ev)
	j.Log.SetTrace(tracing.LogIDs(j.Span))
}

// FailCall ends the call span of a task whose creation failed.
func (j *Job) FailCall(err error) {
	if j.Span == nil {
		return
	}
	j.Span.RecordError(err)
	j.Span.SetAttributes(tracing.ErrorType.String("task_not_created"))
	j.Span.SetStatus(codes.Error, "task not created")
	j.Span.End()
}

// TraceEvent adds a lifecycle event to j's call span, when traced.
func (j *Job) TraceEvent(name string, attrs ...attribute.KeyValue) {
	if j.Span != nil {
		j.Span.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// EndCall ends j's call span with its terminal status (none when the
// runner stored none: a cancel or an expiry, told by a stopped event).
func (j *Job) EndCall() {
	if j.Span == nil {
		return
	}
	if ft, _ := j.Final(); ft != nil {
		j.Span.AddEvent(tracing.EventTerminal, trace.WithAttributes(tracing.TaskStatus.String(string(ft.Status))))
		j.Span.SetAttributes(tracing.TaskStatus.String(string(ft.Status)))
		if ft.Status == taskstore.Failed {
			j.Span.SetAttributes(tracing.ErrorType.String("task_failed"))
			j.Span.SetStatus(codes.Error, ft.StatusMessage)
		}
	}
	j.Span.End()
}

// CallContext is the engine's CallContext hook: a traced call runs under
// its span.
func CallContext(ej *engine.Job, ctx context.Context) context.Context {
	if j := JobOf(ej); j.Span != nil {
		return trace.ContextWithSpan(ctx, j.Span)
	}
	return ctx
}

// Log field names (each used once per line: zerolog keeps duplicates).
const (
	LogReqID     = "req_id"
	LogStatus    = "status"
	LogRPCMethod = "rpc_method"
	LogSession   = "session"
	LogTaskID    = "task_id"
	LogTool      = "tool"
	LogOwner     = "owner"
	LogTraceID   = "trace_id"
	LogSpanID    = "span_id"
)

// LogContext is the engine's LogContext hook: a line written under a
// span carries its ids.
func LogContext(ctx context.Context, log *zerolog.Logger) *zerolog.Logger {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return log
	}
	l := log.With().Str(LogTraceID, sc.TraceID().String()).Str(LogSpanID, sc.SpanID().String()).Logger()
	return &l
}

// traceCall starts the span of the background call of j, a task created
// by info's traced request: the request span gets the task's id and a
// created event, the call's upstream request the call span's traceparent,
// the job's log lines its ids. It runs before the task is stored and
// returns the context to store it under (the store's create is the call
// span's first child); EndCall ends the span.
func (f *Front) traceCall(info *Info, j *Job, t *taskstore.Task) context.Context {
	info.Span.SetAttributes(tracing.TaskID.String(t.ID))
	upID, _ := jsonx.UnquoteValue([]byte(t.UpstreamID))
	ctx, span := f.Tracer.StartClient(info.Ctx, MethodToolsCall+" "+t.Tool,
		tracing.MethodName.String(MethodToolsCall), tracing.ToolName.String(t.Tool),
		tracing.OperationName.String("execute_tool"), tracing.TaskID.String(t.ID),
		tracing.RequestID.String(upID))
	j.Span = span
	f.Tracer.Inject(ctx, &j.Req.Header)
	return ctx
}
