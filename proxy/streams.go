package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/sysconn"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/taskstore"
)

// Task streams. While a task's upstream call runs, the upstream
// keeps talking on the call's SSE stream: progress and logging
// notifications, and requests to the client (elicitation, sampling, roots).
// The runner stamps each with related-task _meta (T-42, T-63) and queues it
// in the store; listeners drain the queue atomically, so each message is
// delivered once, on one stream (H-11):
//
//   - an open tasks/result SSE stream of the task (preferred, T-64; it marks
//     itself in the store so the runner wakes only it),
//   - else a GET stream of any session of the task's owner (woken through
//     the store's channel of the owner's stream group, streamGroup),
//   - else the message waits in the bounded queue until one opens.
//
// The client's answer to a relayed request is POSTed like any JSON-RPC
// response, on any session of the owner; taskgate recognises it by the
// question id it gave the request (questionID), recorded as pending for
// the owner in the store, and hands it to the runner's inbox, whichever
// replica runs the call; the runner posts it upstream under the upstream's
// own id. When no request is pending the task returns to working (T-65).

const (
	methodProgress        = "notifications/progress"
	methodTaskStatus      = "notifications/tasks/status"
	listeningTTLKeepAlive = 3 // a tasks/result stream's mark lives this many keep-alive intervals
)

// sessionKey is the store's name for a client's MCP session.
func (h *Handler) sessionKey(sid []byte) string {
	if len(sid) == 0 {
		return ""
	}
	return h.keyedHash("mcp-session", sid)
}

// withRelatedTaskParams returns msg with params._meta[related-task] set.
func withRelatedTaskParams(msg []byte, taskID string) ([]byte, error) {
	vals, err := jsonx.Members(msg, "params")
	if err != nil {
		return nil, err
	}
	params := vals[0]
	if params == nil || params[0] != '{' {
		params = []byte("{}")
	}
	params, err = withRelatedTask(params, taskID)
	if err != nil {
		return nil, err
	}
	return jsonx.SetMember(msg, "params", params)
}

// canonicalID renders a raw JSON-RPC id the same way whoever encoded it:
// strings are re-encoded after unescaping, numbers kept as written.
func canonicalID(raw []byte) string {
	if len(raw) > 0 && raw[0] == '"' {
		if s, ok := jsonx.UnquoteValue(raw); ok {
			return string(appendJSONString(nil, s))
		}
	}
	return string(raw)
}

// relayNotification queues an upstream notification of the call for the
// client. Progress also becomes the task's statusMessage, so a client that
// only polls tasks/get sees it.
func (h *Handler) relayNotification(ctx context.Context, j *job, env *envelope, msg []byte) {
	kind := taskstore.KindNotification
	if env.method == methodProgress {
		kind = taskstore.KindProgress
		h.eng.Mail.Progress(ctx, &j.Job, progressText(env.params))
	}
	if j.modern != nil {
		// The 2026 wire has no notifications on tasks (progress fed the
		// statusMessage); a plain call's client takes them on its answer.
		j.modern.notify(env, msg)
		return
	}
	out, err := withRelatedTaskParams(msg, j.Task.ID)
	if err != nil {
		j.Log.Warn().Err(err).Str(logRPCMethod, env.method).Msg("dropping a malformed upstream notification")
		return
	}
	h.eng.Mail.Enqueue(ctx, &j.Job, kind, out, env.method)
}

// relayRequest forwards an upstream request to the client (elicitation,
// sampling, roots): the task enters input_required (T-62) and the request
// waits for a stream.
func (h *Handler) relayRequest(ctx context.Context, j *job, env *envelope, msg []byte) {
	if j.modern != nil {
		h.modernQuestion(ctx, j, env, msg)
		return
	}
	if j.Session == "" {
		// Without an owner the client's answer cannot be matched.
		h.postUpstream(j, appendErrorResponse(nil, env.id, codeMethodNotFound,
			"taskgate: "+env.method+" needs an MCP session or an Authorization header to reach the client"))
		return
	}
	out, qid, err := asQuestion(msg, env.id, j.Task.ID)
	if err != nil {
		j.Log.Warn().Err(err).Msg("answering a malformed upstream request with an error")
		h.postUpstream(j, appendErrorResponse(nil, env.id, codeInvalidRequest, "taskgate: malformed request"))
		return
	}
	if err := h.eng.Mail.Ask(ctx, &j.Job, j.Session, canonicalID(qid), env.method); err != nil {
		j.Log.Warn().Err(err).Msg("recording a pending client request failed")
		h.postUpstream(j, appendErrorResponse(nil, env.id, codeInternalError, "taskgate: "+msgStoreUnavailable))
		return
	}
	j.traceEvent(tracing.EventInputRequired, tracing.MethodName.String(env.method))
	h.eng.Mail.Enqueue(ctx, &j.Job, taskstore.KindRequest, out, env.method)
}

