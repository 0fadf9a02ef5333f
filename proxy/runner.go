package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/taskstore"
)

// dialUpstream opens a connection for background calls.
func (h *Handler) dialUpstream(ctx context.Context) (net.Conn, error) {
	c, err := h.dialTCP(ctx)
	if err != nil {
		return nil, err
	}
	return h.upstreamTLS(ctx, c)
}

// upstreamTLS returns c as is for an http upstream, and c after a TLS
// handshake for an https one (c is closed if the handshake fails).
func (h *Handler) upstreamTLS(ctx context.Context, c net.Conn) (net.Conn, error) {
	if !h.upTLS {
		return c, nil
	}
	tc := tls.Client(c, h.tlsConf)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}

// upstreamCall is one request and its streamed response on a connection
// of the background pool. The connection closes when ctx ends (aborting
// the upstream request: tasks/cancel, timeouts, shutdown); after a
// response read to its end it goes back to the pool.
type upstreamCall struct {
	h     *Handler
	c     *upConn
	resp  *fasthttp.Response
	stop  func() bool
	reuse bool // the body was read to its end: the connection is clean
}

// abort closes the connection at once, unblocking a reader of the body.
func (x *upstreamCall) abort() { _ = x.c.Close() }

// done releases the response and pools or closes the connection.
func (x *upstreamCall) done() {
	ctxAlive := x.stop()
	if x.reuse && ctxAlive && !x.resp.ConnectionClose() && x.resp.Header.ContentLength() != -2 {
		x.h.bgPool.put(x.c)
	} else {
		_ = x.c.Close()
	}
	fasthttp.ReleaseResponse(x.resp)
}

// drainEnd reads what is left of a body that should be ending (an SSE
// stream after its response, H-08) for a moment; only a body read to its
// end leaves the connection reusable.
func (x *upstreamCall) drainEnd(body io.Reader) {
	if err := x.c.SetReadDeadline(time.Now().Add(drainWait)); err != nil {
		return
	}
	_, err := io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	x.reuse = err == nil && x.c.SetReadDeadline(time.Time{}) == nil
}

// drainWait is how long a finished SSE answer may take to end.
const drainWait = 200 * time.Millisecond

// roundTrip sends req on a pooled (or new) connection and returns the
// response with its body as a stream. A pooled connection is used only
// while younger than UpstreamIdleConn (below the upstream's idle limit, so
// the upstream is not closing it as we write); a request is never replayed.
func (h *Handler) roundTrip(ctx context.Context, req *fasthttp.Request) (*upstreamCall, error) {
	c := h.bgPool.get()
	if c == nil {
		conn, err := h.dialUpstream(ctx)
		if err != nil {
			return nil, err
		}
		c = newBgConn(conn)
	}
	x := &upstreamCall{h: h, c: c, resp: fasthttp.AcquireResponse()}
	x.stop = context.AfterFunc(ctx, x.abort)
	fail := func(err error) (*upstreamCall, error) {
		x.reuse = false
		x.done()
		return nil, err
	}
	bw := bgWriters.Get().(*bufio.Writer)
	bw.Reset(c)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	bgWriters.Put(bw)
	if err != nil {
		return fail(err)
	}
	x.resp.StreamBody = true
	if err := x.resp.Read(c.br); err != nil {
		return fail(err)
	}
	return x, nil
}

// upConn is an upstream connection with its buffers, for background calls
// (bgPool) and pass-through (passPool).
type upConn struct {
	net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

func newUpConn(c net.Conn) *upConn {
	return &upConn{Conn: c, br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriter(c)}
}

// Background calls wait on their connection for as long as the call runs
// (minutes, for thousands of tasks at once), so their buffers are what an
// in-flight task costs: a 4 KiB reader (response headers and the stream),
// no writer of their own (a pooled one writes the request), and a 4 KiB
// SSE line reader (longer lines are gathered whole).
const bgReadBuf = 4 << 10

// newBgConn wraps a connection for background calls (bgPool); its bw is
// nil: roundTrip writes with a writer from bgWriters.
func newBgConn(c net.Conn) *upConn {
	return &upConn{Conn: c, br: bufio.NewReaderSize(c, bgReadBuf)}
}

// bgWriters holds the writers of background requests.
var bgWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}

// newBgSSEReader reads the SSE answer of a background call.
func newBgSSEReader(body io.Reader, max int) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(body, bgReadBuf), max: max}
}

// connPool keeps idle upstream connections (LIFO). Safe for concurrent use.
type connPool struct {
	mu      sync.Mutex
	idle    []*upConn
	max     int
	maxIdle time.Duration
	closed  bool
}

func (p *connPool) get() *upConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		if time.Since(c.idleSince) < p.maxIdle {
			return c
		}
		_ = c.Close()
	}
	return nil
}

