package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/sysconn"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

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
		PollHold:         cfg.PollHold,
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
// answer rather than one pollInterval (engine.PollMin) later.
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
