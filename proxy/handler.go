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

	// native is set once the upstream declared tasks itself (and the
	// policy's ownTasks is off): from then on
	// taskgate does nothing task-related (P-01).
	native     atomic.Bool
	nativeOnce sync.Once
	ownOnce    sync.Once // logs once that the policy's ownTasks hides the upstream's tasks
	// sessionless: the upstream's last initialize answer had no
	// Mcp-Session-Id (a stateless server): its clients have no session
	// GET stream, so tasks/result also delivers a finished task's queued
	// messages (tasksMethod).
	sessionless atomic.Bool

	// w26 serves requests of the MCP 2026-07-28 wire (modern.go).
	w26 *modernWire

	versions versionCache
	bindings bindingCache             // session id -> owner binding (sessions.go)
	okey     atomic.Pointer[ownerKey] // SetOwnerKey swaps it; keyedHash reads it
	// storeDownUntil (unix ns) skips session-version lookups for a moment
	// after one failed, so pass-through does not wait on a dead store.
	storeDownUntil atomic.Int64
	// warned holds the sessions already warned about a task call without
	// MCP-Protocol-Version (warnedOnce).
	warnedMu sync.Mutex
	warned   map[string]struct{}

	// eng runs the tasks (package engine): creation, runners, waits,
	// cancels, messages, leases, limits. root is its context.
	eng  *engine.Engine
	root context.Context
	// tr makes the spans; nil when tracing is off (trace.go).
	tr *tracing.Tracer
	bg sync.WaitGroup // housekeeping loops of the wires (the 2026 wire's reaper)
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
	h.versions.init(8192)
	h.bindings.max = 8192
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
	}, store, &h.log, &taskUpstream{h: h}, h.engineHooks())
	h.root = h.eng.Root()
	h.w26 = newModernWire(h)
	h.bg.Add(1)
	go h.w26.reapLoop()
	return h, nil
}

// Close stops background work: runners still going are abandoned to lease
// recovery after ctx ends (their tasks stay owned by this process until the
// lease lapses). It waits for goroutines to return or ctx to end.
func (h *Handler) Close(ctx context.Context) error {
	_ = h.eng.Close(ctx)
	h.bg.Wait()
	h.up.Close()
	return nil
}

// Running reports how many background task calls are in flight.
func (h *Handler) Running() int64 { return h.m.runningNow.Load() }

