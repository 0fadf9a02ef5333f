package stdio

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/taskgate/taskgate/proxy/sse"
)

// Path is the MCP endpoint path the Server answers on; the proxy's
// upstream URL for a stdio server is "http://stdio" + Path.
const Path = "/mcp"

// UpstreamURL is the upstream URL to configure the proxy with when it
// dials a Server (the host is never resolved: Server.Dial connects).
const UpstreamURL = "http://stdio" + Path

// Server runs stdio MCP servers, one process per client session, and
// serves them as one MCP Streamable HTTP endpoint on an in-process
// listener. It is safe for concurrent use; Close stops it.
type Server struct {
	cfg   Config
	log   zerolog.Logger
	ln    *fasthttputil.InmemoryListener
	srv   *fasthttp.Server
	label atomic.Pointer[func([]byte) string]
	m     *metrics

	mu       sync.Mutex
	sessions map[string]*session
	starting int // children being started (counted against MaxChildren)
	closed   bool

	sh sharedState // Config.Shared

	started atomic.Int64 // children started (tests, metrics)
	wg      sync.WaitGroup
	done    chan struct{} // closed by Close: the idle reaper exits
}

// New validates cfg and starts the Server's listener; no child runs until
// the first initialize.
func New(cfg Config, log zerolog.Logger) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      log.With().Str("component", "stdio").Logger(),
		ln:       fasthttputil.NewInmemoryListener(),
		sessions: map[string]*session{},
		done:     make(chan struct{}),
	}
	s.sh.views = map[string]*view{}
	label := cfg.SessionLabel
	if label == nil {
		label = func(sid []byte) string {
			sum := sha256.Sum256(sid)
			return hex.EncodeToString(sum[:6])
		}
	}
	s.label.Store(&label)
	s.m = newMetrics(cfg.Metrics, s)
	s.srv = &fasthttp.Server{
		Handler:               s.serve,
		Name:                  "taskgate-stdio",
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		// The proxy bounds bodies already; this only guards the hop.
		MaxRequestBodySize: 1 << 30,
		Logger:             fasthttpLogger{log.With().Str("component", "stdio/fasthttp").Logger()},
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(s.ln)
	}()
	go s.reapIdle()
	return s, nil
}

// SetSessionLabel replaces Config.SessionLabel for sessions started later.
func (s *Server) SetSessionLabel(f func(sid []byte) string) { s.label.Store(&f) }

// Dial connects to the Server's HTTP endpoint: the proxy's upstream dialer.
func (s *Server) Dial(context.Context) (net.Conn, error) { return s.ln.Dial() }

// Children reports how many server processes run now.
func (s *Server) Children() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Started reports how many server processes were started so far.
func (s *Server) Started() int64 { return s.started.Load() }

// Close stops every child (stdin closed, then SIGTERM, then SIGKILL after
// Config.StopGrace each), then the listener. ctx bounds the wait for the
// HTTP side; children are always waited for.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	close(s.done)
	for _, ss := range all {
		ss.end("taskgate is shutting down", "taskgate: shutting down; the stdio MCP server was stopped")
	}
	err := s.srv.ShutdownWithContext(ctx)
	_ = s.ln.Close()
	s.wg.Wait()
	return err
}

// remove drops a session from the table.
func (s *Server) remove(ss *session) {
	s.mu.Lock()
	if s.sessions[ss.sid] == ss {
		delete(s.sessions, ss.sid)
	}
	s.mu.Unlock()
}

// reapIdle ends sessions idle for longer than IdleTimeout.
func (s *Server) reapIdle() {
	defer s.wg.Done()
	t := time.NewTicker(min(s.cfg.IdleTimeout/4, 30*time.Second))
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			s.mu.Lock()
			var idle []*session
			for _, ss := range s.sessions {
				if ss.idleFor(now) > s.cfg.IdleTimeout {
					idle = append(idle, ss)
				}
			}
			s.mu.Unlock()
			for _, ss := range idle {
				ss.end("idle for longer than "+s.cfg.IdleTimeout.String(), "")
			}
			if s.cfg.Shared {
				s.reapViews(now)
			}
		}
	}
}

