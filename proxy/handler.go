package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/sysconn"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// Config configures a Handler. Zero fields take the documented defaults.
type Config struct {
	// Upstream is the URL of the upstream MCP endpoint, e.g.
	// http://127.0.0.1:3000/mcp. Required. POSTs to its path are inspected;
	// every other request passes through untouched.
	Upstream string
	// RewriteHost sends the upstream's host in the Host header instead of
	// the client's. Default false: Host and Origin reach the upstream as the
	// client sent them, so the upstream's DNS-rebinding protection works.
	RewriteHost bool
	// MaxBodySize bounds request bodies (413 above it). Default 4 MiB.
	MaxBodySize int
	// MaxResultSize bounds a task's upstream result and any upstream answer
	// taskgate must buffer to rewrite (initialize, tools/list). Default 32 MiB.
	MaxResultSize int
	// StreamIdleTimeout cuts an upstream answer that sends nothing for this
	// long (SSE streams and slow JSON answers alike). Default 10m.
	StreamIdleTimeout time.Duration
	// StreamMaxLifetime caps how long one proxied answer (typically an SSE
	// stream) may last; the client then resumes with Last-Event-ID.
	// Default 1h.
	StreamMaxLifetime time.Duration
	// UpstreamIdleConn is how long an idle upstream keep-alive connection is
	// kept; keep it below the upstream's own idle limit: a request written on a
	// connection the upstream is closing fails although the upstream never
	// saw it.
	// Default 3s.
	UpstreamIdleConn time.Duration
	// DialTimeout bounds connecting to the upstream. Default 5s.
	DialTimeout time.Duration
	// OwnerKey keys the hash that turns an Authorization header (or a
	// session id) into a task owner. Replicas sharing a store must share it.
	// Default: random per process (tasks then only resolve on this process).
	OwnerKey []byte
	// ListPageSize is the tasks/list page size. Default 50.
	ListPageSize int
	// KeepAlive is the interval of SSE comments on long tasks/result waits.
	// Default 15s.
	KeepAlive time.Duration
	// Lease bounds how long a task whose runner died (a killed process)
	// stays working: another process sharing the store fails it at most
	// Lease after the runner's last renewal (engine.LeaseTTL,
	// engine.LeaseSkew, engine.LeaseCheck). Default 15s.
	Lease time.Duration
	// MaxTasksPerOwner caps an owner's unfinished tasks. Default 100; <0 = none.
	MaxTasksPerOwner int
	// AllowedOrigins, when non-empty, answers 403 to requests whose Origin
	// header is present and not in the list (H-02). Default: not checked
	// (the upstream checks Origin itself).
	AllowedOrigins []string
	// ProcessID names this process in leases. Default: hostname + random.
	ProcessID string
	// StoreTimeout is what one task-store operation may take. The store
	// bounds each operation itself (taskstore.Config.OpTimeout; give it the
	// same value); taskgate uses StoreTimeout to cap the session lookups on
	// the pass-through path (at most 500ms) and a runner's last attempt to
	// record an outcome while shutting down. Default 3s.
	StoreTimeout time.Duration
	// TaskRate limits task operations (task calls and tasks/*) per owner
	// and process, in operations per second; lookups of unknown tasks count
	// as 5 (T-77, E-42). Default 100; < 0 disables.
	TaskRate float64
	// TaskBurst is the bucket size of TaskRate. Default 500.
	TaskBurst int
	// QueueMax bounds a task's queue of undelivered messages; over it the
	// oldest progress, then log notifications are dropped, never requests.
	// Default 256.
	QueueMax int
	// UpstreamTLS configures TLS to an https upstream: root CAs, client
	// certificates, ServerName. Default: the system's roots, the URL's host
	// as ServerName, TLS 1.2 or newer. Unused for an http upstream.
	UpstreamTLS *tls.Config
	// Dial, when set, opens every connection to the upstream instead of a
	// TCP dial of Upstream's host: pass-through, rewritten answers, task
	// calls, messages to the upstream and PingUpstream all use it. A stdio
	// upstream (package proxy/stdio) is reached this way, in process.
	// Upstream must still be an http URL (its path is the MCP endpoint).
	Dial func(ctx context.Context) (net.Conn, error)
	// NetIO makes upstream connections plain net.Conns instead of
	// sysconn.Conns (direct system calls, see package sysconn). Default
	// false: direct calls, which cost less CPU per request.
	NetIO bool
	// Tracer makes OpenTelemetry spans of intercepted requests, task calls
	// and store operations (package tracing). Default nil: no tracing, at
	// no cost.
	Tracer *tracing.Tracer
	// PromoteWindow is how long a tools/call of the MCP 2026-07-28 wire
	// that may become a task runs before it does: a call that ends sooner
	// gets its plain result, one whose upstream asks the client something
	// sooner gets an InputRequiredResult. Default 250ms.
	PromoteWindow time.Duration
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.MaxBodySize <= 0 {
		c.MaxBodySize = DefaultMaxBodySize
	}
	if c.MaxResultSize <= 0 {
		c.MaxResultSize = DefaultMaxResultSize
	}
	def(&c.StreamIdleTimeout, DefaultStreamIdleTimeout)
	def(&c.StreamMaxLifetime, DefaultStreamMaxLifetime)
	def(&c.UpstreamIdleConn, DefaultUpstreamIdleConn)
	def(&c.DialTimeout, DefaultDialTimeout)
	def(&c.KeepAlive, DefaultKeepAlive)
	def(&c.Lease, DefaultLease)
	def(&c.StoreTimeout, DefaultStoreTimeout)
	def(&c.PromoteWindow, DefaultPromoteWindow)
	if c.TaskRate == 0 {
		c.TaskRate = DefaultTaskRate
	}
	if c.TaskBurst <= 0 {
		c.TaskBurst = DefaultTaskBurst
	}
	if c.QueueMax <= 0 {
		c.QueueMax = DefaultQueueMax
	}
	if c.ListPageSize <= 0 {
		c.ListPageSize = DefaultListPageSize
	}
	if c.MaxTasksPerOwner == 0 {
		c.MaxTasksPerOwner = DefaultMaxTasksPerOwner
	}
	if len(c.OwnerKey) == 0 {
		c.OwnerKey = make([]byte, 32)
		_, _ = rand.Read(c.OwnerKey)
	}
	if c.ProcessID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.ProcessID = host + "-" + hex.EncodeToString(b)
	}
}

