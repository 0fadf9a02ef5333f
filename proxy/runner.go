package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/jsonx"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/upstream"
	"github.com/taskgate/taskgate/taskstore"
)

// job is one background task call. The runner owns req.
type job struct {
	t       *taskstore.Task
	req     *fasthttp.Request
	st      policy.Settings
	log     jobLog
	session string // the owner's stream group (streamGroup; "" for anonymous callers)
	// upSession is the store key of the upstream session the call runs on
	// ("" without one, or when it is not recorded there).
	upSession string
	// hdr is a copy of req's headers made before the call starts, for the
	// messages sent beside it (answers, cancels, the session's end): req
	// itself belongs to the goroutine writing the call.
	hdr    fasthttp.RequestHeader
	modern *modernJob // set for tasks created on the 2026-07-28 wire

	pending    atomic.Int32 // relayed requests the client has not answered yet
	lastStatus time.Time    // last progress-driven statusMessage update (reader goroutine only)

	// settled is closed once the runner has nothing more to record: the
	// outcome is stored (or was dropped), or the call ended because the
	// task was cancelled or expired. A tasks/result of this process waits
	// on it (localSettled, localResult) before it reads the store.
	settled    chan struct{}
	settleOnce sync.Once
	// finalTask and finalOut are what Finish stored, when it succeeded; set
	// before settled is closed, read only after.
	finalTask *taskstore.Task
	finalOut  *taskstore.Outcome

	// queued is set once the runner queued a message of the task in the
	// store (a notification or a question for the client); until then a
	// tasks/result of this process needs no drain and no listening mark.
	queued atomic.Bool

	// ctx bounds the call: cancel (a tasks/cancel, the policy timeout, the
	// task's expiry) with the reason as its cause; shutdown reaches it
	// through the Handler's root context (cause errShutdown).
	ctx      context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time // the policy timeout or the task's expiry, whichever is first
	// deadlineCause is errTimeout or errExpired, the one deadline stands for.
	deadlineCause error

	mu sync.Mutex
	// supTimer starts the supervisor (superviseRun) once the call has run
	// for watchDelay or reached its deadline; most calls end before and
	// never need a goroutine, a subscription or a ticker.
	supTimer *time.Timer
	supDone  chan struct{} // closed when the supervisor returns; nil until it starts
	ended    bool          // the call returned: the supervisor is not started any more
	wake     chan struct{} // closed (and cleared) when a message is queued; made by waiters
}

// jobLog logs with the task's id and tool. It is built lazily per line,
// not as a child logger per job: most task lines are below the level in
// use, and a child logger costs an allocation and a copy per task.
type jobLog struct {
	l            *zerolog.Logger
	taskID, tool string
}

func (l jobLog) with(e *zerolog.Event) *zerolog.Event {
	return e.Str(logTaskID, l.taskID).Str(logTool, l.tool)
}
func (l jobLog) Debug() *zerolog.Event { return l.with(l.l.Debug()) }
func (l jobLog) Info() *zerolog.Event  { return l.with(l.l.Info()) }
func (l jobLog) Warn() *zerolog.Event  { return l.with(l.l.Warn()) }
func (l jobLog) Error() *zerolog.Event { return l.with(l.l.Error()) }

// newJob makes the job of a created task; start it with h.startJob(j).
// parent is the Handler's root context: its end (shutdown) ends the call.
func newJob(parent context.Context, log *zerolog.Logger, t *taskstore.Task, req *fasthttp.Request, st policy.Settings, session, upSession string) *job {
	j := &job{t: t, req: req, st: st, session: session, upSession: upSession, settled: make(chan struct{}),
		log: jobLog{l: log, taskID: t.ID, tool: t.Tool}}
	j.deadline, j.deadlineCause = t.CreatedAt.Add(st.Timeout), errTimeout
	if exp := t.ExpiresAt(); exp.Before(j.deadline) {
		j.deadline, j.deadlineCause = exp, errExpired
	}
	j.ctx, j.cancel = context.WithCancelCause(parent)
	return j
}

// noteQueued records that a message of the task was queued in the store
// and wakes the local tasks/result waiters.
func (j *job) noteQueued() {
	j.queued.Store(true)
	j.mu.Lock()
	if j.wake != nil {
		close(j.wake)
		j.wake = nil
	}
	j.mu.Unlock()
}