// errFull and errClosed refuse a new session.
var (
	errFull   = errors.New("all stdio server processes are in use")
	errClosed = errors.New("taskgate is shutting down")
)

// newSession starts a child for a new session.
func (s *Server) newSession() (*session, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, errClosed
	case len(s.sessions)+s.starting >= s.cfg.MaxChildren:
		s.mu.Unlock()
		return nil, errFull
	}
	s.starting++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.starting--
		s.mu.Unlock()
	}()
	var b [16]byte
	_, _ = rand.Read(b[:])
	sid := hex.EncodeToString(b[:])
	c, err := startChild(&s.cfg)
	if err != nil {
		return nil, err
	}
	s.started.Add(1)
	label := (*s.label.Load())([]byte(sid))
	ss := &session{
		srv: s, sid: sid, label: label, child: c,
		log:    s.log.With().Str("session", label).Int("pid", c.pid).Logger(),
		calls:  map[string]*call{},
		tokens: map[string]*call{},
		get:    newQueue(s.cfg.QueueMax),
		last:   time.Now(),
		ended:  make(chan struct{}),
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.sessions[sid] = ss
	}
	s.mu.Unlock()
	s.wg.Add(1)
	go ss.supervise()
	if closed {
		ss.end("", "")
		return nil, errClosed
	}
	ss.log.Info().Str("program", s.cfg.Command[0]).Msg("stdio server started")
	return ss, nil
}

func (s *Server) lookup(sid []byte) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[string(sid)]
}

const headerSessionID = "Mcp-Session-Id"

// serve is the Streamable HTTP endpoint.
func (s *Server) serve(rc *fasthttp.RequestCtx) {
	if string(rc.Path()) != Path {
		writeError(rc, fasthttp.StatusNotFound, nil, codeInvalidRequest, "taskgate: no MCP endpoint at this path")
		return
	}
	sid := rc.Request.Header.Peek(headerSessionID)
	switch {
	case rc.IsPost():
		s.post(rc, sid)
	case rc.IsGet() && s.cfg.Shared:
		s.getShared(rc, sid)
	case rc.IsGet():
		s.getStream(rc, sid)
	case rc.IsDelete() && s.cfg.Shared:
		s.deleteShared(rc, sid)
	case rc.IsDelete():
		ss := s.lookup(sid)
		if ss == nil {
			writeError(rc, fasthttp.StatusNotFound, nil, codeInvalidRequest, "taskgate: session not found")
			return
		}
		ss.drain()
		rc.SetStatusCode(fasthttp.StatusNoContent)
	default:
		rc.Response.Header.Set("Allow", "GET, POST, DELETE")
		writeError(rc, fasthttp.StatusMethodNotAllowed, nil, codeInvalidRequest, "taskgate: method not allowed")
	}
}

