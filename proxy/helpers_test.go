package proxy

import (
	"bufio"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/sysconn"
	"github.com/taskgate/taskgate/taskstore"
)

// Shared test helpers: a fake upstream, a Handler served by a fasthttp
// server like cmd/taskgate's, and a client for it. Tests of every file of the
// package use them; see newTestProxy.

// mcpURL is the client-side URL of the proxy's MCP endpoint in tests.
const mcpURL = "http://gw.test/mcp"

// upstream is a fake upstream MCP server. It records a copy of every request
// it receives, then calls its handler. Handlers that block (streams) must
// also return when closing is closed: it is closed first at cleanup.
type testUpstream struct {
	srv     *fasthttp.Server
	ln      net.Listener
	inmem   *fasthttputil.InmemoryListener // nil on loopback TCP
	closing chan struct{}

	mu   sync.Mutex
	reqs []*fasthttp.Request
}

// newUpstream serves handler on an in-memory listener, or on loopback TCP
// when tcp is set (deadline tests: in-memory pipes apply write deadlines only
// to blocked writes).
func newUpstream(tb testing.TB, tcp bool, handler fasthttp.RequestHandler) *testUpstream {
	tb.Helper()
	u := &testUpstream{closing: make(chan struct{})}
	if tcp {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("listen: %v", err)
		}
		u.ln = ln
	} else {
		u.inmem = fasthttputil.NewInmemoryListener()
		u.ln = u.inmem
	}
	u.srv = &fasthttp.Server{
		Handler: func(rc *fasthttp.RequestCtx) {
			r := new(fasthttp.Request)
			rc.Request.CopyTo(r)
			u.mu.Lock()
			u.reqs = append(u.reqs, r)
			u.mu.Unlock()
			handler(rc)
		},
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		Logger:                nopLogger{},
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = u.srv.Serve(u.ln)
	}()
	tb.Cleanup(func() {
		_ = u.srv.Shutdown()
		<-served
	})
	return u
}

// dial connects to the upstream (in-memory or TCP).
func (u *testUpstream) dial() (net.Conn, error) {
	if u.inmem != nil {
		return u.inmem.Dial()
	}
	return net.Dial("tcp", u.ln.Addr().String())
}

// requests returns the requests received so far.
func (u *testUpstream) requests() []*fasthttp.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*fasthttp.Request(nil), u.reqs...)
}

// lastRequest returns the last request received; it fails the test if
// there was none.
func (u *testUpstream) lastRequest(tb testing.TB) *fasthttp.Request {
	tb.Helper()
	rs := u.requests()
	if len(rs) == 0 {
		tb.Fatal("upstream received no request")
	}
	return rs[len(rs)-1]
}

// testProxy is a Handler in front of a fake upstream, served by a
// fasthttp.Server set up like cmd/taskgate's (MaxRequestBodySize,
// ErrorHandler), with a client for it.
type testProxy struct {
	tb    testing.TB
	h     *Handler
	up    *testUpstream // nil with withUpstreamURL
	store *countingStore
	ln    net.Listener
	dial  func() (net.Conn, error)
	c     *fasthttp.HostClient // buffers answers
	sc    *fasthttp.HostClient // streams answers
}

// proxySetup is what proxyOpts change.
type proxySetup struct {
	cfg         Config
	pol         *policy.Policy
	tcp         bool
	store       taskstore.Store
	upstreamURL string
	log         zerolog.Logger
	hook        func(*Handler)
}

// proxyOpt changes newTestProxy's setup.
type proxyOpt func(*proxySetup)

// withConfig edits the Handler's Config (Upstream is set by newTestProxy).
func withConfig(f func(*Config)) proxyOpt { return func(s *proxySetup) { f(&s.cfg) } }

// withPolicy sets the policy (default policy.Default()).
func withPolicy(p *policy.Policy) proxyOpt { return func(s *proxySetup) { s.pol = p } }

// withTCP serves the upstream and the proxy on loopback TCP instead of
// in-memory pipes. Needed for deadline tests and for anything the task
// runner does: it dials the upstream's address itself.
func withTCP() proxyOpt { return func(s *proxySetup) { s.tcp = true } }

// withHandler changes the Handler after New, before it serves.
func withHandler(f func(*Handler)) proxyOpt { return func(s *proxySetup) { s.hook = f } }

// withStore uses st (e.g. one store shared by two proxies acting as
// replicas); the caller closes it. Default: a new embedded store.
func withStore(st taskstore.Store) proxyOpt { return func(s *proxySetup) { s.store = st } }

// withUpstreamURL points the proxy at url and starts no fake upstream (for
// unreachable upstreams and hand-made TCP servers).
func withUpstreamURL(url string) proxyOpt { return func(s *proxySetup) { s.upstreamURL = url } }

