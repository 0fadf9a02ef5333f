package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/taskstore"
)

// Task streams (issue 4). While a task's upstream call runs, the upstream
// keeps talking on the call's SSE stream: progress and logging
// notifications, and requests to the client (elicitation, sampling, roots).
// The runner stamps each with related-task _meta (T-42, T-63) and queues it
// in the store; listeners drain the queue atomically, so each message is
// delivered once, on one stream (H-11):
//
//   - an open tasks/result SSE stream of the task (preferred, T-64; it marks
//     itself in the store so the runner wakes only it),
//   - else the owner's GET stream of the session (woken through the
//     session channel),
//   - else the message waits in the bounded queue until one opens.
//
// The client's answer to a relayed request is POSTed like any JSON-RPC
// response; taskgate recognises it by the pending request id recorded in
// the store and hands it to the runner's inbox, whichever replica runs the
// call; the runner posts it upstream. When no request is pending the task
// returns to working (T-65).

const (
	methodProgress        = "notifications/progress"
	methodTaskStatus      = "notifications/tasks/status"
	statusThrottle        = 250 * time.Millisecond
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
	vals, err := members(msg, "params")
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
	return setMember(msg, "params", params)
}

// canonicalID renders a raw JSON-RPC id the same way whoever encoded it:
// strings are re-encoded after unescaping, numbers kept as written.
func canonicalID(raw []byte) string {
	if len(raw) > 0 && raw[0] == '"' {
		if s, ok := unquoteValue(raw); ok {
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
		if text := progressText(env.params); text != "" && time.Since(j.lastStatus) >= statusThrottle {
			j.lastStatus = time.Now()
			sctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
			_, _ = h.store.Update(sctx, j.t.Owner, j.t.ID, "", text)
			cancel()
		}
	}
	out, err := withRelatedTaskParams(msg, j.t.ID)
	if err != nil {
		j.log.Warn().Err(err).Str(logRPCMethod, env.method).Msg("dropping a malformed upstream notification")
		return
	}
	h.enqueue(ctx, j, kind, out, env.method)
}

func (h *Handler) enqueue(ctx context.Context, j *job, kind taskstore.MessageKind, msg []byte, method string) {
	sctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	dropped, err := h.store.Enqueue(sctx, j.t.Owner, j.t.ID, kind, msg, h.cfg.QueueMax)
	cancel()
	switch {
	case err == nil && dropped > 0:
		j.log.Warn().Int("dropped", dropped).Int("queue_max", h.cfg.QueueMax).
			Msg("task message queue full: dropped the oldest progress/log notifications")
	case errors.Is(err, taskstore.ErrTerminal), errors.Is(err, taskstore.ErrNotFound), ctx.Err() != nil:
		// T-50: nothing after the end (a cancel or timeout ends ctx too).
	case err != nil:
		j.log.Warn().Err(err).Str(logRPCMethod, method).Msg("queueing a task message failed")
	}
}

// relayRequest forwards an upstream request to the client (elicitation,
// sampling, roots): the task enters input_required (T-62) and the request
// waits for a stream.
func (h *Handler) relayRequest(ctx context.Context, j *job, env *envelope, msg []byte) {
	if j.session == "" {
		// Without a session the client's answer cannot be matched.
		h.postUpstream(j, appendErrorResponse(nil, env.id, codeMethodNotFound,
			"taskgate: "+env.method+" needs an MCP session to reach the client"))
		return
	}
	out, err := withRelatedTaskParams(msg, j.t.ID)
	if err != nil {
		j.log.Warn().Err(err).Msg("answering a malformed upstream request with an error")
		h.postUpstream(j, appendErrorResponse(nil, env.id, codeInvalidRequest, "taskgate: malformed request"))
		return
	}
	sctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	defer cancel()
	if err := h.store.AddPending(sctx, j.t.Owner, j.session, canonicalID(env.id), j.t.ID); err != nil {
		j.log.Warn().Err(err).Msg("recording a pending client request failed")
		h.postUpstream(j, appendErrorResponse(nil, env.id, codeInternalError, "taskgate: "+msgStoreUnavailable))
		return
	}
	j.pending.Add(1)
	if _, err := h.store.Update(sctx, j.t.Owner, j.t.ID, taskstore.InputRequired, "waiting for the client to answer "+env.method); err != nil {
		j.log.Debug().Err(err).Msg("moving the task to input_required failed")
	}
	h.enqueue(ctx, j, taskstore.KindRequest, out, env.method)
}

// deliverAnswers posts the client's answers from the task's inbox upstream
// and returns the task to working once nothing is pending (T-65).
func (h *Handler) deliverAnswers(ctx context.Context, j *job) {
	if j.pending.Load() <= 0 {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	answers, err := h.store.TakeAnswers(sctx, j.t.Owner, j.t.ID)
	cancel()
	if err != nil || len(answers) == 0 {
		return
	}
	for _, a := range answers {
		h.postUpstream(j, a)
		j.pending.Add(-1)
	}
	if j.pending.Load() <= 0 {
		sctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
		_, _ = h.store.Update(sctx, j.t.Owner, j.t.ID, taskstore.Working, "input received; working")
		cancel()
	}
}

// progressText renders a progress notification for statusMessage.
func progressText(params []byte) string {
	if params == nil {
		return ""
	}
	vals, err := members(params, "message", "progress", "total")
	if err != nil {
		return ""
	}
	if m, ok := unquoteValue(vals[0]); ok && m != "" {
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
// task whose upstream asked (through the store, so any replica works).
// It reports false when the response answers no pending task request;
// the caller then passes it through.
func (h *Handler) clientAnswer(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) bool {
	sid := rc.Request.Header.Peek(headerSessionID)
	if len(sid) == 0 {
		return false
	}
	owner, _ := h.owner(&rc.Request.Header)
	ctx, cancel := context.WithTimeout(h.root, h.cfg.StoreTimeout)
	defer cancel()
	taskID, err := h.store.Answer(ctx, owner, h.sessionKey(sid), canonicalID(env.id), append([]byte(nil), rc.PostBody()...))
	if err != nil {
		if !errors.Is(err, taskstore.ErrNotFound) {
			h.log.Warn().Err(err).Msg("routing a client answer through the store failed; passing it through")
		}
		return false
	}
	info.outcome, info.taskID = "answer_routed", taskID
	rc.SetStatusCode(fasthttp.StatusAccepted)
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
	x, err := h.roundTrip(ctx, req)
	fasthttp.ReleaseRequest(req)
	h.m.upstreamLatency.WithLabelValues("get_stream").Observe(time.Since(start).Seconds())
	if err != nil {
		cancel()
		h.upstreamFailed(rc, info, nil, err)
		return
	}
	resp, done, abort := x.resp, x.done, x.abort // a stream's connection is never reused
	var upstream io.Reader
	switch {
	case resp.StatusCode() == fasthttp.StatusOK && isEventStream(resp.Header.ContentType()):
		upstream = resp.BodyStream()
		resp.Header.CopyTo(&rc.Response.Header)
		stripResponseHopByHop(&rc.Response.Header)
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
	h.wg.Add(1)
	rc.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer h.wg.Done()
		defer done()
		defer cancel()
		h.mergeStream(w, upstream, abort, owner, sess)
	})
}

// mergeStream writes the GET stream until the client or the upstream ends
// it. It reads upstream in a goroutine; on return it aborts the upstream
// connection and waits for that goroutine, so the caller may release the
// response afterwards.
func (h *Handler) mergeStream(w *bufio.Writer, upstream io.Reader, abort func(), owner, sess string) {
	ctx, cancel := context.WithCancel(h.root)
	defer cancel()
	wctx, wcancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	events, stop, err := h.store.WatchSession(wctx, owner, sess)
	wcancel()
	if err != nil {
		h.log.Warn().Err(err).Msg("GET stream without task messages: subscribing failed")
		events, stop = nil, func() {}
	}
	defer stop()

	up := make(chan []byte, 16)
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
			r := newSSEReader(upstream, h.cfg.MaxResultSize)
			for {
				ev, err := r.next()
				if ev != nil && len(ev.raw) > 0 {
					select {
					case up <- append([]byte(nil), ev.raw...):
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

	drain := func(taskID string) bool {
		sctx, c := context.WithTimeout(ctx, h.cfg.StoreTimeout)
		msgs, err := h.store.Drain(sctx, owner, taskID)
		c()
		if err != nil {
			return true
		}
		for i, m := range msgs {
			if _, err := w.Write(appendSSE(nil, "", m.Data)); err != nil || w.Flush() != nil {
				rctx, c := context.WithTimeout(context.Background(), h.cfg.StoreTimeout)
				_ = h.store.Requeue(rctx, owner, taskID, msgs[i:])
				c()
				return false
			}
		}
		return true
	}
	rescan := func() bool {
		sctx, c := context.WithTimeout(ctx, h.cfg.StoreTimeout)
		ids, err := h.store.QueuedTasks(sctx, owner, sess)
		c()
		if err != nil {
			return true
		}
		for _, id := range ids {
			if !drain(id) {
				return false
			}
		}
		return true
	}
	if events != nil && !rescan() {
		return
	}
	keep := time.NewTicker(h.cfg.KeepAlive)
	defer keep.Stop()
	var upCh <-chan []byte = up
	if upstream == nil {
		upCh = nil
	}
	for {
		select {
		case raw, ok := <-upCh:
			if !ok {
				return // the upstream ended its stream; the client reconnects
			}
			if _, err := w.Write(raw); err != nil || w.Flush() != nil {
				return
			}
		case ev := <-events:
			ok := true
			switch ev.Kind {
			case 'q':
				ok = drain(ev.TaskID)
			case 's':
				sctx, c := context.WithTimeout(ctx, h.cfg.StoreTimeout)
				t, err := h.store.Get(sctx, owner, ev.TaskID)
				c()
				if err == nil {
					_, werr := w.Write(appendSSE(nil, "", appendStatusNotification(nil, t)))
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