func (p *connPool) put(c *upConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.max {
		_ = c.Close()
		return
	}
	c.idleSince = time.Now()
	p.idle = append(p.idle, c)
}

func (p *connPool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.idle {
		_ = c.Close()
	}
	p.idle = nil
}

// callUpstream runs the call and classifies the upstream's answer.
func (h *Handler) callUpstream(ctx context.Context, j *job) callResult {
	if j.modern != nil {
		return h.callModern(ctx, j)
	}
	return h.callUpstreamOnce(ctx, j)
}

// callUpstreamOnce sends the call's request once and classifies the answer.
func (h *Handler) callUpstreamOnce(ctx context.Context, j *job) callResult {
	j.req.Header.ResetConnectionClose()
	x, err := h.roundTrip(ctx, j.req)
	if err != nil {
		return transportFailure(ctx, err)
	}
	defer x.done()
	return h.readAnswer(ctx, j, x)
}

func transportFailure(ctx context.Context, err error) callResult {
	if ctx.Err() != nil {
		return callResult{} // the cause decides
	}
	_, msg := statusFor(err)
	return callResult{Status: taskstore.Failed, Message: msg[len("taskgate: "):] + ": " + err.Error(),
		Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}
}

func internalFailure(format string, args ...any) callResult {
	return callResult{Status: taskstore.Failed, Message: fmt.Sprintf(format, args...),
		Outcome: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}
}

// readAnswer reads a JSON or SSE answer to the task's request.
func (h *Handler) readAnswer(ctx context.Context, j *job, x *upstreamCall) callResult {
	resp := x.resp
	switch code := resp.StatusCode(); {
	case code == fasthttp.StatusNotFound:
		return internalFailure("upstream answered HTTP 404: its MCP session ended; re-initialize and call again")
	case code < 200 || code > 299:
		return internalFailure("upstream answered HTTP %d", code)
	}
	ct := resp.Header.ContentType()
	body := resp.BodyStream()
	if body == nil {
		body = bytes.NewReader(resp.Body())
	}
	if isEventStream(ct) {
		return h.readSSEAnswer(ctx, j, x, body)
	}
	msg, err := readAllLimit(body, h.cfg.MaxResultSize)
	x.reuse = err == nil
	if errors.Is(err, errTooLarge) {
		return internalFailure("upstream result exceeds the result size limit of %d bytes", h.cfg.MaxResultSize)
	}
	if err != nil {
		return transportFailure(ctx, err)
	}
	if len(msg) == 0 {
		return internalFailure("upstream answered HTTP %d without a JSON-RPC response", resp.StatusCode())
	}
	return classify(msg)
}

// readSSEAnswer reads events until the response to the task's request,
// answering upstream pings and resuming with GET + Last-Event-ID when the
// upstream drops the connection after an event with an id (P-04, E-23).
func (h *Handler) readSSEAnswer(ctx context.Context, j *job, cur *upstreamCall, body io.Reader) callResult {
	var lastID string
	retry := time.Second
	for resumes := 0; ; resumes++ {
		r := newBgSSEReader(body, h.cfg.MaxResultSize)
		for {
			ev, err := r.next()
			if ev != nil && err == nil {
				if ev.hasID {
					lastID = string(ev.id)
				}
				if ev.retry >= 0 {
					retry = time.Duration(ev.retry) * time.Millisecond
				}
				if len(ev.data) > 0 {
					if res, final := h.onUpstreamMessage(ctx, j, ev.data); final {
						cur.drainEnd(body)
						return res
					}
				}
				continue
			}
			if errors.Is(err, errEventTooLarge) {
				return internalFailure("upstream result exceeds the result size limit of %d bytes", h.cfg.MaxResultSize)
			}
			if ctx.Err() != nil {
				return callResult{}
			}
			break // stream ended without the response
		}
		if lastID == "" || resumes >= maxResumes {
			return internalFailure("upstream closed the stream before answering the call")
		}
		select {
		case <-time.After(min(retry, 30*time.Second)):
		case <-ctx.Done():
			return callResult{}
		}
		next, err := h.resume(ctx, j, lastID)
		if err != nil {
			if ctx.Err() != nil {
				return callResult{}
			}
			return internalFailure("resuming the upstream stream failed: %v", err)
		}
		defer next.done()
		cur, body = next, next.resp.BodyStream()
	}
}

// maxResumes bounds reconnects of one call's upstream stream.
const maxResumes = 10