// Handler proxies MCP traffic to one upstream and serves the tasks feature
// in front of it. It is safe for concurrent use. Close stops it.
type Handler struct {
	cfg   Config
	pol   atomic.Pointer[policy.Policy] // SetPolicy swaps it; read through policy()
	store taskstore.Store
	log   zerolog.Logger
	m     *Metrics
	// up is the one client of the upstream: every exchange with it goes
	// through up (tests may wrap it to inject faults).
	up      upstream.Transport
	mcpPath []byte // the upstream's MCP endpoint path (up's Path)

	origins map[string]bool

	// f is what the eras share with the front (package wire): the
	// engine, the store, the upstream, and hooks into this Handler.
	f *wire.Front
	// eras serve the protocol revisions (eras.go), asked in order.
	eras []wire.Era

	// id derives owners and guards sessions (owner.go, sessions.go);
	// bridge rewrites the protocol version of bridged sessions (versions.go).
	id     ident
	bridge versionBridge

	// eng runs the tasks (package engine): creation, runners, waits,
	// cancels, messages, leases, limits. root is its context.
	eng  *engine.Engine
	root context.Context
	// tr makes the spans; nil when tracing is off (trace.go).
	tr *tracing.Tracer
}

// SetPolicy replaces the policy for requests that start from now on;
// requests and task calls already under way keep the policy they started
// with. pol must not be nil. It is safe for concurrent use.
func (h *Handler) SetPolicy(pol *policy.Policy) {
	if pol != nil {
		h.pol.Store(pol)
		h.m.zeroTools(pol.Patterns())
	}
}

// policy returns the current policy.
func (h *Handler) policy() *policy.Policy { return h.pol.Load() }

