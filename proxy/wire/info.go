package wire

import (
	"context"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

// Request is one client message on its way through the front and an era:
// the fasthttp request, what its log line and metrics report, and its
// parsed envelope. The front takes it from a pool and gives it back when
// ServeFastHTTP returns: an era must not keep it (or Info, or Env) past
// its Serve, and stream writers get copies of what they need.
type Request struct {
	RC   *fasthttp.RequestCtx
	Info Info
	Env  Envelope
}

// Info collects what the request log line and metrics report.
type Info struct {
	Method  string
	Outcome string
	TaskID  string
	// SessionLog is the request's session id as logs show it, when
	// the front found it cached ("": computed for the log line).
	SessionLog string
	// Span is the request's trace span, Ctx the front's root context with
	// it, Log the front's logger with its ids; all nil when the request is
	// not traced.
	Span trace.Span
	Ctx  context.Context
	Log  *zerolog.Logger
	// Stream is set when the answer streams on after the handler
	// returns (Front.BeginStream): the request is logged and counted when
	// the stream ends, with the stream's outcome and whole duration.
	Stream StreamEnd
}

// StreamEnd records the end of a streamed answer. End must be called
// exactly once, from the stream writer, with "" (the request's outcome
// stands) or the stream's outcome (OutcomeClientGone, "rpc_error", ...).
type StreamEnd interface {
	End(outcome string)
}