// withLogger sets the Handler's logger (default zerolog.Nop()).
func withLogger(l zerolog.Logger) proxyOpt { return func(s *proxySetup) { s.log = l } }

// newTestStore returns an embedded store closed at cleanup.
func newTestStore(tb testing.TB) *taskstore.Embedded {
	tb.Helper()
	st, closer, err := taskstore.NewEmbedded(taskstore.Config{})
	if err != nil {
		tb.Fatalf("taskstore.NewEmbedded: %v", err)
	}
	tb.Cleanup(closer)
	return st
}

// newTestProxy starts a fake upstream serving upstreamHandler (nil with
// withUpstreamURL) and a Handler in front of it, all stopped at cleanup.
// The upstream's MCP endpoint and the proxy's are both at path /mcp.
func newTestProxy(tb testing.TB, upstreamHandler fasthttp.RequestHandler, opts ...proxyOpt) *testProxy {
	tb.Helper()
	s := proxySetup{log: zerolog.Nop()}
	for _, o := range opts {
		o(&s)
	}
	tp := &testProxy{tb: tb}
	if s.upstreamURL == "" {
		tp.up = newUpstream(tb, s.tcp, upstreamHandler)
		if s.tcp {
			s.cfg.Upstream = "http://" + tp.up.ln.Addr().String() + "/mcp"
		} else {
			s.cfg.Upstream = "http://upstream.test/mcp"
		}
	} else {
		s.cfg.Upstream = s.upstreamURL
	}
	if tp.up != nil && !s.tcp {
		// Every upstream connection goes over the in-memory pipe: the
		// upstream client's dial (Config.Dial reaches upstream.Options.Dial).
		s.cfg.Dial = func(context.Context) (net.Conn, error) { return tp.up.dial() }
	}
	if s.store == nil {
		s.store = newTestStore(tb)
	}
	tp.store = &countingStore{Store: s.store, calls: make(map[string]int)}
	h, err := New(s.cfg, s.pol, tp.store, s.log, nil)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tp.h = h
	if s.hook != nil {
		s.hook(h)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			tb.Errorf("Handler.Close: %v", err)
		}
	})

	srv := &fasthttp.Server{
		Handler:               h.ServeFastHTTP,
		ErrorHandler:          h.ErrorHandler,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		MaxRequestBodySize:    h.cfg.MaxBodySize,
		CloseOnShutdown:       true,
		Logger:                nopLogger{},
	}
	if s.tcp {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("listen: %v", err)
		}
		tp.ln = sysconn.Listener{Listener: ln} // as cmd/taskgate serves
		tp.dial = func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) }
	} else {
		ln := fasthttputil.NewInmemoryListener()
		tp.ln = ln
		tp.dial = ln.Dial
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(tp.ln)
	}()
	tb.Cleanup(func() {
		_ = srv.Shutdown()
		<-served
	})
	dial := func(string) (net.Conn, error) { return tp.dial() }
	tp.c = &fasthttp.HostClient{Addr: "gw.test", Dial: dial, MaxIdemponentCallAttempts: 1}
	tp.sc = &fasthttp.HostClient{Addr: "gw.test", Dial: dial, MaxIdemponentCallAttempts: 1, StreamResponseBody: true}
	tb.Cleanup(func() {
		tp.c.CloseIdleConnections()
		tp.sc.CloseIdleConnections()
	})
	if tp.up != nil {
		// Runs first: lets blocked upstream handlers return.
		tb.Cleanup(func() { close(tp.up.closing) })
	}
	return tp
}

// newRequest builds a request to the proxy's MCP endpoint. headers are
// name, value pairs.
func newRequest(method, body string, headers ...string) *fasthttp.Request {
	req := new(fasthttp.Request)
	req.Header.SetMethod(method)
	req.SetRequestURI(mcpURL)
	if body != "" {
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
	}
	req.Header.Set(fasthttp.HeaderAccept, "application/json, text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return req
}

// newPost builds a JSON-RPC POST to the proxy's MCP endpoint.
func newPost(body string, headers ...string) *fasthttp.Request {
	return newRequest(fasthttp.MethodPost, body, headers...)
}

// do sends req through the proxy and returns the whole answer.
func (tp *testProxy) do(req *fasthttp.Request) *fasthttp.Response {
	tp.tb.Helper()
	resp := new(fasthttp.Response)
	if err := tp.c.DoTimeout(req, resp, 10*time.Second); err != nil {
		tp.tb.Fatalf("%s %s: %v", req.Header.Method(), req.URI(), err)
	}
	return resp
}

// doRefused sends req on a fresh connection while reading the answer at
// the same time, for requests the server answers before reading their body
// (413) and then closes: a client that first writes the whole body may
// fail on the closed connection before it reads the answer.
func (tp *testProxy) doRefused(req *fasthttp.Request) *fasthttp.Response {
	tp.tb.Helper()
	c, err := tp.dial()
	if err != nil {
		tp.tb.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		bw := bufio.NewWriter(c)
		if req.Write(bw) == nil {
			_ = bw.Flush() // fails once the server closed; the answer is read below
		}
	}()
	resp := new(fasthttp.Response)
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		tp.tb.Fatalf("%s %s: reading the answer: %v", req.Header.Method(), req.URI(), err)
	}
	return resp
}

