package wire

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/taskstore"
)

// Front is what the front (package proxy) gives every era: the shared
// parts (the engine, the store, the upstream client), the settings the
// eras read, and hooks into the front's own work (pass-through, identity,
// streams' logging). Like httputil.ReverseProxy's hooks, each field says
// what it does; the front sets all of them before the first request and
// never changes them afterwards, so a Front is safe for concurrent use.
// Eras must not keep the RequestCtx, Request or Info handed to a hook
// past the request's handler.
type Front struct {
	Config Config
	// Eng runs the tasks. Root is the engine's root context (ends on
	// Close).
	Eng  *engine.Engine
	Root context.Context
	// Store is the task store (sessions' versions and bindings; tasks go
	// through Eng).
	Store taskstore.Store
	// Up is the one client of the upstream.
	Up upstream.Transport
	// Log is the front's logger.
	Log *zerolog.Logger
	// Tracer makes spans; nil when tracing is off.
	Tracer *tracing.Tracer
	// Native is set once the upstream declared tasks itself (and the
	// policy's ownTasks is off): from then on taskgate does nothing
	// task-related (P-01).
	Native atomic.Bool
	// Waiters counts requests waiting for a task's result (a gauge).
	Waiters interface {
		Inc()
		Dec()
	}

	// Policy returns the current policy.
	Policy func() *policy.Policy
	// Owner derives the task owner of a request (T-74); identified is
	// false for anonymous callers.
	Owner func(hdr *fasthttp.RequestHeader) (owner string, identified bool)
	// Credential is the store's form of the request's credential (for
	// session bindings).
	Credential func(hdr *fasthttp.RequestHeader) string
	// BindSession binds a session the upstream just opened to the
	// credential cred that opened it.
	BindSession func(log *zerolog.Logger, sid, cred string)
	// DeleteSession serves a client's DELETE of its session while task
	// calls may still run on it; false: forward the DELETE.
	DeleteSession func(rc *fasthttp.RequestCtx, info *Info) bool
	// KeyedHash is HMAC-SHA256(owner key, domain NUL v), hex.
	KeyedHash func(domain string, v []byte) string
	// HashShort is what logs show instead of a session id.
	HashShort func(v []byte) string
	// RememberVersion records a bridged session's upstream protocol
	// version.
	RememberVersion func(ctx context.Context, sid, version string) error

	// Pass forwards the request as it came and relays the answer (id is
	// the request's JSON-RPC id for errors, nil for none).
	Pass func(rc *fasthttp.RequestCtx, info *Info, id []byte)
	// Forward forwards rc.Request and relays the upstream's answer with
	// its response message rewritten by the function fn returns for the
	// upstream's response (in the upstream's framing, JSON or SSE).
	Forward func(rc *fasthttp.RequestCtx, info *Info, id []byte, fn func(resp *fasthttp.Response) func(msg []byte) []byte)
	// PrepareUpstream readies req (the client's request) to be sent
	// upstream: hop-by-hop headers, Host, a bridged protocol version.
	PrepareUpstream func(rc *fasthttp.RequestCtx, req *fasthttp.Request)
	// RelayResponse finishes an upstream answer copied into rc.Response.
	RelayResponse func(rc *fasthttp.RequestCtx)
	// UpstreamFailed answers a request whose upstream exchange failed.
	UpstreamFailed func(rc *fasthttp.RequestCtx, info *Info, id []byte, err error)
	// ObserveUpstream records how long an upstream exchange of method took.
	ObserveUpstream func(method string, d time.Duration)
	// BeginStream marks info's answer as a stream, logged and counted when
	// its End is called.
	BeginStream func(info *Info) StreamEnd
}

// Config is what the eras read of the front's configuration (the fields
// of proxy.Config of the same names).
type Config struct {
	MaxResultSize     int
	KeepAlive         time.Duration
	TaskRate          float64
	MaxTasksPerOwner  int
	ProcessID         string
	StoreTimeout      time.Duration
	StreamMaxLifetime time.Duration
	PromoteWindow     time.Duration
}

// CtxOf is the context of info's request: the front's root context, with
// the request's trace span when it is traced.
func (f *Front) CtxOf(info *Info) context.Context {
	if info.Ctx != nil {
		return info.Ctx
	}
	return f.Root
}

// WaitCtxOf is the context of a result wait of info's request: the
// engine's WaitRoot (on shutdown the wait goes on until this process's
// calls have recorded their outcomes, so it ends with one), carrying the
// request's trace span when the request is traced.
func (f *Front) WaitCtxOf(info *Info) context.Context {
	if info.Ctx == nil {
		return f.Eng.WaitRoot()
	}
	return trace.ContextWithSpan(f.Eng.WaitRoot(), trace.SpanFromContext(info.Ctx))
}

// LogOf is the logger of info's request: the front's, with the trace
// context when the request is traced.
func (f *Front) LogOf(info *Info) *zerolog.Logger {
	if info.Log != nil {
		return info.Log
	}
	return f.Log
}

// SessionKey is the store's name for a client's MCP session.
func (f *Front) SessionKey(sid []byte) string {
	if len(sid) == 0 {
		return ""
	}
	return f.KeyedHash("mcp-session", sid)
}

// LocalJob returns owner's task call taskID when it runs in this process.
func (f *Front) LocalJob(owner, taskID string) *Job {
	if ej := f.Eng.LocalJob(owner, taskID); ej != nil {
		return JobOf(ej)
	}
	return nil
}

// HTTP headers the eras read.
const (
	HeaderSessionID       = "Mcp-Session-Id"
	HeaderProtocolVersion = "Mcp-Protocol-Version"
	HeaderLastEventID     = "Last-Event-Id"
)

// OutcomeClientGone is the outcome of a request whose client closed the
// connection before the answer ended.
const OutcomeClientGone = upstream.OutcomeClientGone