// ServeFastHTTP implements fasthttp.RequestHandler.
func (h *Handler) ServeFastHTTP(rc *fasthttp.RequestCtx) {
	start := time.Now()
	h.m.inflight.Inc()
	var info reqInfo
	defer func() {
		h.m.inflight.Dec()
		rec := h.record(rc, &info, start)
		if info.stream != nil {
			info.stream.handlerDone(rec) // logged when the stream ends
		} else {
			h.logRequest(&rec, time.Since(start))
		}
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
		info.outcome = "method_not_allowed"
		rc.Response.Header.Set(fasthttp.HeaderAllow, "GET, POST, DELETE")
		h.httpRPCError(rc, fasthttp.StatusMethodNotAllowed, nil, codeInvalidRequest, "taskgate: CONNECT is not supported")
		return
	}
	if name := ambiguousHeader(&rc.Request.Header); name != "" {
		// Two credentials or two session ids: which one taskgate would
		// use (the first) and which one the upstream would use may
		// differ, so the request is refused rather than guessed at.
		info.outcome = "ambiguous_header"
		h.httpRPCError(rc, fasthttp.StatusBadRequest, nil, codeInvalidRequest, "taskgate: more than one "+name+" header")
		rc.SetConnectionClose()
		return
	}
	if h.origins != nil {
		if o := rc.Request.Header.Peek(fasthttp.HeaderOrigin); len(o) > 0 && !h.origins[string(o)] {
			info.outcome = "origin_denied"
			rc.Response.Header.SetContentType("application/json")
			rc.SetStatusCode(fasthttp.StatusForbidden)
			rc.SetBody(appendErrorResponse(nil, nil, codeInvalidRequest, "origin not allowed"))
			return
		}
	}
	if !bytes.Equal(rc.Path(), h.mcpPath) {
		h.pass(rc, &info, nil)
		return
	}
	if sid := rc.Request.Header.Peek(headerSessionID); len(sid) > 0 && !h.sessionAllowed(rc, &info, sid) {
		return // a foreign or ended session: 404, never forwarded
	}
	if !rc.IsPost() {
		if rc.IsDelete() && h.tasksActive(&rc.Request.Header) && h.deleteSession(rc, &info) {
			return // the session's tasks still run: it ends upstream after them
		}
		if rc.IsGet() && !h.native.Load() {
			if taskID, rpcID, ok := parseResultEventID(string(rc.Request.Header.Peek(headerLastEventID))); ok {
				info.method, info.taskID = methodTasksResult, taskID
				h.resumeResult(rc, &info, taskID, rpcID)
				return
			}
			// A session's GET stream, or, in front of an upstream without
			// sessions, the GET stream of a client that identifies itself
			// (Authorization: its own tasks only). Without either the
			// stream would merge the tasks of every anonymous caller.
			if h.tasksActive(&rc.Request.Header) && (len(rc.Request.Header.Peek(headerSessionID)) > 0 ||
				len(rc.Request.Header.Peek(fasthttp.HeaderAuthorization)) > 0) {
				info.method = metricGetStream
				h.getStream(rc, &info)
				return
			}
		}
		h.pass(rc, &info, nil)
		return
	}
	env, err := parseEnvelope(rc.PostBody())
	if err != nil {
		code := codeInvalidRequest
		if errors.Is(err, jsonx.ErrSyntax) || errors.Is(err, jsonx.ErrTooDeep) || errors.Is(err, jsonx.ErrTrailing) {
			code = codeParseError
		}
		info.outcome = "malformed"
		h.httpRPCError(rc, fasthttp.StatusBadRequest, nil, code, "taskgate: "+err.Error())
		return
	}
	if env.kind == jsonx.KindBatch {
		info.method = metricBatch
		for i := range env.batch {
			if h.refusedInBatch(env.batch[i].spec, &rc.Request.Header) {
				info.outcome = "batch_refused"
				h.httpRPCError(rc, fasthttp.StatusBadRequest, nil, codeInvalidRequest,
					fmt.Sprintf("taskgate: %s cannot be sent in a batch", env.batch[i].method))
				return
			}
		}
		h.pass(rc, &info, nil)
		return
	}
	info.method = env.method
	if h.tr != nil && env.spec.traced() {
		h.startSpan(rc, &info, &env)
	}
	if h.w26.serve(rc, &info, &env) {
		return
	}
	if env.isResponse() && env.id != nil && !h.native.Load() &&
		h.tasksActive(&rc.Request.Header) && h.clientAnswer(rc, &info, &env) {
		return // E-35: the answer to a relayed request went to its task's runner
	}
	// The method table (methods.go) decides the rest.
	spec := env.spec
	switch {
	case h.native.Load() && (spec == nil || !spec.always),
		spec == nil || spec.serve == none:
		h.pass(rc, &info, env.id)
	case spec.tasksOnly && !h.tasksActive(&rc.Request.Header):
		// A session not at 2025-11-25 has no tasks from taskgate: the
		// upstream answers as if taskgate were not there (T-11).
		h.pass(rc, &info, env.id)
	case spec.needsID && !env.isRequest():
		info.outcome = "invalid"
		h.httpRPCError(rc, fasthttp.StatusBadRequest, nil, codeInvalidRequest, "taskgate: "+env.method+" must be a request with an id")
	default:
		h.serveMethod(spec, rc, &info, &env)
	}
}

// ambiguousHeader returns the name of a header that identifies the caller
// or its session and appears more than once, or "".
func ambiguousHeader(hdr *fasthttp.RequestHeader) string {
	for _, name := range [...]string{fasthttp.HeaderAuthorization, headerSessionID} {
		if len(hdr.PeekAll(name)) > 1 {
			return name
		}
	}
	return ""
}

// outcomeClientGone is the outcome of a request whose client closed the
// connection before the answer ended.
const outcomeClientGone = upstream.OutcomeClientGone