func (s *Server) post(rc *fasthttp.RequestCtx, sid []byte) {
	body := rc.PostBody()
	if isBatch(body) {
		if s.cfg.Shared {
			writeError(rc, fasthttp.StatusBadRequest, nil, codeInvalidRequest, "taskgate: a shared stdio upstream takes no batches")
			return
		}
		s.postBatch(rc, sid, body)
		return
	}
	m, err := parseMessage(body)
	if err != nil {
		writeError(rc, fasthttp.StatusBadRequest, nil, codeInvalidRequest, "taskgate: "+err.Error())
		return
	}
	if s.cfg.Shared {
		s.postShared(rc, sid, m)
		return
	}
	var ss *session
	if len(sid) == 0 {
		if m.method != methodInitialize || !m.isRequest() {
			writeError(rc, fasthttp.StatusBadRequest, m.id, codeInvalidRequest, "taskgate: a request without Mcp-Session-Id must be initialize")
			return
		}
		if ss, err = s.newSession(); err != nil {
			s.refuseSession(rc, m.id, err)
			return
		}
		rc.Response.Header.Set(headerSessionID, ss.sid)
	} else if ss = s.lookup(sid); ss == nil {
		writeError(rc, fasthttp.StatusNotFound, m.id, codeInvalidRequest, "taskgate: session not found (it ended); initialize again")
		return
	}
	if !m.isRequest() {
		if err := ss.send(body); err != nil {
			writeError(rc, fasthttp.StatusBadGateway, nil, codeInternalError, "taskgate: writing to the stdio MCP server failed: "+err.Error())
			return
		}
		if m.method == methodCancelled {
			if id := cancelledID(m.params); id != "" {
				ss.cancelCall(id)
			}
		}
		rc.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	c, err := ss.startCall(&m)
	if err != nil {
		status := fasthttp.StatusBadRequest
		if errors.Is(err, errSessionEnded) {
			status = fasthttp.StatusNotFound
		}
		writeError(rc, status, m.id, codeInvalidRequest, "taskgate: "+err.Error())
		return
	}
	if len(sid) == 0 {
		ss.mu.Lock()
		ss.initCall = c
		ss.initTimer = time.AfterFunc(s.cfg.InitTimeout, ss.initExpired)
		ss.mu.Unlock()
	}
	if err := ss.send(body); err != nil {
		ss.endCall(c)
		writeError(rc, fasthttp.StatusBadGateway, m.id, codeInternalError, "taskgate: writing to the stdio MCP server failed: "+err.Error())
		if len(sid) == 0 {
			ss.end("writing initialize failed", "")
		}
		return
	}
	s.answer(rc, ss, c)
}

// refuseSession answers an initialize that got no child.
func (s *Server) refuseSession(rc *fasthttp.RequestCtx, id json.RawMessage, err error) {
	switch {
	case errors.Is(err, errFull):
		s.m.refused.WithLabelValues("full").Inc()
		rc.Response.Header.Set("Retry-After", "5")
		writeError(rc, fasthttp.StatusServiceUnavailable, id, codeServerGone,
			fmt.Sprintf("taskgate: all %d stdio MCP server processes are in use (--stdio-max-children); try again later", s.cfg.MaxChildren))
	case errors.Is(err, errClosed):
		s.m.refused.WithLabelValues("shutting_down").Inc()
		writeError(rc, fasthttp.StatusServiceUnavailable, id, codeServerGone, "taskgate: shutting down")
	default:
		s.m.refused.WithLabelValues("start_failed").Inc()
		s.log.Error().Err(err).Msg("stdio server did not start")
		writeError(rc, fasthttp.StatusBadGateway, id, codeServerGone, "taskgate: the stdio MCP server did not start: "+err.Error())
	}
}

// postBatch forwards a batch of notifications and responses; a batch with
// requests is refused (its answers would have to be collected into one).
func (s *Server) postBatch(rc *fasthttp.RequestCtx, sid, body []byte) {
	var batch []json.RawMessage
	if json.Unmarshal(body, &batch) != nil || len(batch) == 0 {
		writeError(rc, fasthttp.StatusBadRequest, nil, codeInvalidRequest, "taskgate: invalid batch")
		return
	}
	ss := s.lookup(sid)
	if ss == nil {
		writeError(rc, fasthttp.StatusNotFound, nil, codeInvalidRequest, "taskgate: session not found (it ended); initialize again")
		return
	}
	for _, raw := range batch {
		m, err := parseMessage(raw)
		if err != nil || m.isRequest() {
			writeError(rc, fasthttp.StatusBadRequest, nil, codeInvalidRequest,
				"taskgate: a stdio upstream takes batches of notifications and responses only")
			return
		}
	}
	for _, raw := range batch {
		if err := ss.send(raw); err != nil {
			writeError(rc, fasthttp.StatusBadGateway, nil, codeInternalError, "taskgate: writing to the stdio MCP server failed: "+err.Error())
			return
		}
	}
	rc.SetStatusCode(fasthttp.StatusAccepted)
}

// answer waits for the call's first message: a response alone goes back
// as application/json; anything before it makes the answer an SSE stream.
func (s *Server) answer(rc *fasthttp.RequestCtx, ss *session, c *call) {
	wait := time.NewTimer(s.cfg.KeepAlive)
	defer wait.Stop()
	select {
	case <-c.q.wake:
		c.q.signal() // the stream writer looks again
	case <-wait.C:
	}
	if msg, status, ok := c.q.peekSingleFinal(); ok {
		if status == 0 {
			status = fasthttp.StatusOK
		}
		rc.SetStatusCode(status)
		rc.Response.Header.SetContentType("application/json")
		rc.SetBody(msg)
		return
	}
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("text/event-stream")
	rc.Response.Header.Set("Cache-Control", "no-cache")
	keepAlive := s.cfg.KeepAlive
	// The writer runs after serve returned: it uses ss and c only, never rc
	// or its Request, Response and headers, and w only until it returns.
	rc.SetBodyStreamWriter(func(w *bufio.Writer) {
		if !writeStream(w, c.q, keepAlive, nil) {
			ss.endCall(c) // the caller left: nobody reads the answer
		}
	})
}

// getStream serves the session's standalone SSE stream (one at a time).
func (s *Server) getStream(rc *fasthttp.RequestCtx, sid []byte) {
	ss := s.lookup(sid)
	switch {
	case len(sid) == 0:
		writeError(rc, fasthttp.StatusBadRequest, nil, codeInvalidRequest, "taskgate: GET needs Mcp-Session-Id")
		return
	case ss == nil:
		writeError(rc, fasthttp.StatusNotFound, nil, codeInvalidRequest, "taskgate: session not found (it ended); initialize again")
		return
	case !ss.openGet():
		writeError(rc, fasthttp.StatusConflict, nil, codeInvalidRequest, "taskgate: this session has a GET stream open already")
		return
	}
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("text/event-stream")
	rc.Response.Header.Set("Cache-Control", "no-cache")
	rc.Response.ImmediateHeaderFlush = true
	keepAlive := s.cfg.KeepAlive
	// The writer runs after getStream returned: it uses ss only, never rc
	// or its Request, Response and headers, and w only until it returns.
	rc.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer ss.closeGet()
		writeStream(w, ss.get, keepAlive, ss.ended)
	})
}