// doStream sends req through the proxy and returns the answer once its
// headers arrived; read the body with resp.BodyStream(). The stream is
// closed at cleanup.
func (tp *testProxy) doStream(req *fasthttp.Request) *fasthttp.Response {
	tp.tb.Helper()
	resp := new(fasthttp.Response)
	if err := tp.sc.Do(req, resp); err != nil {
		tp.tb.Fatalf("%s %s: %v", req.Header.Method(), req.URI(), err)
	}
	tp.tb.Cleanup(func() { _ = resp.CloseBodyStream() })
	return resp
}

// rawConn opens a connection to the proxy for hand-written HTTP, closed at
// cleanup. Reads time out after 10s so a broken test cannot hang.
func (tp *testProxy) rawConn() (net.Conn, *bufio.Reader) {
	tp.tb.Helper()
	c, err := tp.dial()
	if err != nil {
		tp.tb.Fatalf("dial proxy: %v", err)
	}
	tp.tb.Cleanup(func() { _ = c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// nopLogger silences fasthttp's per-connection error log in tests.
type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// countingStore counts the calls made to a Store by method name.
type countingStore struct {
	taskstore.Store

	mu    sync.Mutex
	calls map[string]int
}

var _ taskstore.Store = (*countingStore)(nil)

func (s *countingStore) count(name string) {
	s.mu.Lock()
	s.calls[name]++
	s.mu.Unlock()
}

// callsExcept returns how many calls were made to methods other than
// those named (lease recovery calls Recover on its own schedule).
func (s *countingStore) callsExcept(names ...string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int)
outer:
	for n, c := range s.calls {
		for _, skip := range names {
			if n == skip {
				continue outer
			}
		}
		out[n] = c
	}
	return out
}

func (s *countingStore) Create(ctx context.Context, t *taskstore.Task, opt taskstore.CreateOptions) error {
	s.count("Create")
	return s.Store.Create(ctx, t, opt)
}

func (s *countingStore) Get(ctx context.Context, owner, id string) (*taskstore.Task, error) {
	s.count("Get")
	return s.Store.Get(ctx, owner, id)
}

func (s *countingStore) Update(ctx context.Context, owner, id string, st taskstore.Status, msg string) (*taskstore.Task, error) {
	s.count("Update")
	return s.Store.Update(ctx, owner, id, st, msg)
}

func (s *countingStore) Finish(ctx context.Context, owner, id string, st taskstore.Status, msg string, out taskstore.Outcome) (*taskstore.Task, error) {
	s.count("Finish")
	return s.Store.Finish(ctx, owner, id, st, msg, out)
}

func (s *countingStore) Cancel(ctx context.Context, owner, id, msg string) (*taskstore.Task, error) {
	s.count("Cancel")
	return s.Store.Cancel(ctx, owner, id, msg)
}

func (s *countingStore) Outcome(ctx context.Context, owner, id string) (*taskstore.Task, *taskstore.Outcome, error) {
	s.count("Outcome")
	return s.Store.Outcome(ctx, owner, id)
}

func (s *countingStore) List(ctx context.Context, owner, cursor string, limit int) ([]taskstore.Task, string, error) {
	s.count("List")
	return s.Store.List(ctx, owner, cursor, limit)
}

func (s *countingStore) Watch(ctx context.Context, owner, id string) (<-chan struct{}, func(), error) {
	s.count("Watch")
	return s.Store.Watch(ctx, owner, id)
}

func (s *countingStore) Renew(ctx context.Context, owner, id string, lease time.Duration) (taskstore.Status, error) {
	s.count("Renew")
	return s.Store.Renew(ctx, owner, id, lease)
}

func (s *countingStore) Recover(ctx context.Context, skew time.Duration, msg string) ([]taskstore.Task, error) {
	s.count("Recover")
	return s.Store.Recover(ctx, skew, msg)
}

func (s *countingStore) SessionVersion(ctx context.Context, session string) (string, error) {
	s.count("SessionVersion")
	return s.Store.SessionVersion(ctx, session)
}

func (s *countingStore) SetSessionVersion(ctx context.Context, session, version string, ttl time.Duration) error {
	s.count("SetSessionVersion")
	return s.Store.SetSessionVersion(ctx, session, version, ttl)
}

func (s *countingStore) BindSession(ctx context.Context, session, credential string, ttl time.Duration) error {
	s.count("BindSession")
	return s.Store.BindSession(ctx, session, credential, ttl)
}

func (s *countingStore) Session(ctx context.Context, session string) (taskstore.SessionRecord, error) {
	s.count("Session")
	return s.Store.Session(ctx, session)
}

func (s *countingStore) CloseSession(ctx context.Context, session string) (bool, error) {
	s.count("CloseSession")
	return s.Store.CloseSession(ctx, session)
}

func (s *countingStore) StartSessionTask(ctx context.Context, session, id string, until time.Time) error {
	s.count("StartSessionTask")
	return s.Store.StartSessionTask(ctx, session, id, until)
}

func (s *countingStore) EndSessionTask(ctx context.Context, session, id string) (bool, error) {
	s.count("EndSessionTask")
	return s.Store.EndSessionTask(ctx, session, id)
}

func (s *countingStore) Ping(ctx context.Context) error {
	s.count("Ping")
	return s.Store.Ping(ctx)
}

// waitFor polls cond with backoff until it holds or timeout passes.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for d := time.Millisecond; !cond(); d = min(2*d, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(d)
	}
}