// New validates cfg and returns a Handler. pol nil means policy.Default();
// m nil means metrics are not recorded.
func New(cfg Config, pol *policy.Policy, store taskstore.Store, log zerolog.Logger, m *Metrics) (*Handler, error) {
	cfg.setDefaults()
	if store == nil {
		return nil, errors.New("proxy: a task store is required")
	}
	if pol == nil {
		pol = policy.Default()
	}
	u, err := url.Parse(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("proxy: upstream %q: %w", cfg.Upstream, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("proxy: upstream %q: scheme must be http or https", cfg.Upstream)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("proxy: upstream %q: no host", cfg.Upstream)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("proxy: upstream %q: must not have a query or fragment", cfg.Upstream)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if cfg.Tracer != nil {
		store = cfg.Tracer.Store(store)
	}
	up := upstream.New(upstream.Options{
		URL:               u,
		RewriteHost:       cfg.RewriteHost,
		TLS:               cfg.UpstreamTLS,
		Dial:              cfg.Dial,
		NetIO:             cfg.NetIO,
		DialTimeout:       cfg.DialTimeout,
		IdleConn:          cfg.UpstreamIdleConn,
		StreamIdleTimeout: cfg.StreamIdleTimeout,
		StreamMaxLifetime: cfg.StreamMaxLifetime,
	})
	h := &Handler{
		cfg:     cfg,
		store:   store,
		log:     log,
		m:       m,
		up:      up,
		mcpPath: up.Path(),
		tr:      cfg.Tracer,
	}
	h.pol.Store(pol)
	m.zeroTools(pol.Patterns())
	h.SetOwnerKey(cfg.OwnerKey)
	if len(cfg.AllowedOrigins) > 0 {
		h.origins = make(map[string]bool, len(cfg.AllowedOrigins))
		for _, o := range cfg.AllowedOrigins {
			h.origins[strings.TrimRight(o, "/")] = true
		}
	}
	h.id.store, h.id.log, h.id.storeTimeout = store, &h.log, cfg.StoreTimeout
	h.id.bindings.max = 8192
	h.bridge = versionBridge{store: store, log: &h.log, policy: h.policy, storeTimeout: cfg.StoreTimeout, downUntil: &h.id.storeDownUntil}
	h.bridge.versions.init(8192)
	h.f = h.newFront()
	h.eng = engine.New(engine.Config{
		ProcessID:        cfg.ProcessID,
		Lease:            cfg.Lease,
		StoreTimeout:     cfg.StoreTimeout,
		MaxTasksPerOwner: cfg.MaxTasksPerOwner,
		QueueMax:         cfg.QueueMax,
		KeepAlive:        cfg.KeepAlive,
		ListPageSize:     cfg.ListPageSize,
		TaskRate:         cfg.TaskRate,
		TaskBurst:        cfg.TaskBurst,
		HoldFor:          holdYoungMax,
		HoldYoung:        holdYoungFor,
	}, store, &h.log, &wire.Runner{F: h.f}, engineHooks(m, h.policy, h.tr, func() context.Context { return h.root }))
	h.root = h.eng.Root()
	h.f.Eng, h.f.Root = h.eng, h.root
	h.id.root, h.bridge.root, h.bridge.native = h.root, h.root, &h.f.Native
	h.eras = newEras(h.f)
	return h, nil
}

// Close stops background work: runners still going are abandoned to lease
// recovery after ctx ends (their tasks stay owned by this process until the
// lease lapses). It waits for goroutines to return or ctx to end.
func (h *Handler) Close(ctx context.Context) error {
	_ = h.eng.Close(ctx)
	for _, e := range h.eras {
		e.Close()
	}
	h.up.Close()
	return nil
}

// Running reports how many background task calls are in flight.
func (h *Handler) Running() int64 { return h.m.runningNow.Load() }

// ServeFastHTTP implements fasthttp.RequestHandler. It checks what the
// front owns (the HTTP method, ambiguous identity headers, Origin, the
// path, the session's binding to its credential), parses a POST's
// envelope, and asks the eras in order (eras.go); what no era serves
// passes through.
func (h *Handler) ServeFastHTTP(rc *fasthttp.RequestCtx) {
	start := time.Now()
	h.m.inflight.Inc()
	// Pooled: the eras are called through an interface, which would make a
	// request of the stack escape to the heap on every call.
	r := requestPool.Get().(*wire.Request)
	r.RC = rc
	info := &r.Info
	defer func() {
		h.m.inflight.Dec()
		rec := h.record(rc, info, start)
		if info.Stream != nil {
			info.Stream.(*streamEnd).handlerDone(rec) // logged when the stream ends
		} else {
			h.logRequest(&rec, time.Since(start))
		}
		*r = wire.Request{}
		requestPool.Put(r)
		// A whole answer: fasthttp writes it and then reads the next
		// request (or closes); the read sends it (sysconn.WriteLater).
		if !rc.Response.IsBodyStream() && !rc.Response.ImmediateHeaderFlush {
			if sc, ok := rc.Conn().(*sysconn.Conn); ok {
				sc.HoldNextWrite()
			}
		}
	}()

	if rc.IsConnect() {
		// A tunnel is not an MCP request; forwarding it would make the
		// upstream answer a method it never serves (RFC 9110 §9.3.6).
		info.Outcome = "method_not_allowed"
		rc.Response.Header.Set(fasthttp.HeaderAllow, "GET, POST, DELETE")
		wire.HTTPError(rc, fasthttp.StatusMethodNotAllowed, nil, wire.CodeInvalidRequest, "taskgate: CONNECT is not supported")
		return
	}
	if name := ambiguousHeader(&rc.Request.Header); name != "" {
		// Two credentials or two session ids: which one taskgate would
		// use (the first) and which one the upstream would use may
		// differ, so the request is refused rather than guessed at.
		info.Outcome = "ambiguous_header"
		wire.HTTPError(rc, fasthttp.StatusBadRequest, nil, wire.CodeInvalidRequest, "taskgate: more than one "+name+" header")
		rc.SetConnectionClose()
		return
	}
	if h.origins != nil {
		if o := rc.Request.Header.Peek(fasthttp.HeaderOrigin); len(o) > 0 && !h.origins[string(o)] {
			info.Outcome = "origin_denied"
			rc.Response.Header.SetContentType("application/json")
			rc.SetStatusCode(fasthttp.StatusForbidden)
			rc.SetBody(wire.AppendError(nil, nil, wire.CodeInvalidRequest, "origin not allowed"))
			return
		}
	}
	if !bytes.Equal(rc.Path(), h.mcpPath) {
		h.pass(rc, info, nil)
		return
	}
	if sid := rc.Request.Header.Peek(wire.HeaderSessionID); len(sid) > 0 && !h.id.sessionAllowed(rc, info, sid) {
		return // a foreign or ended session: 404, never forwarded
	}
	if rc.IsPost() {
		env, err := wire.ParseEnvelope(rc.PostBody())
		if err != nil {
			code := wire.CodeInvalidRequest
			if errors.Is(err, jsonx.ErrSyntax) || errors.Is(err, jsonx.ErrTooDeep) || errors.Is(err, jsonx.ErrTrailing) {
				code = wire.CodeParseError
			}
			info.Outcome = "malformed"
			wire.HTTPError(rc, fasthttp.StatusBadRequest, nil, code, "taskgate: "+err.Error())
			return
		}
		r.Env = env
		if env.Kind == jsonx.KindBatch {
			info.Method = wire.MetricBatch
		} else {
			info.Method = env.Method
			if h.tr != nil && env.Spec != nil && env.Spec.Traced {
				h.startSpan(rc, info, &r.Env)
			}
		}
	}
	for _, e := range h.eras {
		if e.Serve(r) {
			return
		}
	}
	h.pass(rc, info, r.Env.ID)
}

// requestPool holds the wire.Requests of ServeFastHTTP.
var requestPool = sync.Pool{New: func() any { return new(wire.Request) }}

// ambiguousHeader returns the name of a header that identifies the caller
// or its session and appears more than once, or "".
func ambiguousHeader(hdr *fasthttp.RequestHeader) string {
	for _, name := range [...]string{fasthttp.HeaderAuthorization, wire.HeaderSessionID} {
		if len(hdr.PeekAll(name)) > 1 {
			return name
		}
	}
	return ""
}

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

// ErrorHandler answers errors fasthttp finds before the handler runs (body
// too large, malformed HTTP) with a JSON-RPC error. Set it as
// fasthttp.Server.ErrorHandler. The log line names the kind of error and
// the peer, never the error's text: fasthttp puts the raw request buffer
// (tokens, bodies) into it.
func (h *Handler) ErrorHandler(rc *fasthttp.RequestCtx, err error) {
	kind, status := requestErrorKind(err)
	msg := "taskgate: malformed HTTP request (" + kind + ")"
	switch status {
	case fasthttp.StatusRequestEntityTooLarge:
		msg = fmt.Sprintf("taskgate: request body exceeds the limit of %d bytes", h.cfg.MaxBodySize)
	case fasthttp.StatusRequestHeaderFieldsTooLarge:
		msg = "taskgate: request header too large"
	case fasthttp.StatusRequestTimeout:
		msg = "taskgate: request not received in time"
	}
	outcome := "malformed"
	if kind == kindBodyTooLarge {
		outcome = "too_large"
	}
	h.m.requests.WithLabelValues("", outcome).Inc()
	h.log.Warn().Int(wire.LogStatus, status).Str(logErrorKind, kind).Str(logPeer, rc.RemoteAddr().String()).Msg("request refused")
	wire.HTTPError(rc, status, nil, wire.CodeInvalidRequest, msg)
	rc.SetConnectionClose()
	if kind == kindBodyTooLarge {
		h.answerBeforeClose(rc)
	}
}

// Draining an oversized body after its 413: at most drainMax bytes, for at
// most drainFor.
const (
	drainMax = 64 << 20
	drainFor = 2 * time.Second
)

// answerBeforeClose sends the answer in rc.Response now, ends the
// connection's write side and reads what the client still sends of its
// body before fasthttp closes the connection. fasthttp refuses an
// oversized body without reading it; closing a socket with unread data
// makes the kernel send a reset, which discards the answer from the
// client's receive buffer before the client (still busy sending) reads
// it. fasthttp's own write of the answer, after this, fails on the closed
// write side and is dropped. Without a way to end the write side (a test
// pipe), nothing happens here.
func (h *Handler) answerBeforeClose(rc *fasthttp.RequestCtx) {
	c := rc.Conn()
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return
	}
	bw := bufio.NewWriterSize(c, 512)
	if rc.Response.Write(bw) != nil || bw.Flush() != nil || cw.CloseWrite() != nil {
		return
	}
	n := int64(drainMax)
	if cl := rc.Request.Header.ContentLength(); cl >= 0 {
		n = min(n, int64(cl))
	}
	_ = c.SetReadDeadline(time.Now().Add(drainFor))
	_, _ = io.CopyN(io.Discard, c, n)
}

// PingUpstream checks that the upstream accepts TCP connections and, when
// it is https, completes a TLS handshake that taskgate trusts.
func (h *Handler) PingUpstream(ctx context.Context) error { return h.up.Ping(ctx) }

// SessionLabel is what taskgate's logs show instead of the session id sid
// (a keyed hash), for components that log sessions too.
func (h *Handler) SessionLabel(sid []byte) string { return h.id.hashShort(sid) }

// holdYoungFor is the age below which a tasks/get of a local call waits
// up to holdYoungMax for its end (engine.Config.HoldYoung, HoldFor): a client
// polling a call of a few milliseconds learns of its end in the first
// answer rather than one pollInterval (pollMin) later.
const (
	holdYoungFor = 200 * time.Millisecond
	holdYoungMax = 5 * time.Millisecond
)

// CancelTask cancels owner's unfinished task id for an operator, exactly
// as the owner's own tasks/cancel does: the store records the cancel with
// statusMessage msg, which wakes the task's runner on whichever replica
// runs the call, and a call running in this process is aborted at once.
// taskstore.ErrTerminal when the task already finished, ErrNotFound when
// there is no such task.
func (h *Handler) CancelTask(ctx context.Context, owner, id, msg string) (*taskstore.Task, error) {
	return h.eng.Cancel(ctx, owner, id, msg, true)
}
