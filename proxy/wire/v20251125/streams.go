package v20251125

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
	"github.com/taskgate/taskgate/proxy/wire"
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
	listeningTTLKeepAlive = 3 // a tasks/result stream's mark lives this many keep-alive intervals
)

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

// relayNotification queues an upstream notification of the call for the
// client. Progress also becomes the task's statusMessage, so a client that
// only polls tasks/get sees it.
func (w *Wire) relayNotification(ctx context.Context, j *wire.Job, env *wire.Envelope, msg []byte) {
	kind := taskstore.KindNotification
	if env.Method == wire.MethodProgress {
		kind = taskstore.KindProgress
		w.Eng.Mail.Progress(ctx, &j.Job, wire.ProgressText(env.Params))
	}
	out, err := withRelatedTaskParams(msg, j.Task.ID)
	if err != nil {
		j.Log.Warn().Err(err).Str(wire.LogRPCMethod, env.Method).Msg("dropping a malformed upstream notification")
		return
	}
	w.Eng.Mail.Enqueue(ctx, &j.Job, kind, out, env.Method)
}

// relayRequest forwards an upstream request to the client (elicitation,
// sampling, roots): the task enters input_required (T-62) and the request
// waits for a stream.
func (w *Wire) relayRequest(ctx context.Context, j *wire.Job, env *wire.Envelope, msg []byte) {
	if j.Session == "" {
		// Without an owner the client's answer cannot be matched.
		w.PostUpstream(j, wire.AppendError(nil, env.ID, wire.CodeMethodNotFound,
			"taskgate: "+env.Method+" needs an MCP session or an Authorization header to reach the client"))
		return
	}
	out, qid, err := asQuestion(msg, env.ID, j.Task.ID)
	if err != nil {
		j.Log.Warn().Err(err).Msg("answering a malformed upstream request with an error")
		w.PostUpstream(j, wire.AppendError(nil, env.ID, wire.CodeInvalidRequest, "taskgate: malformed request"))
		return
	}
	if err := w.Eng.Mail.Ask(ctx, &j.Job, j.Session, wire.CanonicalID(qid), env.Method); err != nil {
		j.Log.Warn().Err(err).Msg("recording a pending client request failed")
		w.PostUpstream(j, wire.AppendError(nil, env.ID, wire.CodeInternalError, "taskgate: "+wire.MsgStoreUnavailable))
		return
	}
	j.TraceEvent(tracing.EventInputRequired, tracing.MethodName.String(env.Method))
	w.Eng.Mail.Enqueue(ctx, &j.Job, taskstore.KindRequest, out, env.Method)
}

// deliverAnswers posts the client's answers from the task's inbox upstream,
// under the upstream's own request ids, and returns the task to working
// once nothing is pending (T-65). It looks whenever the supervisor wakes
// (wake-ups and lease renewals), also when this runner relayed no
// question: questions of the upstream's GET stream that were tied to the
// task (attributeQuestion) are answered into the inbox too.
func (w *Wire) deliverAnswers(ctx context.Context, j *wire.Job) {
	answers := w.Eng.Mail.TakeAnswers(ctx, &j.Job)
	if len(answers) == 0 {
		return
	}
	for _, a := range answers {
		w.PostUpstream(j, toUpstreamAnswer(a))
	}
	w.Eng.Mail.Answered(ctx, &j.Job, len(answers))
}

// clientAnswer routes a client's JSON-RPC response to the runner of the
// task whose upstream asked (through the store, so any replica works). It
// reports false when the response's id is not a question id (the caller
// then passes it through); answers to question ids never reach the
// upstream directly.
func (w *Wire) clientAnswer(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) bool {
	if !bytes.HasPrefix(env.ID, []byte(`"`+wire.QuestionIDPrefix)) {
		return false // not an id taskgate gave a question: the upstream's business
	}
	owner, _ := w.Owner(&rc.Request.Header)
	group := wire.StreamGroup(owner)
	taskID, err := "", taskstore.ErrNotFound
	if group != "" {
		taskID, err = w.Eng.Mail.Answer(w.Root, owner, group, wire.CanonicalID(env.ID), append([]byte(nil), rc.PostBody()...))
	}
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		// Answered before (the first answer wins), its task ended, or not
		// this owner's: the upstream never issued this id, so the answer
		// is dropped here.
		info.Outcome = "answer_ignored"
		rc.SetStatusCode(fasthttp.StatusAccepted)
	case err != nil:
		w.Log.Warn().Err(err).Msg("routing a client answer through the store failed")
		info.Outcome = "store_unavailable"
		wire.HTTPError(rc, fasthttp.StatusServiceUnavailable, nil, wire.CodeInternalError, wire.MsgStoreUnavailable)
	default:
		info.Outcome, info.TaskID = "answer_routed", taskID
		rc.SetStatusCode(fasthttp.StatusAccepted)
	}
	return true
}