// writeStream writes q's messages as SSE events until the stream ends
// (true) or a write fails (false: the reader left). Silent stretches get a
// comment every keepAlive. stop, when not nil, ends the stream too.
func writeStream(w *bufio.Writer, q *queue, keepAlive time.Duration, stop <-chan struct{}) bool {
	t := time.NewTicker(keepAlive)
	defer t.Stop()
	var batch [][]byte
	var split []byte
	for {
		var end bool
		batch, end = q.take(batch[:0])
		for _, m := range batch {
			if bytes.IndexByte(m, '\r') >= 0 {
				// A carriage return is JSON whitespace, and a line end in
				// SSE: the message goes out as several data lines, which
				// the client joins with newlines (still the same JSON).
				_, _ = w.WriteString("event: message\n")
				split = sse.Append(split[:0], "", m)
				_, _ = w.Write(split)
				continue
			}
			_, _ = w.WriteString("event: message\ndata: ")
			_, _ = w.Write(m)
			_, _ = w.WriteString("\n\n")
		}
		if len(batch) > 0 {
			if w.Flush() != nil {
				return false
			}
		}
		if end {
			return true
		}
		select {
		case <-q.wake:
		case <-stop:
			return true
		case <-t.C:
			_, _ = w.WriteString(": keep-alive\n\n")
			if w.Flush() != nil {
				return false
			}
		}
	}
}

// writeError answers with an HTTP status and a JSON-RPC error body.
func writeError(rc *fasthttp.RequestCtx, status int, id json.RawMessage, code int, msg string) {
	rc.SetStatusCode(status)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(appendError(nil, id, code, msg))
}

// fasthttpLogger routes the in-process server's own messages to zerolog,
// under its own component (a logger carries each key once: zerolog writes
// a repeated key twice into the JSON line).
//
// A connection the proxy closed is not a fault: the proxy ends its side of
// the in-memory hop when it aborts a call (tasks/cancel, a client gone, a
// deadline), and the server then fails to serve it with
// fasthttputil.ErrConnectionClosed, the in-memory counterpart of the
// "broken pipe" and "reset by peer" errors fasthttp already keeps quiet.
// Those go to debug; every other message stays a warning.
type fasthttpLogger struct{ l zerolog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, fasthttputil.ErrConnectionClosed) {
			f.l.Debug().Msg("the proxy closed an in-memory connection while it was served")
			return
		}
	}
	f.l.Warn().Msg(fmt.Sprintf(format, args...))
}