// changes returns a channel closed at the next noteQueued. Check queued
// after taking it, so no wake-up is lost.
func (j *job) changes() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.wake == nil {
		j.wake = make(chan struct{})
	}
	return j.wake
}

// startSupervision arms the timer that starts superviseRun.
func (h *Handler) startSupervision(j *job) {
	after := min(watchDelay, time.Until(j.deadline))
	j.mu.Lock()
	j.supTimer = time.AfterFunc(after, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.ended {
			return
		}
		j.supDone = make(chan struct{})
		go func() {
			defer close(j.supDone)
			h.superviseRun(j)
		}()
	})
	j.mu.Unlock()
}

// stopSupervision ends the call's context and waits for the supervisor, if
// it started.
func (j *job) stopSupervision() {
	j.mu.Lock()
	j.ended = true
	j.supTimer.Stop()
	done := j.supDone
	j.mu.Unlock()
	j.cancel(nil)
	if done != nil {
		<-done
	}
}

// startJob runs j on an idle runner goroutine, or on a new one. Runner
// goroutines are reused: a fresh goroutine grows its stack (copying it)
// on the way through the upstream call and the store, for every task.
func (h *Handler) startJob(j *job) {
	select {
	case h.runq <- j:
		return
	default:
	}
	h.wg.Add(1)
	h.runnersStarted.Add(1)
	go h.runner(j)
}

// runnerIdle is how long a runner goroutine waits for another job.
const runnerIdle = 10 * time.Second

// runner runs j, then further jobs handed to it by startJob until it has
// been idle for runnerIdle or the Handler closes.
func (h *Handler) runner(j *job) {
	defer h.wg.Done()
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		h.run(j)
		idle.Reset(runnerIdle)
		h.runnersIdle.Add(1)
		select {
		case j = <-h.runq:
			h.runnersIdle.Add(-1)
		case <-idle.C:
			h.runnersIdle.Add(-1)
			return
		case <-h.closing:
			h.runnersIdle.Add(-1)
			return
		}
	}
}

// settle closes j.settled (once).
func (j *job) settle() { j.settleOnce.Do(func() { close(j.settled) }) }

// Why a runner's call ended early (context.Cause of its context).
var (
	errCancelledByClient = errors.New("task cancelled by the client")
	errShutdown          = errors.New("taskgate shut down before the call finished")
	errTimeout           = errors.New("upstream call exceeded the policy timeout")
	errExpired           = errors.New("task ttl passed before the call finished")
)

// upstream outcome of one call.
type callResult struct {
	status taskstore.Status // Completed or Failed
	msg    string
	out    taskstore.Outcome
}

// run executes a task's upstream call and records its outcome. It is the
// only writer of the task's terminal state besides tasks/cancel and lease
// recovery; the store's scripts settle races (a late outcome after a cancel
// is dropped, T-59).
func (h *Handler) run(j *job) {
	t := j.t
	h.m.runningNow.Add(1)
	defer func() {
		j.settle()
		h.jobs.Delete(t.ID)
		h.m.runningNow.Add(-1)
		h.tools.release(t.Tool)
		h.endSessionTask(j)
		fasthttp.ReleaseRequest(j.req)
	}()

	ctx, cancel := j.ctx, j.cancel
	defer cancel(nil)

	j.req.Header.CopyTo(&j.hdr)
	h.startSupervision(j)

	var res callResult
	func() {
		defer func() {
			if p := recover(); p != nil {
				j.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("task runner panicked")
				res = callResult{status: taskstore.Failed, msg: "taskgate internal error while running the call", out: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}
			}
		}()
		callStart := time.Now()
		res = h.callUpstream(ctx, j)
		h.m.callDur.WithLabelValues(h.toolLabel(j.t.Tool)).Observe(time.Since(callStart).Seconds())
	}()
	cause := context.Cause(ctx)
	j.stopSupervision()

	switch {
	case errors.Is(cause, errCancelledByClient):
		j.settle() // the task is cancelled in the store already
		h.notifyCancelled(j, "cancelled by the client through tasks/cancel")
		j.log.Info().Msg("task call aborted after cancel")
		return
	case errors.Is(cause, errExpired):
		j.settle() // the task is gone from the store
		h.notifyCancelled(j, "task ttl passed")
		h.taskEvent("expired", j.t.Tool)
		j.log.Info().Msg("task expired while running; upstream call cancelled")
		return
	case errors.Is(cause, errTimeout):
		h.notifyCancelled(j, "taskgate policy timeout")
		res = callResult{status: taskstore.Failed, out: taskstore.Outcome{Kind: taskstore.OutcomeInternal},
			msg: fmt.Sprintf("upstream call exceeded the policy timeout of %s and was cancelled", j.st.Timeout)}
	case errors.Is(cause, errShutdown):
		h.notifyCancelled(j, "taskgate shutting down")
		res = callResult{status: taskstore.Failed, out: taskstore.Outcome{Kind: taskstore.OutcomeInternal},
			msg: "taskgate shut down before the upstream call finished; the call was cancelled"}
	}
	h.finish(j, res)
}