// deliverAnswers posts the client's answers from the task's inbox upstream,
// under the upstream's own request ids, and returns the task to working
// once nothing is pending (T-65). It looks whenever the supervisor wakes
// (wake-ups and lease renewals), also when this runner relayed no
// question: questions of the upstream's GET stream that were tied to the
// task (attributeQuestion) are answered into the inbox too.
func (h *Handler) deliverAnswers(ctx context.Context, j *job) {
	if j.modern != nil {
		h.modernAnswers(ctx, j)
		return
	}
	answers := h.eng.Mail.TakeAnswers(ctx, &j.Job)
	if len(answers) == 0 {
		return
	}
	for _, a := range answers {
		h.postUpstream(j, toUpstreamAnswer(a))
	}
	h.eng.Mail.Answered(ctx, &j.Job, len(answers))
}

// progressText renders a progress notification for statusMessage.
func progressText(params []byte) string {
	if params == nil {
		return ""
	}
	vals, err := jsonx.Members(params, "message", "progress", "total")
	if err != nil {
		return ""
	}
	if m, ok := jsonx.UnquoteValue(vals[0]); ok && m != "" {
		return truncate(m, 200)
	}
	if vals[1] == nil {
		return ""
	}
	if vals[2] != nil {
		return string(vals[1]) + " of " + string(vals[2])
	}
	return "progress " + string(vals[1])
}

// clientAnswer routes a client's JSON-RPC response to the runner of the
// task whose upstream asked (through the store, so any replica works). It
// reports false when the response's id is not a question id (the caller
// then passes it through); answers to question ids never reach the
// upstream directly.
func (h *Handler) clientAnswer(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) bool {
	if !bytes.HasPrefix(env.id, []byte(`"`+questionIDPrefix)) {
		return false // not an id taskgate gave a question: the upstream's business
	}
	owner, _ := h.owner(&rc.Request.Header)
	group := streamGroup(owner)
	taskID, err := "", taskstore.ErrNotFound
	if group != "" {
		taskID, err = h.eng.Mail.Answer(h.root, owner, group, canonicalID(env.id), append([]byte(nil), rc.PostBody()...))
	}
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		// Answered before (the first answer wins), its task ended, or not
		// this owner's: the upstream never issued this id, so the answer
		// is dropped here.
		info.outcome = "answer_ignored"
		rc.SetStatusCode(fasthttp.StatusAccepted)
	case err != nil:
		h.log.Warn().Err(err).Msg("routing a client answer through the store failed")
		info.outcome = "store_unavailable"
		h.httpRPCError(rc, fasthttp.StatusServiceUnavailable, nil, codeInternalError, msgStoreUnavailable)
	default:
		info.outcome, info.taskID = "answer_routed", taskID
		rc.SetStatusCode(fasthttp.StatusAccepted)
	}
	return true
}

// appendStatusNotification appends notifications/tasks/status for t (the
// full task, no related-task meta: T-45, E-40).
func appendStatusNotification(dst []byte, t *taskstore.Task) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":"`+methodTaskStatus+`","params":`...)
	dst = appendTask(dst, t)
	return append(dst, '}')
}