// reqInfo collects what the request log line and metrics report.
type reqInfo struct {
	method  string
	outcome string
	taskID  string
	// sessionLog is the request's session id as logs show it, when
	// sessionAllowed found it cached ("": computed for the log line).
	sessionLog string
	// span is the request's trace span, ctx h.root with it, log h.log
	// with its ids; all nil when the request is not traced (trace.go).
	span trace.Span
	ctx  context.Context
	log  *zerolog.Logger
	// stream is set when the answer streams on after the handler
	// returns (beginStream): the request is logged and counted when the
	// stream ends, with the stream's outcome and whole duration.
	stream *streamEnd
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

func (h *Handler) record(rc *fasthttp.RequestCtx, info *reqInfo, start time.Time) reqRecord {
	r := reqRecord{id: rc.ID(), status: rc.Response.StatusCode(), method: info.method, outcome: info.outcome,
		taskID: info.taskID, start: start, span: info.span}
	if h.log.GetLevel() <= zerolog.WarnLevel {
		r.httpMethod = string(rc.Method())
		if info.sessionLog != "" {
			r.session = info.sessionLog
		} else if sid := rc.Request.Header.Peek(headerSessionID); len(sid) > 0 {
			r.session = h.hashShort(sid)
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
func (h *Handler) beginStream(info *reqInfo) *streamEnd {
	h.m.openStreams.Inc()
	se := &streamEnd{h: h}
	info.stream = se
	return se
}

func (se *streamEnd) handlerDone(rec reqRecord) {
	se.rec = rec
	se.rec.ttfb = time.Since(rec.start)
	se.arrive()
}

// end records how the stream ended: "" keeps the request's outcome (from
// the handler, or its HTTP status), or an outcome such as
// outcomeClientGone or "rpc_error".
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
	h.m.requests.WithLabelValues(metricMethod(r.method), r.outcome).Inc()
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
	e = e.Uint64(logReqID, r.id).
		Str(logHTTPMethod, r.httpMethod).
		Int(logStatus, status).
		Str(logOutcome, r.outcome).
		Float64(logDuration, ms(dur))
	if r.ttfb > 0 {
		e = e.Float64(logTTFB, ms(r.ttfb))
	}
	if r.method != "" {
		e = e.Str(logRPCMethod, r.method)
	}
	if r.session != "" {
		e = e.Str(logSession, r.session)
	}
	if r.taskID != "" {
		e = e.Str(logTaskID, r.taskID)
	}
	if r.span != nil {
		traceID, spanID := tracing.LogIDs(r.span)
		e = e.Str(logTraceID, traceID).Str(logSpanID, spanID)
	}
	e.Msg("request")
}

// ms is d in milliseconds with microsecond precision.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Log field names (each used once per line: zerolog keeps duplicates).
const (
	logReqID      = "req_id"
	logHTTPMethod = "http_method"
	logStatus     = "status"
	logOutcome    = "outcome"
	logDuration   = "dur_ms"  // until the answer ended (streams: its last byte)
	logTTFB       = "ttfb_ms" // streams: until the answer's headers were ready
	logRPCMethod  = "rpc_method"
	logSession    = "session"
	logTaskID     = "task_id"
	logTool       = "tool"
	logOwner      = "owner"
	logErrorKind  = "error_kind"
	logPeer       = "peer"
)

const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
	headerLastEventID     = "Last-Event-Id"
)

// httpRPCError answers with an HTTP status and a JSON-RPC error body.
func (h *Handler) httpRPCError(rc *fasthttp.RequestCtx, status int, id []byte, code int, msg string) {
	rc.Response.Reset()
	rc.SetStatusCode(status)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(appendErrorResponse(nil, id, code, msg))
}

// rpcError answers HTTP 200 with a JSON-RPC error for the request id.
func (h *Handler) rpcError(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, e *rpcError) {
	info.outcome = "rpc_error"
	h.httpRPCError(rc, fasthttp.StatusOK, id, e.Code, e.Message)
}

// rpcResult answers HTTP 200 with a JSON-RPC result.
func (h *Handler) rpcResult(rc *fasthttp.RequestCtx, id, result []byte) {
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(appendResultResponse(make([]byte, 0, len(result)+64), id, result))
}

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
	h.log.Warn().Int(logStatus, status).Str(logErrorKind, kind).Str(logPeer, rc.RemoteAddr().String()).Msg("request refused")
	h.httpRPCError(rc, status, nil, codeInvalidRequest, msg)
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
func (h *Handler) SessionLabel(sid []byte) string { return h.hashShort(sid) }

// upstreamIDPrefix starts the JSON-RPC ids of taskgate's own upstream
// requests, followed by 128 random bits (P-07, E-45).
const upstreamIDPrefix = "taskgate-"

// reservedID swallows a client's notifications/cancelled aimed at an id in
// taskgate's upstream namespace: tasks are cancelled with tasks/cancel only
// (T-61). Upstream ids are random, so a client cannot name one anyway;
// this is defence in depth. Client requests with such ids pass: they cannot
// collide with a random id. It reports whether it answered.
func (h *Handler) reservedID(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) bool {
	if env.method != notificationCancelled || env.id != nil || env.params == nil {
		return false
	}
	vals, err := jsonx.Members(env.params, "requestId")
	if err != nil {
		return false
	}
	if id, ok := jsonx.UnquoteValue(vals[0]); ok && strings.HasPrefix(id, upstreamIDPrefix) {
		info.outcome = "ignored"
		rc.SetStatusCode(fasthttp.StatusAccepted)
		return true
	}
	return false
}
