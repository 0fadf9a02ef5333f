package v20260728

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability"
	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/sysconn"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/proxy/wire/v20260728/schema"
)

// The upstream side of the 2026 wire. An upstream of the 2026 era (it
// answers server/discover) gets the 2026 requests as they are, minus what
// taskgate answers itself; one that also offers the tasks extension gets
// everything untouched. An upstream of the 2025 era needs sessions: for its
// stateless 2026 clients taskgate holds upstream sessions (one per
// credential and set of declared client capabilities, initialised with
// those capabilities, bounded in number, closed when idle; a request without credentials gets a session
// of its own, closed when the request ends: see anonymous.md), sends each
// request in the session with the 2026 _meta keys removed, and gives
// results the resultType the 2026 wire requires (and tools no execution
// member).

// eraProbeRetry is how long after a failed probe the next one waits.
const eraProbeRetry = 2 * time.Second

// upstreamEra returns the upstream's era, probing it with server/discover
// the first time: a 2026 upstream answers it with a DiscoverResult that
// lists 2026-07-28, a 2025 one refuses it. native reports a 2026 upstream
// that offers the tasks extension itself.
//
// Under the policy's ownTasks, native is false whatever the upstream
// offers: taskgate serves the extension itself (see owned).
func (w *Wire) upstreamEra() (era int, native bool, err error) {
	w.mu.Lock()
	era, native = w.era, w.native
	wait := time.Until(w.probeAfter)
	w.mu.Unlock()
	if era != 0 {
		return era, native && !w.Policy().OwnTasks, nil
	}
	if wait > 0 {
		return 0, false, errors.New("probing the upstream's protocol era failed a moment ago")
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	w.newUpstreamRequest(req, nil)
	req.Header.Set(wire.HeaderProtocolVersion, schema.ProtocolVersion)
	req.Header.Set(schema.HeaderMethod, wire.MethodDiscover)
	req.SetBodyString(`{"jsonrpc":"2.0","id":"taskgate-probe","method":"server/discover","params":{"_meta":{"` +
		schema.MetaProtocolVersion + `":"` + schema.ProtocolVersion + `","` + schema.MetaClientCapabilities + `":{}}}}`)
	ctx, cancel := context.WithTimeout(w.Root, 10*time.Second)
	defer cancel()
	status, msg, _, err := w.exchange(ctx, req, nil)
	if err != nil {
		w.mu.Lock()
		w.probeAfter = time.Now().Add(eraProbeRetry)
		w.mu.Unlock()
		return 0, false, err
	}
	era = era2025
	if status == fasthttp.StatusOK {
		if res, ok := resultOf(msg); ok {
			if vals, err := jsonx.Members(res, "supportedVersions"); err == nil && bytes.Contains(vals[0], []byte(`"`+schema.ProtocolVersion+`"`)) {
				era = era2026
				_, native, _ = capability.RewriteDiscover(msg)
			}
		}
	}
	w.mu.Lock()
	w.era, w.native = era, native
	w.mu.Unlock()
	w.Log.Info().Int("upstream_era", era).Bool("upstream_tasks_extension", native).Msg("2026-07-28 client: upstream era probed")
	if native && w.Policy().OwnTasks {
		w.Log.Info().Msg("the upstream offers the tasks extension itself; the policy's ownTasks has taskgate serve it (the upstream gets plain calls)")
	}
	return era, native && !w.Policy().OwnTasks, nil
}

// owned reports whether the upstream offers the tasks extension itself
// but the policy's ownTasks has taskgate serve it: the extension is then
// hidden from the upstream (withoutTasksExtension), so that it runs every
// call plainly, and server/discover shows taskgate's.
func (w *Wire) owned() bool {
	w.mu.Lock()
	native := w.native
	w.mu.Unlock()
	return native && w.Policy().OwnTasks
}

// withoutTasksExtension returns params without the tasks extension in
// _meta's client capabilities: taskgate runs the call, and the upstream,
// which offers the extension itself, must not make it a task of its own.
func withoutTasksExtension(params []byte) ([]byte, error) {
	vals, err := jsonx.Members(params, "_meta")
	if err != nil || !isObject(vals[0]) {
		return params, err
	}
	mv, err := jsonx.Members(vals[0], schema.MetaClientCapabilities)
	if err != nil || !isObject(mv[0]) {
		return params, err
	}
	cv, err := jsonx.Members(mv[0], "extensions")
	if err != nil || !isObject(cv[0]) {
		return params, err
	}
	ext, err := jsonx.DeleteMember(cv[0], schema.ExtensionTasks)
	if err != nil || len(ext) == len(cv[0]) {
		return params, err
	}
	caps, err := jsonx.SetMember(mv[0], "extensions", ext)
	if err != nil {
		return nil, err
	}
	meta, err := jsonx.SetMember(vals[0], schema.MetaClientCapabilities, caps)
	if err != nil {
		return nil, err
	}
	return jsonx.SetMember(params, "_meta", meta)
}

// resultOf returns the result object of a JSON-RPC response.
func resultOf(msg []byte) ([]byte, bool) {
	vals, err := jsonx.Members(msg, "result")
	if err != nil || !isObject(vals[0]) {
		return nil, false
	}
	return vals[0], true
}

// newUpstreamRequest makes req a POST to the upstream's MCP endpoint with
// the client's headers (from hdr, when given: Authorization, Host, ...)
// and taskgate's own Content-Type and Accept (upstream.Client.NewRequest).
func (w *Wire) newUpstreamRequest(req *fasthttp.Request, hdr *fasthttp.RequestHeader) {
	w.Up.NewRequest(req, hdr)
}

// exchange sends req on a background connection and returns the HTTP
// status, the JSON-RPC response in the answer (JSON or SSE) and the
// response's Mcp-Session-Id. Requests the upstream sends meanwhile are
// answered through answerTo (nil: not answered): ping with an empty
// result, others with an error.
func (w *Wire) exchange(ctx context.Context, req *fasthttp.Request, answerTo *fasthttp.RequestHeader) (status int, msg []byte, sid string, err error) {
	return w.exchangeRelay(ctx, req, answerTo, nil, nil, nil)
}

// exchangeRelay is exchange for a request of a 2026 client, m: when the
// upstream asks for input of a type m does not declare, it stops reading
// and returns a *missingCapability naming it; and relay (when not nil)
// gets, as they arrive, the progress notifications for token and the log
// messages at m's logLevel or above (M-32).
func (w *Wire) exchangeRelay(ctx context.Context, req *fasthttp.Request, answerTo *fasthttp.RequestHeader, m *reqMeta, token []byte, relay func([]byte)) (status int, msg []byte, sid string, err error) {
	x, err := w.Up.RoundTrip(ctx, req)
	if err != nil {
		return 0, nil, "", err
	}
	defer x.Done()
	status = x.Resp.StatusCode()
	sid = string(x.Resp.Header.Peek(wire.HeaderSessionID))
	body := x.Resp.BodyStream()
	if body == nil {
		body = bytes.NewReader(x.Resp.Body())
	}
	if !wire.IsEventStream(x.Resp.Header.ContentType()) {
		msg, err = wire.ReadAllLimit(body, w.Config.MaxResultSize)
		x.SetReusable(err == nil)
		return status, msg, sid, err
	}
	r := sse.NewReader(body, w.Config.MaxResultSize)
	for {
		ev, err := r.Next()
		if ev != nil && len(ev.Data) > 0 {
			env, perr := wire.ParseEnvelope(ev.Data)
			switch {
			case perr != nil || env.Kind == jsonx.KindBatch:
			case env.IsResponse():
				x.DrainEnd(body)
				return status, append([]byte(nil), ev.Data...), sid, nil
			case env.Method == wire.MethodLogMessage && !env.IsRequest() && relay != nil && m != nil && m.logLevel != "":
				if lv, err := jsonx.Members(env.Params, "level"); err == nil {
					if l, ok := jsonx.UnquoteValue(lv[0]); ok && logLevelRank(l) >= logLevelRank(m.logLevel) {
						relay(append([]byte(nil), ev.Data...))
					}
				}
			case env.Method == wire.MethodProgress && !env.IsRequest() && relay != nil && token != nil:
				if tv, err := jsonx.Members(env.Params, "progressToken"); err == nil && wire.CanonicalID(tv[0]) == wire.CanonicalID(token) {
					relay(append([]byte(nil), ev.Data...))
				}
			case env.IsRequest() && answerTo != nil:
				var ans []byte
				if cap := inputCapability(env.Method); cap != "" && m != nil && !m.declares(cap) {
					w.postWith(answerTo, wire.AppendError(nil, env.ID, wire.CodeMethodNotFound, "taskgate: the client did not declare "+cap))
					return status, nil, sid, &missingCapability{capability: cap}
				}
				if env.Method == wire.MethodPing {
					ans = wire.AppendResult(nil, env.ID, []byte("{}"))
				} else {
					ans = wire.AppendError(nil, env.ID, wire.CodeMethodNotFound, "taskgate: "+env.Method+
						" cannot reach a client of protocol version "+schema.ProtocolVersion+" outside a task")
				}
				w.postWith(answerTo, ans)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return status, nil, sid, fmt.Errorf("upstream ended the stream without answering: %w", io.ErrUnexpectedEOF)
			}
			return status, nil, sid, err
		}
	}
}

// missingCapability is what a plain call's upstream asked for that the
// request did not declare.
type missingCapability struct{ capability string }

func (e *missingCapability) Error() string {
	return "the upstream asked for the client capability " + e.capability + ", which the request did not declare"
}

// inputCapability names the client capability an upstream request needs
// ("" for a request that needs none the 2026 wire carries as input).
func inputCapability(method string) string {
	switch method {
	case "elicitation/create":
		return "elicitation"
	case "sampling/createMessage":
		return "sampling"
	case "roots/list":
		return "roots"
	}
	return ""
}

// declares reports whether m declares the client capability named cap.
func (m *reqMeta) declares(cap string) bool {
	switch cap {
	case "elicitation":
		return m.elicitation
	case "sampling":
		return m.sampling
	case "roots":
		return m.roots
	}
	return false
}

// appendCancelled appends a notifications/cancelled for the request id.
func appendCancelled(dst, id []byte, reason string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"reason":`...)
	dst = wire.AppendJSONString(dst, reason)
	return append(dst, "}}"...)
}

// postWith posts body upstream with the headers hdr and discards the answer.
func (w *Wire) postWith(hdr *fasthttp.RequestHeader, body []byte) {
	_, _ = w.Up.Post(hdr, body, 10*time.Second)
}

// prepareCall fills req (headers only) for a task's upstream call: for a
// 2026 upstream the client's headers; for a 2025 upstream those of the
// owner's upstream session (a session of its own for a caller without
// credentials), which mj holds until the call ends.
func (w *Wire) prepareCall(rc *fasthttp.RequestCtx, req *fasthttp.Request, era int, mj *callState) error {
	w.newUpstreamRequest(req, &rc.Request.Header)
	if era == era2026 {
		return nil
	}
	s, err := w.session(&rc.Request.Header, mj.caps)
	if err != nil {
		return err
	}
	mj.session = s
	s.apply(&req.Header)
	return nil
}

// plainCall forwards a 2026 tools/call that does not become a task.
func (w *Wire) plainCall(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, m *reqMeta, era int) {
	params, err := jsonx.DeleteMember(env.Params, "task")
	if err != nil {
		fail(rc, info, env.ID, 200, wire.CodeInvalidParams, "taskgate: invalid tools/call params: "+err.Error(), nil)
		return
	}
	if era == era2026 {
		if w.owned() {
			if params, err = withoutTasksExtension(params); err != nil {
				fail(rc, info, env.ID, 200, wire.CodeInvalidParams, "taskgate: invalid tools/call params: "+err.Error(), nil)
				return
			}
		}
		if len(params) != len(env.Params) {
			body, err := jsonx.SetMember(rc.PostBody(), "params", params)
			if err != nil {
				fail(rc, info, env.ID, 400, wire.CodeInvalidRequest, "taskgate: "+err.Error(), nil)
				return
			}
			rc.Request.SetBody(body)
		}
		w.Pass(rc, info, env.ID)
		return
	}
	w.bridge(rc, info, env, m, params)
}

// forward serves a 2026 request that taskgate does not answer itself.
func (w *Wire) forward(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, m *reqMeta, era int) {
	if era == era2026 {
		w.Pass(rc, info, env.ID)
		return
	}
	if !env.IsRequest() {
		info.Outcome = "ignored"
		rc.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	w.bridge(rc, info, env, m, env.Params)
}

// discover answers server/discover: a 2026 upstream's own answer with the
// tasks extension added, or for a 2025 upstream one made from the result of
// its initialize.
func (w *Wire) discover(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, m *reqMeta, era int) {
	if !env.IsRequest() {
		fail(rc, info, nil, 400, wire.CodeInvalidRequest, "taskgate: server/discover must be a request with an id", nil)
		return
	}
	id := append([]byte(nil), env.ID...)
	log := w.LogOf(info) // not info: the rewrite may run after the handler returned
	if era == era2026 {
		w.Forward(rc, info, id, func(*fasthttp.Response) func(msg []byte) []byte {
			return func(msg []byte) []byte {
				rewrite := capability.RewriteDiscover
				if w.owned() {
					rewrite = capability.OwnDiscover
				}
				out, _, err := rewrite(msg)
				if err != nil {
					log.Warn().Err(err).Msg("server/discover result not rewritten: malformed upstream answer")
					return msg
				}
				return out
			}
		})
		return
	}
	s, err := w.session(&rc.Request.Header, m.caps())
	if err != nil {
		w.UpstreamFailed(rc, info, id, err)
		return
	}
	defer s.done()
	res, err := capability.DiscoverFromInitialize(s.init, schema.SupportedVersions)
	if err != nil {
		wire.RPCError(rc, info, id, wire.NewError(wire.CodeInternalError, "taskgate: the upstream's initialize result is malformed"))
		return
	}
	wire.RPCResult(rc, id, res)
}

// bridge sends a 2026 request to a 2025 upstream in the caller's upstream
// session and answers with the upstream's response in 2026 form. A request
// that asks for notifications (a progressToken in params._meta, or a
// logLevel) gets the upstream's progress for that token and its log
// messages at that level or above on its own response, before the result,
// as a 2026 server sends them: as they come, on an SSE stream (see
// bridgeStream).
func (w *Wire) bridge(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, m *reqMeta, params []byte) {
	id := append([]byte(nil), env.ID...)
	var token []byte
	if params != nil {
		var err error
		if token, err = progressToken(params); err != nil {
			fail(rc, info, id, 400, wire.CodeInvalidParams, "taskgate: invalid params._meta: "+err.Error(), nil)
			return
		}
		if params, err = strip2026Meta(params); err != nil {
			fail(rc, info, id, 400, wire.CodeInvalidParams, "taskgate: invalid params: "+err.Error(), nil)
			return
		}
	}
	body := make([]byte, 0, len(params)+len(env.Method)+len(id)+64)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = append(body, id...)
	body = append(body, `,"method":`...)
	body = wire.AppendJSONString(body, env.Method)
	if params != nil {
		body = append(body, `,"params":`...)
		body = append(body, params...)
	}
	body = append(body, '}')
	if token != nil || m.logLevel != "" {
		w.bridgeStream(rc, info, env.Method, id, body, m, token)
		return
	}
	ctx, cancel := context.WithTimeout(w.Root, bridgeDeadline)
	defer cancel()
	defer w.trackCall(rc, id, func(string) { cancel() })()
	w.answerBridged(rc, info, w.bridgeExchange(ctx, &rc.Request.Header, env.Method, id, body, m, nil, nil))
}

// bridgeAnswer is the outcome of a bridged request: the HTTP status it
// gets when it is answered alone, the JSON-RPC response, the outcome for
// the request's record ("" = ok) and the upstream failure, if any.
type bridgeAnswer struct {
	status  int
	msg     []byte
	outcome string
	err     error
}

// answerBridged writes a as the whole answer.
func (w *Wire) answerBridged(rc *fasthttp.RequestCtx, info *wire.Info, a bridgeAnswer) {
	if a.err != nil {
		w.Log.Warn().Uint64(wire.LogReqID, rc.ID()).Str(wire.LogRPCMethod, info.Method).Err(a.err).Msg("upstream request failed")
	}
	if a.outcome != "" {
		info.Outcome = a.outcome
	}
	rc.SetStatusCode(a.status)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(a.msg)
}

// bridgeStream serves a bridged request that asked for notifications. The
// exchange runs in its own goroutine (it gets a copy of the request's
// headers, never rc) and hands over each notification to relay. When the
// answer comes before any, it is written as bridge writes it; at the first
// notification the answer becomes an SSE stream (HTTP 200) that carries
// each notification as it comes and then the response. A client that
// closes the stream cancels the request: the upstream gets
// notifications/cancelled.
func (w *Wire) bridgeStream(rc *fasthttp.RequestCtx, info *wire.Info, method string, id, body []byte, m *reqMeta, token []byte) {
	hdr := new(fasthttp.RequestHeader)
	rc.Request.Header.CopyTo(hdr)
	meta := *m
	ctx, cancel := context.WithTimeout(w.Root, bridgeDeadline)
	untrack := w.trackCall(rc, id, func(string) { cancel() })
	notes := make(chan []byte, 64)
	done := make(chan bridgeAnswer, 1)
	relay := func(n []byte) {
		select {
		case notes <- n:
		case <-ctx.Done():
		}
	}
	// The exchange ends by ctx at the latest (the deadline, the client
	// leaving, shutdown); whoever answers waits for done.
	go func() {
		defer untrack()
		done <- w.bridgeExchange(ctx, hdr, method, id, body, &meta, token, relay)
	}()
	var first []byte
	select {
	case a := <-done:
		cancel()
		if len(notes) == 0 {
			w.answerBridged(rc, info, a)
			return
		}
		// Notifications came with the answer: they go before it.
		var b []byte
		for len(notes) > 0 {
			b = sse.Append(b, "", <-notes)
		}
		if a.outcome != "" {
			info.Outcome = a.outcome
		}
		wire.SSEHeader(rc, false)
		rc.SetBody(sse.Append(b, "", a.msg))
		return
	case first = <-notes:
	}
	wire.SSEHeader(rc, true)
	// The writer runs after the handler returned: it uses first, the
	// channels and conn (to see the client leave), never rc.
	conn := rc.Conn()
	se := w.BeginStream(info)
	w.Eng.Enter()
	rc.SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer w.Eng.Leave()
		defer cancel()
		outcome := ""
		defer func() { se.End(outcome) }()
		stop := sysconn.WatchClose(conn, cancel)
		defer stop()
		gone := false
		write := func(msg []byte) {
			if gone {
				return
			}
			if _, err := bw.Write(sse.Append(nil, "", msg)); err != nil || bw.Flush() != nil {
				gone = true
				cancel()
			}
		}
		write(first)
		for {
			select {
			case n := <-notes:
				write(n)
			case a := <-done:
				for len(notes) > 0 {
					write(<-notes)
				}
				write(a.msg)
				outcome = a.outcome
				if gone || ctx.Err() != nil && a.err != nil {
					outcome = wire.OutcomeClientGone
				}
				return
			}
		}
	})
}

// bridgeExchange sends body (the request id, in 2025 form) to the upstream
// in the session of the caller with the headers hdr and returns the answer
// in 2026 form. relay, when given, gets the notifications the request
// asked for (its progress, its log messages) as they arrive.
func (w *Wire) bridgeExchange(ctx context.Context, hdr *fasthttp.RequestHeader, method string, id, body []byte, m *reqMeta, token []byte, relay func([]byte)) bridgeAnswer {
	start := time.Now()
	var status int
	var msg []byte
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var s *bridgeSession
		if s, err = w.session(hdr, m.caps()); err != nil {
			break
		}
		req := fasthttp.AcquireRequest()
		w.newUpstreamRequest(req, hdr)
		s.apply(&req.Header)
		req.SetBody(body)
		status, msg, _, err = w.exchangeRelay(ctx, req, &req.Header, m, token, relay)
		var mc *missingCapability
		switch {
		case errors.As(err, &mc):
			// The call cannot go on without what the client did not
			// declare: the upstream drops it, the client learns what
			// to declare (M-31).
			w.postWith(&req.Header, appendCancelled(nil, id, "the client did not declare "+mc.capability))
		case err != nil && ctx.Err() != nil && w.Root.Err() == nil:
			// The client left (or the deadline passed): the upstream
			// stops working on the request.
			w.postWith(&req.Header, appendCancelled(nil, id, "the client closed the request"))
		}
		fasthttp.ReleaseRequest(req)
		s.done()
		if err == nil && status == fasthttp.StatusNotFound && !isErrorResponse(msg) {
			// The upstream ended the session (it did not run the
			// request): open a new one and send it again.
			w.sessions.drop(s)
			continue
		}
		break
	}
	w.ObserveUpstream(method, time.Since(start))
	if mc := (*missingCapability)(nil); errors.As(err, &mc) {
		return bridgeAnswer{status: fasthttp.StatusBadRequest, outcome: "missing_capability",
			msg: wire.AppendErrorData(nil, id, schema.CodeMissingCapability, "taskgate: "+mc.Error(),
				[]byte(`{"requiredCapabilities":{"`+mc.capability+`":{}}}`))}
	}
	if err != nil {
		st, text := upstream.StatusFor(err)
		return bridgeAnswer{status: st, outcome: "upstream_unreachable", err: err,
			msg: wire.AppendError(nil, id, wire.CodeInternalError, text)}
	}
	// An upstream's JSON-RPC error answer is relayed whatever its HTTP
	// status; an unknown method is HTTP 404 on the 2026 wire (M-30).
	answered := isErrorResponse(msg)
	if (status < 200 || status > 299 || len(msg) == 0) && !answered {
		if status >= 400 && status <= 499 && !methodAt2026(method) {
			// A method neither revision defines, refused by the
			// upstream without a JSON-RPC answer (a 2025 server may
			// answer HTTP 400 and plain text).
			return bridgeAnswer{status: fasthttp.StatusNotFound, outcome: "rpc_error",
				msg: wire.AppendErrorData(nil, id, wire.CodeMethodNotFound, "taskgate: method "+jsonQuote(method)+" not found", nil)}
		}
		return bridgeAnswer{status: fasthttp.StatusBadGateway,
			msg: wire.AppendError(nil, id, wire.CodeInternalError, fmt.Sprintf("taskgate: upstream answered HTTP %d", status))}
	}
	if vals, err := jsonx.Members(msg, "error"); answered && err == nil {
		if res, missing, ok := urlElicitationAnswer(vals[0], m); ok {
			if missing != nil {
				return bridgeAnswer{status: fasthttp.StatusBadRequest, outcome: "rpc_error",
					msg: wire.AppendErrorData(nil, id, schema.CodeMissingCapability,
						"taskgate: the upstream needs a URL elicitation, which the request did not declare", missing)}
			}
			return bridgeAnswer{status: fasthttp.StatusOK, outcome: "input_required", msg: wire.AppendResult(nil, id, res)}
		}
	}
	out, err := capability.Result2026(mapErrorCode(msg), method == wire.MethodToolsList)
	if err != nil {
		out = msg
	}
	switch {
	case answered && errorCodeOf(msg) == wire.CodeMethodNotFound:
		status = fasthttp.StatusNotFound
	case answered && errorCodeOf(msg) == schema.CodeMissingCapability:
		// An upstream that knows the 2026 error (and answers it on the
		// 2025 wire with HTTP 200): on this wire it is HTTP 400.
		status = fasthttp.StatusBadRequest
	case status >= 200 && status <= 299:
		status = fasthttp.StatusOK
	}
	if cacheableMethod(method) {
		if hinted, err := capability.AddCacheHints(out); err == nil {
			out = hinted
		}
	}
	return bridgeAnswer{status: status, msg: out}
}

// progressToken returns the raw progressToken of params._meta (nil when
// there is none).
func progressToken(params []byte) ([]byte, error) {
	vals, err := jsonx.Members(params, "_meta")
	if err != nil || !isObject(vals[0]) {
		return nil, err
	}
	tv, err := jsonx.Members(vals[0], "progressToken")
	if err != nil || tv[0] == nil || string(tv[0]) == "null" {
		return nil, err
	}
	return append([]byte(nil), tv[0]...), nil
}

// offersLogging reports whether an InitializeResult declares logging.
func offersLogging(init []byte) bool {
	vals, err := jsonx.Members(init, "capabilities")
	if err != nil || !isObject(vals[0]) {
		return false
	}
	lv, err := jsonx.Members(vals[0], "logging")
	return err == nil && isObject(lv[0])
}

// isErrorResponse reports whether msg is a JSON-RPC error response.
func isErrorResponse(msg []byte) bool {
	if len(msg) == 0 {
		return false
	}
	vals, err := jsonx.Members(msg, "error")
	return err == nil && isObject(vals[0])
}

// errorCodeOf returns the code of a JSON-RPC error response (0 if none).
func errorCodeOf(msg []byte) int {
	vals, err := jsonx.Members(msg, "error")
	if err != nil || !isObject(vals[0]) {
		return 0
	}
	ev, err := jsonx.Members(vals[0], "code")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(string(ev[0]))
	if err != nil {
		return 0
	}
	return n
}

// cacheableMethod reports whether results of method carry cache hints
// (ttlMs, cacheScope) on the 2026 wire.
func cacheableMethod(method string) bool {
	switch method {
	case wire.MethodToolsList, "prompts/list", "resources/list", "resources/templates/list", "resources/read":
		return true
	}
	return false
}

// bridgeSessions holds the upstream sessions of 2026 clients in front of
// a 2025 upstream: one shared per credential owner, at most max, each
// closed (DELETE) once unused for idle; and the private sessions of
// requests without credentials (private), each closed when released. It
// is safe for concurrent use.
type bridgeSessions struct {
	w    *Wire
	mu   sync.Mutex
	m    map[string]*bridgeSession
	max  int
	idle time.Duration

	privates atomic.Int64   // private sessions open now
	closing  sync.WaitGroup // private sessions being closed
}

// session returns the upstream session a bridged request of the 2026 wire
// with the headers hdr, declaring the client capabilities caps, runs in;
// release it with done. A request with credentials (Authorization) shares
// the session of its owner and capabilities; one without gets a session of
// its own, which no other request ever sees and which is closed when the
// request (or the call it started) ends: a request without credentials
// must never meet upstream state another request created, and on the 2026
// wire, which has no sessions, nothing else tells two such requests apart
// (see anonymous.md).
//
// The session declares to the upstream the capabilities the request
// declares (of those the bridge carries: elicitation with its modes,
// sampling, roots), no
// more: a 2025 server decides by them what it offers and asks (a server
// may list tools only to clients that can sample, or ask roots/list of a
// client that declares roots), so the request sees what it would see
// talking to the server itself. One owner therefore has up to one shared
// session per set of capabilities its requests declare (16 at most);
// server state lives in each of them separately.
func (w *Wire) session(hdr *fasthttp.RequestHeader, caps bridgeCaps) (*bridgeSession, error) {
	owner, identified := w.Owner(hdr)
	if !identified {
		return w.sessions.private(hdr, caps)
	}
	return w.sessions.get(owner, caps, hdr)
}

// bridgeCaps is a set of the client capabilities a bridged upstream
// session declares.
type bridgeCaps uint8

const (
	capElicitForm bridgeCaps = 1 << iota
	capElicitURL
	capSampling
	capRoots
)

// caps returns the capabilities m declares (none for a nil m).
func (m *reqMeta) caps() bridgeCaps {
	var c bridgeCaps
	if m == nil {
		return c
	}
	if m.elicitForm {
		c |= capElicitForm
	}
	if m.elicitURL {
		c |= capElicitURL
	}
	if m.sampling {
		c |= capSampling
	}
	if m.roots {
		c |= capRoots
	}
	return c
}

// json renders c as the capabilities of an initialize request.
func (c bridgeCaps) json() string {
	var parts []string
	switch c & (capElicitForm | capElicitURL) {
	case capElicitForm:
		parts = append(parts, `"elicitation":{"form":{}}`)
	case capElicitURL:
		parts = append(parts, `"elicitation":{"url":{}}`)
	case capElicitForm | capElicitURL:
		parts = append(parts, `"elicitation":{"form":{},"url":{}}`)
	}
	if c&capSampling != 0 {
		parts = append(parts, `"sampling":{}`)
	}
	if c&capRoots != 0 {
		parts = append(parts, `"roots":{}`)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// sessionKey is the key of owner's shared session with the capabilities c.
func sessionKey(owner string, c bridgeCaps) string {
	return owner + "/" + strconv.Itoa(int(c))
}

// bridgeSession is one upstream session.
type bridgeSession struct {
	// pool is set on a private session (of one request without
	// credentials, never in the map), which done closes.
	pool    *bridgeSessions
	owner   string
	key     string        // in bridgeSessions.m (sessionKey); "" for a private one
	caps    bridgeCaps    // the client capabilities it declares
	ready   chan struct{} // closed once initialised (or failed)
	err     error
	sid     string
	version string
	init    []byte    // the upstream's InitializeResult
	hub     listenHub // the session's GET stream, for listen streams
	users   atomic.Int32
	last    atomic.Int64 // unix ns of the last release
}

func (b *bridgeSessions) init(w *Wire, max int, idle time.Duration) {
	b.w, b.max, b.idle, b.m = w, max, idle, make(map[string]*bridgeSession)
}

// apply sets the session's headers on an upstream request.
func (s *bridgeSession) apply(hdr *fasthttp.RequestHeader) {
	hdr.Set(wire.HeaderSessionID, s.sid)
	hdr.Set(wire.HeaderProtocolVersion, s.version)
	hdr.Del(schema.HeaderMethod)
	hdr.Del(schema.HeaderName)
}

// done releases a session taken with get or private. A private session is
// closed at the upstream once its last user released it.
func (s *bridgeSession) done() {
	s.last.Store(time.Now().UnixNano())
	if s.users.Add(-1) == 0 && s.pool != nil {
		s.pool.closeLater(s)
	}
}

// private opens a session for one request alone (of a caller without
// credentials): it is in no map, so no other request finds it, and done
// closes it. Private sessions do not count towards max: each lives only as
// long as its request or its call.
func (b *bridgeSessions) private(hdr *fasthttp.RequestHeader, caps bridgeCaps) (*bridgeSession, error) {
	s := &bridgeSession{pool: b, owner: wire.OwnerAnonymous, caps: caps, ready: make(chan struct{})}
	s.users.Add(1)
	s.err = b.open(s, hdr)
	close(s.ready)
	if s.err != nil {
		return nil, s.err
	}
	b.privates.Add(1)
	return s, nil
}

// closeLater closes a private session at the upstream in the background
// (the request's answer does not wait for the DELETE); closeAll waits for
// these.
func (b *bridgeSessions) closeLater(s *bridgeSession) {
	b.privates.Add(-1)
	b.closing.Add(1)
	go func() {
		defer b.closing.Done()
		b.close(s)
	}()
}

// get returns owner's session declaring caps, opening it when there is
// none; release it with done.
func (b *bridgeSessions) get(owner string, caps bridgeCaps, hdr *fasthttp.RequestHeader) (*bridgeSession, error) {
	key := sessionKey(owner, caps)
	b.mu.Lock()
	s, ok := b.m[key]
	var victim *bridgeSession
	if !ok {
		if len(b.m) >= b.max {
			if victim = b.evictLocked(); victim == nil {
				b.mu.Unlock()
				return nil, fmt.Errorf("%w: all %d upstream sessions are in use", errNoBridgeSession, b.max)
			}
		}
		s = &bridgeSession{owner: owner, key: key, caps: caps, ready: make(chan struct{})}
		b.m[key] = s
	}
	s.users.Add(1)
	b.mu.Unlock()
	if victim != nil {
		b.close(victim)
	}
	if !ok {
		s.err = b.open(s, hdr)
		close(s.ready)
		if s.err != nil {
			b.drop(s)
		}
	}
	<-s.ready
	if s.err != nil {
		s.users.Add(-1)
		return nil, s.err
	}
	return s, nil
}

// evictLocked removes the least recently used idle session and returns it
// for the caller to close; nil when all are in use.
func (b *bridgeSessions) evictLocked() *bridgeSession {
	var victim *bridgeSession
	for _, s := range b.m {
		if s.users.Load() == 0 && (victim == nil || s.last.Load() < victim.last.Load()) {
			victim = s
		}
	}
	if victim != nil {
		delete(b.m, victim.key)
	}
	return victim
}

// drop forgets s (the upstream ended it, or it failed to open).
func (b *bridgeSessions) drop(s *bridgeSession) {
	b.mu.Lock()
	if s.key != "" && b.m[s.key] == s {
		delete(b.m, s.key)
	}
	b.mu.Unlock()
}

// reap closes the sessions idle for longer than b.idle.
func (b *bridgeSessions) reap(now time.Time) {
	var old []*bridgeSession
	b.mu.Lock()
	for k, s := range b.m {
		select {
		case <-s.ready:
		default:
			continue
		}
		if s.users.Load() == 0 && now.Sub(time.Unix(0, s.last.Load())) > b.idle {
			delete(b.m, k)
			old = append(old, s)
		}
	}
	b.mu.Unlock()
	for _, s := range old {
		b.close(s)
	}
}

// closeAll closes every session (shutdown).
func (b *bridgeSessions) closeAll() {
	b.mu.Lock()
	all := make([]*bridgeSession, 0, len(b.m))
	for _, s := range b.m {
		all = append(all, s)
	}
	b.m = make(map[string]*bridgeSession)
	b.mu.Unlock()
	for _, s := range all {
		select {
		case <-s.ready:
			b.close(s)
		default:
		}
	}
	b.closing.Wait()
}

// open initialises s: initialize, then notifications/initialized.
func (b *bridgeSessions) open(s *bridgeSession, hdr *fasthttp.RequestHeader) error {
	w := b.w
	ctx, cancel := context.WithTimeout(w.Root, 30*time.Second)
	defer cancel()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	w.newUpstreamRequest(req, hdr)
	req.Header.Del(wire.HeaderProtocolVersion)
	req.Header.Del(schema.HeaderMethod)
	req.Header.Del(schema.HeaderName)
	req.SetBodyString(`{"jsonrpc":"2.0","id":"taskgate-bridge-init","method":"initialize","params":{"protocolVersion":"` +
		capability.ProtocolVersion + `","capabilities":` + s.caps.json() +
		`,"clientInfo":{"name":"taskgate-bridge","version":"1"}}}`)
	status, msg, sid, err := w.exchange(ctx, req, nil)
	if err != nil {
		return fmt.Errorf("opening an upstream session: %w", err)
	}
	res, ok := resultOf(msg)
	if status != fasthttp.StatusOK || !ok {
		return fmt.Errorf("opening an upstream session: upstream answered HTTP %d without an initialize result", status)
	}
	vals, err := jsonx.Members(res, "protocolVersion")
	if err != nil {
		return fmt.Errorf("opening an upstream session: %w", err)
	}
	s.version, _ = jsonx.UnquoteValue(vals[0])
	if s.version == "" {
		s.version = capability.ProtocolVersion
	}
	s.sid, s.init = sid, append([]byte(nil), res...)
	s.last.Store(time.Now().UnixNano())
	req.Header.Set(wire.HeaderSessionID, sid)
	req.Header.Set(wire.HeaderProtocolVersion, s.version)
	w.postWith(&req.Header, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if offersLogging(res) {
		// Every level reaches taskgate; each request's logLevel decides
		// what its client gets (M-32).
		w.postWith(&req.Header, []byte(`{"jsonrpc":"2.0","id":"taskgate-bridge-loglevel","method":"logging/setLevel","params":{"level":"debug"}}`))
	}
	if s.pool == nil {
		w.Log.Info().Str(wire.LogOwner, s.owner).Str("client_capabilities", s.caps.json()).Str("upstream_version", s.version).
			Msg("upstream session opened for 2026-07-28 clients")
	} else {
		w.Log.Debug().Str("upstream_version", s.version).Msg("upstream session opened for one 2026-07-28 request without credentials")
	}
	return nil
}

// close ends s at the upstream (DELETE).
func (b *bridgeSessions) close(s *bridgeSession) {
	s.hub.close()
	if s.sid == "" {
		return
	}
	_ = b.w.Up.DeleteSession(s.sid, s.version, 5*time.Second)
}

// reapLoop closes idle bridge sessions until the handler stops, then all.
func (w *Wire) reapLoop() {
	defer w.bg.Done()
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-w.Root.Done():
			w.sessions.closeAll()
			return
		case now := <-t.C:
			w.sessions.reap(now)
		}
	}
}

// mapErrorCode rewrites the error codes of the 2025 era that the 2026
// wire does not have: -32002 (resource not found) becomes -32602, and
// -32042 (URL elicitation required, which a 2026 client receives as an
// input request instead) becomes -32603 with the upstream's message. Other
// messages are returned as they are.
func mapErrorCode(msg []byte) []byte {
	vals, err := jsonx.Members(msg, "error")
	if err != nil || !isObject(vals[0]) {
		return msg
	}
	ev, err := jsonx.Members(vals[0], "code")
	if err != nil {
		return msg
	}
	var code string
	switch string(ev[0]) {
	case "-32002":
		code = "-32602"
	case "-32042":
		code = "-32603"
	default:
		return msg
	}
	e, err := jsonx.SetMember(vals[0], "code", []byte(code))
	if err != nil {
		return msg
	}
	if out, err := jsonx.SetMember(msg, "error", e); err == nil {
		return out
	}
	return msg
}