// getStream serves the standalone GET SSE stream of a session at
// 2025-11-25: the upstream's stream relayed event by event, merged with
// the session's task messages and status notifications, with keep-alive
// comments. An upstream without a GET stream (405) still gets taskgate's.
func (h *Handler) getStream(rc *fasthttp.RequestCtx, info *reqInfo) {
	sid := append([]byte(nil), rc.Request.Header.Peek(headerSessionID)...)
	owner, _ := h.owner(&rc.Request.Header)
	h.prepareUpstream(rc, &rc.Request)
	req := fasthttp.AcquireRequest()
	rc.Request.Header.CopyTo(&req.Header)
	// A dedicated connection: closing it is the one safe way to stop a
	// reader blocked on a long-lived stream.
	ctx, cancel := context.WithCancel(h.root)
	start := time.Now()
	x, err := h.up.RoundTrip(ctx, req)
	fasthttp.ReleaseRequest(req)
	h.m.observeUpstream(metricGetStream, time.Since(start))
	if err != nil {
		cancel()
		h.upstreamFailed(rc, info, nil, err)
		return
	}
	resp, done, abort := x.Resp, x.Done, x.Abort // a stream's connection is never reused
	var upBody io.Reader
	switch {
	case resp.StatusCode() == fasthttp.StatusOK && isEventStream(resp.Header.ContentType()):
		upBody = resp.BodyStream()
		resp.Header.CopyTo(&rc.Response.Header)
		upstream.StripResponseHopByHop(&rc.Response.Header)
		rc.Response.Header.ResetConnectionClose()
	case resp.StatusCode() == fasthttp.StatusMethodNotAllowed:
		done()
		cancel()
		done, cancel, abort = func() {}, func() {}, func() {}
		rc.SetStatusCode(fasthttp.StatusOK)
		rc.Response.Header.SetContentType("text/event-stream")
		rc.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	default:
		rc.SetStatusCode(resp.StatusCode())
		resp.Header.CopyTo(&rc.Response.Header)
		body, _ := readAllLimit(resp.BodyStream(), 64<<10)
		rc.SetBody(body)
		done()
		cancel()
		h.relayResponse(rc)
		return
	}
	info.outcome = "stream"
	rc.Response.ImmediateHeaderFlush = true
	sess := h.sessionKey(sid)
	// The stream writer below runs after the handler has returned, when rc,
	// its Request, Response and headers are fasthttp's: it never touches
	// them. It uses copies and values it owns (owner, sess, se, upstream
	// with done, cancel and abort) and conn, only to see the client leave,
	// until it returns; w is valid until then too.
	conn := rc.Conn()
	se := h.beginStream(info)
	h.eng.Enter()
	rc.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer h.eng.Leave()
		var left atomic.Bool
		defer func() {
			if left.Load() {
				se.end(outcomeClientGone)
			} else {
				se.end("")
			}
		}()
		defer done()
		defer cancel()
		// A client that closes the stream is seen at once (not at the
		// next keep-alive write): the upstream stream is closed with it,
		// so the upstream sends its messages on a POST stream instead.
		sctx, scancel := context.WithCancel(h.root)
		defer scancel()
		defer sysconn.WatchClose(conn, func() { left.Store(true); scancel(); abort() })()
		h.mergeStream(sctx, w, upBody, abort, owner, sess)
	})
}