// resume reopens the call's stream: GET with Last-Event-ID (H-12).
func (h *Handler) resume(ctx context.Context, j *job, lastID string) (*upstreamCall, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	j.req.Header.CopyTo(&req.Header)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.Del(fasthttp.HeaderContentType)
	req.Header.Del(fasthttp.HeaderContentLength) // the POST's length would make the upstream wait for a body
	req.Header.Set(fasthttp.HeaderAccept, "text/event-stream")
	req.Header.Set(headerLastEventID, lastID)
	x, err := h.roundTrip(ctx, req)
	if err != nil {
		return nil, err
	}
	if x.resp.StatusCode() != fasthttp.StatusOK || !isEventStream(x.resp.Header.ContentType()) {
		code := x.resp.StatusCode()
		x.done()
		return nil, fmt.Errorf("upstream answered the resume with HTTP %d", code)
	}
	return x, nil
}

// onUpstreamMessage handles one message of the call's stream; final is
// true when msg is the call's response.
func (h *Handler) onUpstreamMessage(ctx context.Context, j *job, msg []byte) (callResult, bool) {
	env, err := parseEnvelope(msg)
	if err != nil || env.batch != nil {
		j.Log.Warn().Err(err).Msg("ignoring a malformed message on the upstream stream")
		return callResult{}, false
	}
	switch {
	case env.method == "" && (env.hasResult || env.hasError):
		return classify(append([]byte(nil), msg...)), true
	case env.method == methodPing && env.id != nil:
		// Answered here: a ping is no reason for input_required (E-36).
		h.postUpstream(j, appendResultResponse(nil, env.id, []byte("{}")))
	case env.method != "" && env.id != nil:
		h.relayRequest(ctx, j, &env, append([]byte(nil), msg...))
	case env.method != "":
		h.relayNotification(ctx, j, &env, append([]byte(nil), msg...))
	}
	return callResult{}, false
}

// classify maps the upstream's final message to a status on the
// 2025-11-25 wire: a JSON-RPC error or a result with isError:true is
// failed (T-24, Q-03), anything else completed. The outcome itself is kept
// raw, so the other wire can render it its own way.
func classify(msg []byte) callResult {
	vals, err := members(msg, "result", "error")
	if err != nil {
		return internalFailure("upstream answered with a malformed JSON-RPC message")
	}
	if e := vals[1]; e != nil {
		code, text := "", ""
		if ev, err := members(e, "code", "message"); err == nil {
			code = string(ev[0])
			text, _ = unquoteValue(ev[1])
		}
		return callResult{Status: taskstore.Failed, Message: truncate("upstream returned JSON-RPC error "+code+": "+text, 300),
			Outcome: taskstore.Outcome{Kind: taskstore.OutcomeError, Raw: e}}
	}
	res := vals[0]
	if res == nil || res[0] != '{' {
		return internalFailure("upstream answered without a result object")
	}
	out := taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: res}
	rv, err := members(res, "isError", "content")
	if err == nil && string(rv[0]) == "true" {
		return callResult{Status: taskstore.Failed, Message: truncate("tool reported an error: "+firstText(rv[1]), 300), Outcome: out}
	}
	return callResult{Status: taskstore.Completed, Outcome: out}
}

// firstText returns the text of the first text content item.
func firstText(content []byte) string {
	if len(content) == 0 || content[0] != '[' {
		return ""
	}
	s := scanner{b: content, i: 1}
	s.ws()
	if s.i >= len(content) || content[s.i] != '{' {
		return ""
	}
	item, err := s.value()
	if err != nil {
		return ""
	}
	vals, err := members(item, "type", "text")
	if err != nil || string(vals[0]) != `"text"` {
		return ""
	}
	text, _ := unquoteValue(vals[1])
	return text
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// postUpstream sends a message (a notification or a response) upstream
// with the call's session headers and discards the answer.
func (h *Handler) postUpstream(j *job, body []byte) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	j.hdr.CopyTo(&req.Header)
	req.Header.ResetConnectionClose()
	req.SetBody(body)
	err := h.hc.DoTimeout(req, resp, 10*time.Second)
	if err == nil {
		_ = resp.CloseBodyStream()
	}
	if err != nil || resp.StatusCode() >= 300 {
		j.Log.Warn().Err(err).Int(logStatus, resp.StatusCode()).Msg("message to the upstream not accepted")
	}
}

// notifyCancelled tells the upstream to stop the call (P-06, E-26).
func (h *Handler) notifyCancelled(j *job, reason string) {
	if j.modern != nil && j.modern.era == era2026 {
		return // a 2026 upstream learns it from the closed request stream
	}
	body := make([]byte, 0, 160)
	body = append(body, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`...)
	body = append(body, j.Task.UpstreamID...)
	body = append(body, `,"reason":`...)
	body = appendJSONString(body, reason)
	body = append(body, "}}"...)
	h.postUpstream(j, body)
}