// appendStatusNotification appends notifications/tasks/status for t (the
// full task, no related-task meta: T-45, E-40).
func appendStatusNotification(dst []byte, t *taskstore.Task) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":"`+wire.MethodTaskStatus+`","params":`...)
	dst = appendTask(dst, t)
	return append(dst, '}')
}

// getStream serves the standalone GET SSE stream of a session at
// 2025-11-25: the upstream's stream relayed event by event, merged with
// the session's task messages and status notifications, with keep-alive
// comments. An upstream without a GET stream (405) still gets taskgate's.
func (w *Wire) getStream(rc *fasthttp.RequestCtx, info *wire.Info) {
	sid := append([]byte(nil), rc.Request.Header.Peek(wire.HeaderSessionID)...)
	owner, _ := w.Owner(&rc.Request.Header)
	w.PrepareUpstream(rc, &rc.Request)
	req := fasthttp.AcquireRequest()
	rc.Request.Header.CopyTo(&req.Header)
	// A dedicated connection: closing it is the one safe way to stop a
	// reader blocked on a long-lived stream.
	ctx, cancel := context.WithCancel(w.Root)
	start := time.Now()
	x, err := w.Up.RoundTrip(ctx, req)
	fasthttp.ReleaseRequest(req)
	w.ObserveUpstream(wire.MetricGetStream, time.Since(start))
	if err != nil {
		cancel()
		w.UpstreamFailed(rc, info, nil, err)
		return
	}
	resp, done, abort := x.Resp, x.Done, x.Abort // a stream's connection is never reused
	var upBody io.Reader
	switch {
	case resp.StatusCode() == fasthttp.StatusOK && wire.IsEventStream(resp.Header.ContentType()):
		upBody = resp.BodyStream()
		resp.Header.CopyTo(&rc.Response.Header)
		upstream.StripResponseHopByHop(&rc.Response.Header)
		rc.Response.Header.ResetConnectionClose()
	case resp.StatusCode() == fasthttp.StatusMethodNotAllowed:
		done()
		cancel()
		done, cancel, abort = func() {}, func() {}, func() {}
		wire.SSEHeader(rc, false)
	default:
		rc.SetStatusCode(resp.StatusCode())
		resp.Header.CopyTo(&rc.Response.Header)
		body, _ := wire.ReadAllLimit(resp.BodyStream(), 64<<10)
		rc.SetBody(body)
		done()
		cancel()
		w.RelayResponse(rc)
		return
	}
	info.Outcome = "stream"
	rc.Response.ImmediateHeaderFlush = true
	sess := w.SessionKey(sid)
	// The stream writer below runs after the handler has returned, when rc,
	// its Request, Response and headers are fasthttp's: it never touches
	// them. It uses copies and values it owns (owner, sess, se, upstream
	// with done, cancel and abort) and conn, only to see the client leave,
	// until it returns; w is valid until then too.
	conn := rc.Conn()
	se := w.BeginStream(info)
	w.Eng.Enter()
	rc.SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer w.Eng.Leave()
		var left atomic.Bool
		defer func() {
			if left.Load() {
				se.End(wire.OutcomeClientGone)
			} else {
				se.End("")
			}
		}()
		defer done()
		defer cancel()
		// A client that closes the stream is seen at once (not at the
		// next keep-alive write): the upstream stream is closed with it,
		// so the upstream sends its messages on a POST stream instead.
		sctx, scancel := context.WithCancel(w.Root)
		defer scancel()
		defer sysconn.WatchClose(conn, func() { left.Store(true); scancel(); abort() })()
		w.mergeStream(sctx, bw, upBody, abort, owner, sess)
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
func (w *Wire) mergeStream(ctx context.Context, bw *bufio.Writer, upstream io.Reader, abort func(), owner, sess string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	group := wire.StreamGroup(owner)
	var events <-chan taskstore.SessionEvent
	if mail, err := w.Eng.Mail.WatchOwner(ctx, owner, group); err != nil {
		w.Log.Warn().Err(err).Msg("GET stream without task messages: subscribing failed")
	} else {
		defer mail.Stop()
		events = mail.Events()
	}
	var open []openQuestion
	defer func() {
		if len(open) > 0 {
			w.redeliverOpen(owner, open)
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
			r := sse.NewReader(upstream, w.Config.MaxResultSize)
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
	} else if _, err := bw.WriteString(": taskgate stream\n\n"); err != nil || bw.Flush() != nil {
		return
	}

	// write delivers one message of taskID to the client.
	write := func(taskID string, m taskstore.Message) bool {
		if _, err := bw.Write(sse.Append(nil, "", m.Data)); err != nil || bw.Flush() != nil {
			return false
		}
		open = noteQuestion(open, taskID, m.Data)
		return true
	}
	drain := func(taskID string) bool {
		return w.Eng.Mail.DeliverQueued(ctx, owner, taskID, func(m taskstore.Message) bool { return write(taskID, m) })
	}
	rescan := func() bool { return w.Eng.Mail.DeliverAllQueued(ctx, owner, group, write) }
	if events != nil && !rescan() {
		return
	}
	keep := time.NewTicker(w.Config.KeepAlive)
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
			if ev.data != nil && w.attributeQuestion(ctx, owner, sess, ev.data) {
				continue // now the task's question: it comes through its queue
			}
			if _, err := bw.Write(ev.raw); err != nil || bw.Flush() != nil {
				return
			}
		case ev := <-events:
			ok := true
			switch ev.Kind {
			case 'q':
				ok = drain(ev.TaskID)
			case 's':
				t, err := w.Eng.Task(ctx, owner, ev.TaskID)
				if err == nil {
					_, werr := bw.Write(sse.Append(nil, "", appendStatusNotification(nil, t)))
					ok = werr == nil && bw.Flush() == nil
				}
			default:
				ok = rescan()
			}
			if !ok {
				return
			}
		case <-keep.C:
			if _, err := bw.WriteString(": keep-alive\n\n"); err != nil || bw.Flush() != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// attributeQuestion ties a question the upstream sent on its standalone GET
// stream to a task, when exactly one task call of owner runs on the
// upstream session sess: the question then travels like the call's own
// (related-task _meta, input_required, the task's queue, answered through
// the task's runner). It reports whether it took msg; an unattributable
// question (no task call, or several, on the session; a store error) is
// left to pass through as it came.
func (w *Wire) attributeQuestion(ctx context.Context, owner, sess string, msg []byte) bool {
	env, err := wire.ParseEnvelope(msg)
	if err != nil || !env.IsRequest() {
		return false
	}
	switch env.Method {
	case wire.MethodElicit, wire.MethodSampling, wire.MethodRootsList:
	default:
		return false
	}
	group := wire.StreamGroup(owner)
	if group == "" || sess == "" {
		return false
	}
	taskID, ok := w.Eng.Mail.OnlyTaskOn(ctx, sess)
	if !ok {
		return false
	}
	out, qid, err := asQuestion(msg, env.ID, taskID)
	if err != nil {
		return false
	}
	// The engine refuses a task of another owner (not found) or one that
	// ended; the question then passes through.
	if err := w.Eng.Mail.AskFor(ctx, owner, group, taskID, wire.CanonicalID(qid), env.Method, out); err != nil {
		if !errors.Is(err, engine.ErrNotPending) {
			w.Log.Warn().Err(err).Str(wire.LogTaskID, taskID).Msg("queueing a question of the upstream's GET stream failed")
		}
		return false
	}
	w.Log.Info().Str(wire.LogTaskID, taskID).Str(wire.LogRPCMethod, env.Method).
		Msg("question on the upstream's GET stream tied to the session's only running task")
	return true
}