// jsonAnswer returns an upstream handler answering every request with
// status 200 and body as application/json.
func jsonAnswer(body string) fasthttp.RequestHandler {
	return func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("application/json")
		rc.SetBodyString(body)
	}
}

// sseAnswer returns an upstream handler answering with the given SSE bytes.
func sseAnswer(stream string) fasthttp.RequestHandler {
	return func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("text/event-stream")
		rc.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
		rc.SetBodyString(stream)
	}
}

// The task-stream methods are counted too, so command budgets see every
// store round trip.

func (s *countingStore) WatchKinds(ctx context.Context, owner, id string, kinds taskstore.EventKind) (<-chan struct{}, func(), error) {
	s.count("WatchKinds")
	return s.Store.WatchKinds(ctx, owner, id, kinds)
}

func (s *countingStore) WatchFunc(ctx context.Context, owner, id string, kinds taskstore.EventKind, fn func()) (func(), error) {
	s.count("WatchFunc")
	return s.Store.WatchFunc(ctx, owner, id, kinds, fn)
}

func (s *countingStore) Enqueue(ctx context.Context, owner, id string, kind taskstore.MessageKind, msg []byte, max int) (int, error) {
	s.count("Enqueue")
	return s.Store.Enqueue(ctx, owner, id, kind, msg, max)
}

func (s *countingStore) Drain(ctx context.Context, owner, id string) ([]taskstore.Message, error) {
	s.count("Drain")
	return s.Store.Drain(ctx, owner, id)
}

func (s *countingStore) Requeue(ctx context.Context, owner, id string, msgs []taskstore.Message) error {
	s.count("Requeue")
	return s.Store.Requeue(ctx, owner, id, msgs)
}

func (s *countingStore) SetListening(ctx context.Context, owner, id string, ttl time.Duration) error {
	s.count("SetListening")
	return s.Store.SetListening(ctx, owner, id, ttl)
}

func (s *countingStore) QueuedTasks(ctx context.Context, owner, session string) ([]string, error) {
	s.count("QueuedTasks")
	return s.Store.QueuedTasks(ctx, owner, session)
}

func (s *countingStore) WatchSession(ctx context.Context, owner, session string) (<-chan taskstore.SessionEvent, func(), error) {
	s.count("WatchSession")
	return s.Store.WatchSession(ctx, owner, session)
}

func (s *countingStore) AddPending(ctx context.Context, owner, session, reqID, id string) error {
	s.count("AddPending")
	return s.Store.AddPending(ctx, owner, session, reqID, id)
}

func (s *countingStore) Answer(ctx context.Context, owner, session, reqID string, msg []byte) (string, error) {
	s.count("Answer")
	return s.Store.Answer(ctx, owner, session, reqID, msg)
}

func (s *countingStore) TakeAnswers(ctx context.Context, owner, id string) ([][]byte, error) {
	s.count("TakeAnswers")
	return s.Store.TakeAnswers(ctx, owner, id)
}

func (s *countingStore) PendingTask(ctx context.Context, owner, session, reqID string) (string, error) {
	s.count("PendingTask")
	return s.Store.PendingTask(ctx, owner, session, reqID)
}

// total is the number of calls in counts.
func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// diff is after minus before, per method (zeros left out).
func diff(after, before map[string]int) map[string]int {
	out := make(map[string]int)
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
