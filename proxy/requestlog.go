package proxy

import (
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/wire"
)

// Request logs and metrics: one log line and one count per request, when
// its handler returns or, for a streamed answer, when the stream ends.

// reqRecord is what the request log line reports, copied out of the
// RequestCtx when the handler returns.
type reqRecord struct {
	id         uint64
	httpMethod string
	status     int
	method     string
	outcome    string
	session    string // hashed
	taskID     string
	start      time.Time
	ttfb       time.Duration // for streams: until the handler returned
	span       trace.Span    // nil: not traced
}

func (h *Handler) record(rc *fasthttp.RequestCtx, info *wire.Info, start time.Time) reqRecord {
	r := reqRecord{id: rc.ID(), status: rc.Response.StatusCode(), method: info.Method, outcome: info.Outcome,
		taskID: info.TaskID, start: start, span: info.Span}
	if h.log.GetLevel() <= zerolog.WarnLevel {
		r.httpMethod = string(rc.Method())
		if info.SessionLog != "" {
			r.session = info.SessionLog
		} else if sid := rc.Request.Header.Peek(wire.HeaderSessionID); len(sid) > 0 {
			r.session = h.id.hashShort(sid)
		}
	}
	return r
}

// streamEnd logs and counts a streamed request once both its handler
// returned (handlerDone: the record) and its stream ended (end: the
// outcome), in whichever order they come (fasthttp may run a stream
// writer before the handler returns).
type streamEnd struct {
	h        *Handler
	rec      reqRecord
	outcome  string
	arrivals atomic.Int32
}

// beginStream marks info's answer as a stream logged at its end; the
// stream must call end exactly once.
func (h *Handler) beginStream(info *wire.Info) *streamEnd {
	h.m.openStreams.Inc()
	se := &streamEnd{h: h}
	info.Stream = se
	return se
}

func (se *streamEnd) handlerDone(rec reqRecord) {
	se.rec = rec
	se.rec.ttfb = time.Since(rec.start)
	se.arrive()
}

// end records how the stream ended: "" keeps the request's outcome (from
// the handler, or its HTTP status), or an outcome such as
// wire.OutcomeClientGone or "rpc_error".
func (se *streamEnd) end(outcome string) {
	se.outcome = outcome
	se.arrive()
}

// End is end, for a streamed pass-through answer (upstream.StreamEnd).
func (se *streamEnd) End(outcome string) { se.end(outcome) }

func (se *streamEnd) arrive() {
	if se.arrivals.Add(1) != 2 {
		return
	}
	se.h.m.openStreams.Dec()
	if se.outcome != "" {
		se.rec.outcome = se.outcome
	}
	se.h.logRequest(&se.rec, time.Since(se.rec.start))
}

// logRequest counts the request and writes its log line.
func (h *Handler) logRequest(r *reqRecord, dur time.Duration) {
	status := r.status
	if r.outcome == "" {
		switch {
		case status >= 500:
			r.outcome = "upstream_error"
		case status >= 400:
			r.outcome = "http_error"
		default:
			r.outcome = "ok"
		}
	}
	h.m.requests.WithLabelValues(wire.MetricLabel(r.method), r.outcome).Inc()
	h.m.observeRequest(r.method, dur)
	if r.span != nil {
		endSpan(r)
	}
	lvl := zerolog.InfoLevel
	if status >= 500 {
		lvl = zerolog.WarnLevel
	}
	e := h.log.WithLevel(lvl)
	if !e.Enabled() {
		return
	}
	e = e.Uint64(wire.LogReqID, r.id).
		Str(logHTTPMethod, r.httpMethod).
		Int(wire.LogStatus, status).
		Str(logOutcome, r.outcome).
		Float64(logDuration, ms(dur))
	if r.ttfb > 0 {
		e = e.Float64(logTTFB, ms(r.ttfb))
	}
	if r.method != "" {
		e = e.Str(wire.LogRPCMethod, r.method)
	}
	if r.session != "" {
		e = e.Str(wire.LogSession, r.session)
	}
	if r.taskID != "" {
		e = e.Str(wire.LogTaskID, r.taskID)
	}
	if r.span != nil {
		traceID, spanID := tracing.LogIDs(r.span)
		e = e.Str(wire.LogTraceID, traceID).Str(wire.LogSpanID, spanID)
	}
	e.Msg("request")
}

// ms is d in milliseconds with microsecond precision.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Log field names (each used once per line: zerolog keeps duplicates).
const (
	logHTTPMethod = "http_method"
	logOutcome    = "outcome"
	logDuration   = "dur_ms"  // until the answer ended (streams: its last byte)
	logTTFB       = "ttfb_ms" // streams: until the answer's headers were ready
	logErrorKind  = "error_kind"
	logPeer       = "peer"
)