// superviseRun ends the call when the task is cancelled (through any
// replica: the store's wake-ups, with lease renewals as the fallback) or
// its deadline passes, and renews the lease meanwhile. It starts once the
// call has run for watchDelay (startSupervision): most calls end quickly,
// which saves a goroutine, a SUBSCRIBE/UNSUBSCRIBE pair and two timers per
// short task. The re-read after subscribing catches a cancel that came
// before. Shutdown ends j.ctx through the root context.
func (h *Handler) superviseRun(j *job) {
	t, ctx, cancel := j.t, j.ctx, j.cancel
	check := func(st taskstore.Status, err error) bool {
		switch {
		case errors.Is(err, taskstore.ErrNotFound):
			cancel(errExpired)
			return true
		case err == nil && st == taskstore.Cancelled:
			cancel(errCancelledByClient)
			return true
		}
		return false
	}
	left := time.Until(j.deadline)
	if left <= 0 {
		cancel(j.deadlineCause) // started at the deadline (a timeout below watchDelay)
		return
	}
	deadline := time.NewTimer(left)
	defer deadline.Stop()
	renew := time.NewTicker(leaseRenew(h.cfg.Lease))
	defer renew.Stop()
	reread := func() bool {
		sctx, c := context.WithTimeout(ctx, h.cfg.StoreTimeout)
		tt, err := h.store.Get(sctx, t.Owner, t.ID)
		c()
		var st taskstore.Status
		if tt != nil {
			st = tt.Status
		}
		return check(st, err)
	}
	var ch <-chan struct{}
	if ctx.Err() == nil {
		wctx, wcancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
		c, stop, err := h.store.WatchKinds(wctx, t.Owner, t.ID, taskstore.EventTerminal+taskstore.EventAnswer)
		wcancel()
		if err == nil { // else rely on lease renewals
			defer stop()
			ch = c
			h.deliverAnswers(ctx, j, true)
			if reread() {
				return
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			cancel(j.deadlineCause)
			return
		case <-ch:
			h.deliverAnswers(ctx, j, true)
			if reread() {
				return
			}
		case <-renew.C:
			h.deliverAnswers(ctx, j, true) // in case a wake-up was missed
			sctx, c := context.WithTimeout(ctx, h.cfg.StoreTimeout)
			st, err := h.store.Renew(sctx, t.Owner, t.ID, leaseTTL(h.cfg.Lease))
			c()
			if check(st, err) {
				return
			}
		}
	}
}

// watchDelay is how long a call runs before its supervisor starts and
// subscribes to the task's events (cancels and client answers).
const watchDelay = 250 * time.Millisecond

// finish records the outcome. While the store is unreachable (a Redis
// restart) it retries with backoff until the task would have expired or
// finishRetryFor passed, so an outcome survives a short outage.
func (h *Handler) finish(j *job, res callResult) {
	var err error
	deadline := time.Now().Add(finishRetryFor)
	if exp := j.t.ExpiresAt(); exp.Before(deadline) {
		deadline = exp
	}
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.StoreTimeout)
		var ft *taskstore.Task
		ft, err = h.store.Finish(ctx, j.t.Owner, j.t.ID, res.status, res.msg, res.out)
		cancel()
		if err == nil {
			j.finalTask, j.finalOut = ft, &res.out
		}
		if h.root.Err() != nil && deadline.After(time.Now().Add(h.cfg.StoreTimeout)) {
			deadline = time.Now().Add(h.cfg.StoreTimeout) // shutting down: do not hold it up
		}
		if !errors.Is(err, taskstore.ErrUnavailable) || time.Now().Add(backoff).After(deadline) {
			break
		}
		j.log.Warn().Err(err).Dur("retry_in", backoff).Msg("task store unavailable; retrying to record the outcome")
		time.Sleep(backoff) // backoff between store retries, not synchronisation
	}
	switch {
	case err == nil:
		h.taskEvent(string(res.status), j.t.Tool)
		h.m.taskDur.WithLabelValues(h.toolLabel(j.t.Tool), string(res.status)).Observe(time.Since(j.t.CreatedAt).Seconds())
		j.log.Info().Str("status", string(res.status)).Str("status_message", res.msg).Msg("task finished")
	case errors.Is(err, taskstore.ErrTerminal):
		h.taskEvent("dropped", j.t.Tool)
		j.log.Info().Msg("late upstream outcome dropped: task already terminal")
	case errors.Is(err, taskstore.ErrNotFound):
		h.taskEvent("dropped", j.t.Tool)
		j.log.Info().Msg("upstream outcome dropped: task expired")
	default:
		j.log.Error().Err(err).Msg("recording the task outcome failed; lease recovery will fail the task")
	}
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
	x, err := h.up.RoundTrip(ctx, j.req)
	if err != nil {
		return transportFailure(ctx, err)
	}
	defer x.Done()
	return h.readAnswer(ctx, j, x)
}