// mergeStream writes the GET stream until the client or the upstream ends
// it: the upstream's events, and the messages of every task of owner (any
// session, any replica). sess is the store key of the stream's session (for
// questions of the upstream's own stream, attributeQuestion). It reads
// upstream in a goroutine; on return it aborts the upstream connection and
// waits for that goroutine, so the caller may release the response
// afterwards; it ends with ctx too (the client left). Questions it delivered that are still unanswered when it ends
// are queued again (redeliverOpen).
func (h *Handler) mergeStream(ctx context.Context, w *bufio.Writer, upstream io.Reader, abort func(), owner, sess string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	group := streamGroup(owner)
	var events <-chan taskstore.SessionEvent
	if mail, err := h.eng.Mail.WatchOwner(ctx, owner, group); err != nil {
		h.log.Warn().Err(err).Msg("GET stream without task messages: subscribing failed")
	} else {
		defer mail.Stop()
		events = mail.Events()
	}
	var open []openQuestion
	defer func() {
		if len(open) > 0 {
			h.redeliverOpen(owner, open)
		}
	}()

	type upEvent struct{ raw, data []byte }
	up := make(chan upEvent, 16)
	if upstream != nil {
		readerDone := make(chan struct{})
		defer func() {
			cancel()
			abort()
			<-readerDone
		}()
		go func() {
			defer close(readerDone)
			defer close(up)
			r := sse.NewReader(upstream, h.cfg.MaxResultSize)
			for {
				ev, err := r.Next()
				if ev != nil && len(ev.Raw) > 0 {
					raw := append([]byte(nil), ev.Raw...)
					var data []byte
					if len(ev.Data) > 0 {
						data = append([]byte(nil), ev.Data...)
					}
					select {
					case up <- upEvent{raw, data}:
					case <-ctx.Done():
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	} else if _, err := w.WriteString(": taskgate stream\n\n"); err != nil || w.Flush() != nil {
		return
	}

	// write delivers one message of taskID to the client.
	write := func(taskID string, m taskstore.Message) bool {
		if _, err := w.Write(sse.Append(nil, "", m.Data)); err != nil || w.Flush() != nil {
			return false
		}
		open = noteQuestion(open, taskID, m.Data)
		return true
	}
	drain := func(taskID string) bool {
		return h.eng.Mail.DeliverQueued(ctx, owner, taskID, func(m taskstore.Message) bool { return write(taskID, m) })
	}
	rescan := func() bool { return h.eng.Mail.DeliverAllQueued(ctx, owner, group, write) }
	if events != nil && !rescan() {
		return
	}
	keep := time.NewTicker(h.cfg.KeepAlive)
	defer keep.Stop()
	var upCh <-chan upEvent = up
	if upstream == nil {
		upCh = nil
	}
	for {
		select {
		case ev, ok := <-upCh:
			if !ok {
				return // the upstream ended its stream; the client reconnects
			}
			if ev.data != nil && h.attributeQuestion(ctx, owner, sess, ev.data) {
				continue // now the task's question: it comes through its queue
			}
			if _, err := w.Write(ev.raw); err != nil || w.Flush() != nil {
				return
			}
		case ev := <-events:
			ok := true
			switch ev.Kind {
			case 'q':
				ok = drain(ev.TaskID)
			case 's':
				t, err := h.eng.Task(ctx, owner, ev.TaskID)
				if err == nil {
					_, werr := w.Write(sse.Append(nil, "", appendStatusNotification(nil, t)))
					ok = werr == nil && w.Flush() == nil
				}
			default:
				ok = rescan()
			}
			if !ok {
				return
			}
		case <-keep.C:
			if _, err := w.WriteString(": keep-alive\n\n"); err != nil || w.Flush() != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// Requests an upstream may send to the client about a running call.
const (
	methodElicit    = "elicitation/create"
	methodSampling  = "sampling/createMessage"
	methodRootsList = "roots/list"
)

// attributeQuestion ties a question the upstream sent on its standalone GET
// stream to a task, when exactly one task call of owner runs on the
// upstream session sess: the question then travels like the call's own
// (related-task _meta, input_required, the task's queue, answered through
// the task's runner). It reports whether it took msg; an unattributable
// question (no task call, or several, on the session; a store error) is
// left to pass through as it came.
func (h *Handler) attributeQuestion(ctx context.Context, owner, sess string, msg []byte) bool {
	env, err := parseEnvelope(msg)
	if err != nil || !env.isRequest() {
		return false
	}
	switch env.method {
	case methodElicit, methodSampling, methodRootsList:
	default:
		return false
	}
	group := streamGroup(owner)
	if group == "" || sess == "" {
		return false
	}
	taskID, ok := h.eng.Mail.OnlyTaskOn(ctx, sess)
	if !ok {
		return false
	}
	out, qid, err := asQuestion(msg, env.id, taskID)
	if err != nil {
		return false
	}
	// The engine refuses a task of another owner (not found) or one that
	// ended; the question then passes through.
	if err := h.eng.Mail.AskFor(ctx, owner, group, taskID, canonicalID(qid), env.method, out); err != nil {
		if !errors.Is(err, engine.ErrNotPending) {
			h.log.Warn().Err(err).Str(logTaskID, taskID).Msg("queueing a question of the upstream's GET stream failed")
		}
		return false
	}
	h.log.Info().Str(logTaskID, taskID).Str(logRPCMethod, env.method).
		Msg("question on the upstream's GET stream tied to the session's only running task")
	return true
}
