// Package tracing makes taskgate's OpenTelemetry spans: one server span per
// intercepted MCP request, a client span per background task call, child
// spans for task-store operations, all in the client's trace (W3C Trace
// Context, the traceparent header). It is configured only by the standard
// OTEL_* environment variables (FromEnv) and is off unless one of them asks
// for it: then FromEnv returns a nil *Tracer and callers skip every tracing
// step behind a nil check, so the request path does no tracing work at all.
//
// Span names and attributes follow the OpenTelemetry semantic conventions
// for MCP (mcp.method.name, mcp.session.id, mcp.protocol.version,
// jsonrpc.request.id, gen_ai.tool.name, error.type); no convention names a
// task id yet, so spans that concern a task carry mcp.task.id, taskgate's
// own name for it. README.md beside this file describes the setup.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of taskgate's spans. All but TaskID come from the
// OpenTelemetry semantic conventions (MCP, JSON-RPC, GenAI, errors).
const (
	MethodName      = attribute.Key("mcp.method.name")
	SessionID       = attribute.Key("mcp.session.id")
	ProtocolVersion = attribute.Key("mcp.protocol.version")
	RequestID       = attribute.Key("jsonrpc.request.id")
	ToolName        = attribute.Key("gen_ai.tool.name")
	OperationName   = attribute.Key("gen_ai.operation.name")
	ErrorType       = attribute.Key("error.type")
	NetTransport    = attribute.Key("network.transport")
	NetProtocol     = attribute.Key("network.protocol.name")
	// TaskID is the MCP task id. No semantic convention defines one yet;
	// mcp.task.id is taskgate's name, in the mcp namespace.
	TaskID = attribute.Key("mcp.task.id")
	// Outcome is taskgate's classification of how a request ended (its
	// request log line's outcome field).
	Outcome = attribute.Key("taskgate.outcome")
	// TaskStatus is a task's status in a lifecycle event.
	TaskStatus = attribute.Key("mcp.task.status")
	// StoreOp names a task-store operation (its span is "taskstore {op}").
	StoreOp = attribute.Key("taskgate.store.operation")
)

// Task lifecycle events, added to the spans of the task's calls.
const (
	EventCreated       = "task.created"
	EventInputRequired = "task.input_required"
	EventWorking       = "task.working"
	EventStopped       = "task.stopped"
	EventTerminal      = "task.terminal"
	EventLeaseLost     = "task.lease_lost"
)

// Tracer makes taskgate's spans. A nil *Tracer means tracing is off; its
// methods must not be called then (callers check for nil). It is safe for
// concurrent use.
type Tracer struct {
	tp   trace.TracerProvider
	tr   trace.Tracer
	prop propagation.TextMapPropagator
	// shutdown flushes and stops the SDK's provider (nil for a provider
	// the caller owns).
	shutdown func(context.Context) error
}

// instrumentation names taskgate's tracer (its instrumentation scope).
const instrumentation = "github.com/taskgate/taskgate/proxy/tracing"

// New returns a Tracer making spans with tp (tests pass an SDK provider
// with an in-memory exporter). The caller owns tp.
func New(tp trace.TracerProvider) *Tracer {
	return &Tracer{tp: tp, tr: tp.Tracer(instrumentation), prop: propagation.TraceContext{}}
}

// ErrConfig reports OTEL_* variables taskgate cannot honour.
var ErrConfig = errors.New("tracing: unsupported OpenTelemetry configuration")

// FromEnv builds a Tracer from the standard OpenTelemetry variables, or
// returns nil, nil when tracing is off. Tracing is on when
// OTEL_TRACES_EXPORTER is "otlp", or when it is unset and
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set; OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off.
// The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" or "http/protobuf" (the default, as
// the OpenTelemetry specification says). The exporters read the rest of
// OTEL_EXPORTER_OTLP_* themselves (endpoint, headers, TLS, timeout), the
// SDK reads OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG and OTEL_BSP_*,
// and the resource takes OTEL_SERVICE_NAME (default "taskgate") and
// OTEL_RESOURCE_ATTRIBUTES. version is service.version.
func FromEnv(ctx context.Context, version string) (*Tracer, error) {
	if !enabled(os.Getenv) {
		return nil, nil
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch proto {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%w: OTLP protocol %q (want grpc or http/protobuf)", ErrConfig, proto)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "taskgate")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	// Later options win: the environment's service name and attributes
	// override taskgate's defaults.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(),
		resource.WithFromEnv(), resource.WithHost())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t := New(tp)
	t.shutdown = tp.Shutdown
	return t, nil
}

// enabled applies FromEnv's on/off rule to the variables getenv reads.
func enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); {
	case exp == "none":
		return false
	case exp != "":
		return true // "otlp", or a value Check refuses
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Check reports OTEL_TRACES_EXPORTER values taskgate cannot honour (any
// exporter but otlp and none), so a typo fails at start instead of
// silently tracing nothing.
func Check(getenv func(string) string) error {
	for _, e := range strings.Split(getenv("OTEL_TRACES_EXPORTER"), ",") {
		switch strings.TrimSpace(e) {
		case "", "otlp", "none":
		default:
			return fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q (taskgate exports otlp or none)", ErrConfig, e)
		}
	}
	return nil
}

// Shutdown flushes the spans still buffered and stops exporting. It does
// nothing for a Tracer made by New.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// StartServer starts the server span of a request taskgate intercepts, as
// a child of the trace context in hdr (the client's traceparent), and
// returns parent with the span in it. name is "{mcp.method.name}
// {target}" or the method alone.
func (t *Tracer) StartServer(parent context.Context, hdr *fasthttp.RequestHeader, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx := t.prop.Extract(parent, requestCarrier{hdr})
	return t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// StartClient starts a client span (taskgate calling the upstream) as a
// child of the span in parent.
func (t *Tracer) StartClient(parent context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tr.Start(parent, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// StartInternal starts an internal span, a child of the span in parent
// when it has one, else the root of a new trace.
func (t *Tracer) StartInternal(parent context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tr.Start(parent, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// Inject writes the trace context of ctx's span into hdr (traceparent,
// and tracestate when there is one), replacing what the client sent, so
// the upstream's spans are children of taskgate's.
func (t *Tracer) Inject(ctx context.Context, hdr *fasthttp.RequestHeader) {
	hdr.Del(headerTraceparent)
	hdr.Del(headerTracestate)
	t.prop.Inject(ctx, requestCarrier{hdr})
}

const (
	headerTraceparent = "Traceparent"
	headerTracestate  = "Tracestate"
)

// requestCarrier is a fasthttp request header as a TextMapCarrier.
type requestCarrier struct{ h *fasthttp.RequestHeader }

func (c requestCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c requestCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c requestCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// LogIDs returns the trace and span id of span, hex-encoded, for log
// lines ("" when span has no valid context).
func LogIDs(span trace.Span) (traceID, spanID string) {
	sc := span.SpanContext()
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}