func transportFailure(ctx context.Context, err error) callResult {
	if ctx.Err() != nil {
		return callResult{} // the cause decides
	}
	return callResult{status: taskstore.Failed, msg: upstream.FailureMessage(err),
		out: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}
}

func internalFailure(format string, args ...any) callResult {
	return callResult{status: taskstore.Failed, msg: fmt.Sprintf(format, args...),
		out: taskstore.Outcome{Kind: taskstore.OutcomeInternal}}
}

// readAnswer reads a JSON or SSE answer to the task's request.
func (h *Handler) readAnswer(ctx context.Context, j *job, x *upstream.Call) callResult {
	resp := x.Resp
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
	x.SetReusable(err == nil)
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
func (h *Handler) readSSEAnswer(ctx context.Context, j *job, cur *upstream.Call, body io.Reader) callResult {
	var lastID string
	retry := time.Second
	for resumes := 0; ; resumes++ {
		r := sse.NewReaderSize(body, upstream.BackgroundReadBuf, h.cfg.MaxResultSize) // the background variant: a line buffer of the call's read buffer size
		for {
			ev, err := r.Next()
			if ev != nil && err == nil {
				if ev.HasID {
					lastID = string(ev.ID)
				}
				if ev.Retry >= 0 {
					retry = time.Duration(ev.Retry) * time.Millisecond
				}
				if len(ev.Data) > 0 {
					if res, final := h.onUpstreamMessage(ctx, j, ev.Data); final {
						cur.DrainEnd(body)
						return res
					}
				}
				continue
			}
			if errors.Is(err, sse.ErrEventTooLarge) {
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
		defer next.Done()
		cur, body = next, next.Resp.BodyStream()
	}
}

// finishRetryFor bounds how long a runner keeps trying to record an outcome.
const finishRetryFor = 2 * time.Minute

// maxResumes bounds reconnects of one call's upstream stream.
const maxResumes = 10

// resume reopens the call's stream: GET with Last-Event-ID (H-12).
func (h *Handler) resume(ctx context.Context, j *job, lastID string) (*upstream.Call, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	j.req.Header.CopyTo(&req.Header)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.Del(fasthttp.HeaderContentType)
	req.Header.Del(fasthttp.HeaderContentLength) // the POST's length would make the upstream wait for a body
	req.Header.Set(fasthttp.HeaderAccept, "text/event-stream")
	req.Header.Set(headerLastEventID, lastID)
	x, err := h.up.RoundTrip(ctx, req)
	if err != nil {
		return nil, err
	}
	if x.Resp.StatusCode() != fasthttp.StatusOK || !isEventStream(x.Resp.Header.ContentType()) {
		code := x.Resp.StatusCode()
		x.Done()
		return nil, fmt.Errorf("upstream answered the resume with HTTP %d", code)
	}
	return x, nil
}

// onUpstreamMessage handles one message of the call's stream; final is
// true when msg is the call's response.
func (h *Handler) onUpstreamMessage(ctx context.Context, j *job, msg []byte) (callResult, bool) {
	env, err := parseEnvelope(msg)
	if err != nil || env.kind == jsonx.KindBatch {
		j.log.Warn().Err(err).Msg("ignoring a malformed message on the upstream stream")
		return callResult{}, false
	}
	switch {
	case env.isResponse():
		return classify(append([]byte(nil), msg...)), true
	case env.method == methodPing && env.isRequest():
		// Answered here: a ping is no reason for input_required (E-36).
		h.postUpstream(j, appendResultResponse(nil, env.id, []byte("{}")))
	case env.isRequest():
		h.relayRequest(ctx, j, &env, append([]byte(nil), msg...))
	case env.kind == jsonx.KindNotification:
		h.relayNotification(ctx, j, &env, append([]byte(nil), msg...))
	}
	return callResult{}, false
}

// classify maps the upstream's final message to a status on the
// 2025-11-25 wire: a JSON-RPC error or a result with isError:true is
// failed (T-24, Q-03), anything else completed. The outcome itself is kept
// raw, so the other wire can render it its own way.
func classify(msg []byte) callResult {
	vals, err := jsonx.Members(msg, "result", "error")
	if err != nil {
		return internalFailure("upstream answered with a malformed JSON-RPC message")
	}
	if e := vals[1]; e != nil {
		code, text := "", ""
		if ev, err := jsonx.Members(e, "code", "message"); err == nil {
			code = string(ev[0])
			text, _ = jsonx.UnquoteValue(ev[1])
		}
		return callResult{status: taskstore.Failed, msg: truncate("upstream returned JSON-RPC error "+code+": "+text, 300),
			out: taskstore.Outcome{Kind: taskstore.OutcomeError, Raw: e}}
	}
	res := vals[0]
	if res == nil || res[0] != '{' {
		return internalFailure("upstream answered without a result object")
	}
	out := taskstore.Outcome{Kind: taskstore.OutcomeResult, Raw: res}
	rv, err := jsonx.Members(res, "isError", "content")
	if err == nil && string(rv[0]) == "true" {
		return callResult{status: taskstore.Failed, msg: truncate("tool reported an error: "+firstText(rv[1]), 300), out: out}
	}
	return callResult{status: taskstore.Completed, out: out}
}

// firstText returns the text of the first text content item.
func firstText(content []byte) string {
	if len(content) == 0 || content[0] != '[' {
		return ""
	}
	s := jsonx.Scanner{B: content, I: 1}
	s.Space()
	if s.I >= len(content) || content[s.I] != '{' {
		return ""
	}
	item, err := s.Value()
	if err != nil {
		return ""
	}
	vals, err := jsonx.Members(item, "type", "text")
	if err != nil || string(vals[0]) != `"text"` {
		return ""
	}
	text, _ := jsonx.UnquoteValue(vals[1])
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
	status, err := h.up.Post(&j.hdr, body, 10*time.Second)
	if err != nil || status >= 300 {
		j.log.Warn().Err(err).Int(logStatus, status).Msg("message to the upstream not accepted")
	}
}

// notifyCancelled tells the upstream to stop the call (P-06, E-26).
func (h *Handler) notifyCancelled(j *job, reason string) {
	if j.modern != nil && j.modern.era == era2026 {
		return // a 2026 upstream learns it from the closed request stream
	}
	body := make([]byte, 0, 160)
	body = append(body, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`...)
	body = append(body, j.t.UpstreamID...)
	body = append(body, `,"reason":`...)
	body = appendJSONString(body, reason)
	body = append(body, "}}"...)
	h.postUpstream(j, body)
}
