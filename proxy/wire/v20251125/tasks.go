package v20251125

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/sysconn"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// MetaRelatedTask is the _meta key that ties a message to its task (T-40, T-42).
const MetaRelatedTask = "io.modelcontextprotocol/related-task"

// toolsCall enforces the tool policy on tools/call and turns task-augmented
// calls into tasks; plain calls of allowed tools pass through.
func (w *Wire) toolsCall(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) {
	if env.ID == nil || !tasksActive(&rc.Request.Header) {
		if env.ID != nil && len(rc.Request.Header.Peek(wire.HeaderProtocolVersion)) == 0 {
			w.noVersionTaskCall(rc, info, env)
		}
		w.Pass(rc, info, env.ID)
		return
	}
	if env.Params == nil {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: tools/call needs params"))
		return
	}
	vals, err := jsonx.Members(env.Params, "name", "task")
	if err != nil {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: invalid tools/call params: "+err.Error()))
		return
	}
	name, ok := jsonx.UnquoteValue(vals[0])
	if !ok {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: tools/call params.name must be a string"))
		return
	}
	st := w.Policy().For(name)
	task := vals[1]
	if task == nil || string(task) == "null" {
		if st.TaskSupport == policy.Required {
			// T-10, E-09: the upstream is not contacted.
			wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeMethodNotFound,
				fmt.Sprintf("taskgate: tool %q must be called as a task (taskSupport: required); add params.task", name)))
			return
		}
		w.Pass(rc, info, env.ID)
		return
	}
	if task[0] != '{' {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: tools/call params.task must be an object"))
		return
	}
	if st.TaskSupport == policy.Forbidden {
		// T-08, E-08: the upstream is not contacted.
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeMethodNotFound,
			fmt.Sprintf("taskgate: tool %q cannot be called as a task (taskSupport: forbidden); call it without params.task", name)))
		return
	}
	w.createTask(rc, info, env, name, st, task)
}

// noVersionTaskCall handles a task-augmented tools/call without the
// MCP-Protocol-Version header. Such a request is at 2025-03-26, which has
// no tasks, so it is served as a plain call: the upstream runs it and the
// client gets its result in the answer (a valid answer to a task request
// the receiver does not serve as a task). Since the client evidently
// wanted a task, taskgate says why it did not make one: a warning once per
// session (or per owner without one), and the outcome
// "task_without_version" on taskgate_requests_total.
func (w *Wire) noVersionTaskCall(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) {
	if env.Params == nil {
		return
	}
	vals, err := jsonx.Members(env.Params, "task")
	if err != nil || vals[0] == nil || string(vals[0]) == "null" {
		return
	}
	info.Outcome = "task_without_version"
	key := rc.Request.Header.Peek(wire.HeaderSessionID)
	if len(key) == 0 {
		key = rc.Request.Header.Peek(fasthttp.HeaderAuthorization)
	}
	id := w.HashShort(key)
	if !w.warnedOnce(id) {
		return
	}
	w.LogOf(info).Warn().Str(wire.LogSession, id).
		Msg("task-augmented tools/call without the MCP-Protocol-Version header: served as a plain call, no task " +
			"(a request without the header is at 2025-03-26, which has no tasks); the client must send MCP-Protocol-Version: 2025-11-25")
}

// maxWarned bounds the sessions remembered by warnedOnce; beyond it the
// memory is cleared and warnings may repeat.
const maxWarned = 4096

// warnedOnce reports whether key is seen for the first time.
func (w *Wire) warnedOnce(key string) bool {
	w.warnedMu.Lock()
	defer w.warnedMu.Unlock()
	if w.warned == nil || len(w.warned) >= maxWarned {
		w.warned = make(map[string]struct{})
	}
	if _, ok := w.warned[key]; ok {
		return false
	}
	w.warned[key] = struct{}{}
	return true
}

// createTask stores a new working task, starts its runner and answers with
// CreateTaskResult without waiting for the upstream (T-14, E-07).
func (w *Wire) createTask(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, tool string, st policy.Settings, task []byte) {
	if w.Eng.Closed() {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInternalError, wire.MsgShuttingDown))
		return
	}
	owner, _ := w.Owner(&rc.Request.Header)
	tv, err := jsonx.Members(task, "ttl")
	if err != nil {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: invalid params.task: "+err.Error()))
		return
	}
	params, err := jsonx.DeleteMember(env.Params, "task")
	if err != nil {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: invalid tools/call params: "+err.Error()))
		return
	}
	if !w.AllowTaskOp(rc, info, env.ID, owner) {
		return
	}
	id, upNonce, ok := w.ReserveTaskCall(rc, info, env, tool, st)
	if !ok {
		return
	}
	// The task's messages go to any stream of its owner (package proxy's sessions.go); the
	// call runs on the client's upstream session, which the client's
	// DELETE then ends only after the call.
	group := wire.StreamGroup(owner)
	upSess := w.SessionKey(rc.Request.Header.Peek(wire.HeaderSessionID))
	now := time.Now().UTC().Truncate(time.Millisecond)
	t := &taskstore.Task{
		ID:           id,
		Owner:        owner,
		Status:       taskstore.Working,
		CreatedAt:    now,
		UpdatedAt:    now,
		TTL:          st.TTL(tv[0]),
		PollInterval: st.PollInterval,
		Tool:         tool,
		UpstreamID:   `"` + wire.UpstreamIDPrefix + upNonce + `"`,
		Runner:       w.Config.ProcessID,
		Session:      group,
		Era:          "2025-11-25",
	}
	info.TaskID = id

	// The upstream request: the client's, minus params.task (P-03), under
	// an id the client cannot collide with (P-07), same headers.
	w.PrepareUpstream(rc, &rc.Request)
	req := fasthttp.AcquireRequest()
	rc.Request.Header.CopyTo(&req.Header)
	body := make([]byte, 0, len(params)+len(t.UpstreamID)+64)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = append(body, t.UpstreamID...)
	body = append(body, `,"method":"tools/call","params":`...)
	body = append(body, params...)
	body = append(body, '}')
	req.SetBody(body)

	j := &wire.Job{Req: req, Call: call{w}}
	if !w.StoreTask(rc, info, env, j, t, st, group, upSess, nil) {
		return
	}
	w.LogOf(info).Info().Str(wire.LogTaskID, id).Str(wire.LogOwner, owner).Str(wire.LogTool, tool).
		Dur("ttl", t.TTL).Msg("task created")
	w.Eng.Start(&j.Job)

	res := make([]byte, 0, 256)
	res = append(res, `{"task":`...)
	res = appendTaskPolled(res, t, w.Eng.ReportedPollInterval(t))
	res = append(res, '}')
	wire.RPCResult(rc, env.ID, res)
}

// tasksMethod serves tasks/get, tasks/result, tasks/list and tasks/cancel
// from the store; they never reach the upstream (P-03).
func (w *Wire) tasksMethod(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope) {
	owner, identified := w.Owner(&rc.Request.Header)
	if !w.AllowTaskOp(rc, info, env.ID, owner) {
		return
	}
	if env.Method == wire.MethodTasksList {
		w.tasksList(rc, info, env, owner, identified)
		return
	}
	var taskID string
	if env.Params != nil {
		vals, err := jsonx.Members(env.Params, "taskId")
		if err != nil {
			wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: invalid params: "+err.Error()))
			return
		}
		taskID, _ = jsonx.UnquoteValue(vals[0])
	}
	if taskID == "" {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: params.taskId must be a non-empty string"))
		return
	}
	info.TaskID = taskID
	ctx := w.CtxOf(info)
	switch env.Method {
	case wire.MethodTasksGet:
		t, err := w.Eng.Get(ctx, owner, taskID)
		if err != nil {
			w.StoreError(rc, info, env.ID, err)
			return
		}
		wire.RPCResult(rc, env.ID, appendTaskPolled(make([]byte, 0, 256), t, w.Eng.ReportedPollInterval(t)))
	case wire.MethodTasksCancel:
		t, err := w.Eng.Cancel(ctx, owner, taskID, "cancelled by the client", true)
		if errors.Is(err, taskstore.ErrTerminal) {
			// T-57, E-27.
			wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: task already finished; it cannot be cancelled"))
			return
		}
		if err != nil {
			w.StoreError(rc, info, env.ID, err)
			return
		}
		wire.RPCResult(rc, env.ID, appendTask(make([]byte, 0, 256), t))
	case wire.MethodTasksResult:
		if j := w.LocalJob(owner, taskID); j != nil {
			// The call runs in this process and the task is not terminal
			// yet: wait for the runner, no store read first.
			w.localResult(rc, info, append([]byte(nil), env.ID...), j)
			return
		}
		t, out, err := w.Eng.Outcome(ctx, owner, taskID)
		if err != nil {
			w.StoreError(rc, info, env.ID, err)
			return
		}
		if t.Status.Terminal() && w.sessionless.Load() && len(rc.Request.Header.Peek(wire.HeaderSessionID)) == 0 &&
			acceptsSSE(&rc.Request.Header) {
			// In front of a session-less upstream a client may have had
			// no GET stream to take the task's messages as they came:
			// those still queued go out on this answer's stream before
			// the result. (Elsewhere a finished task's answer stays one
			// JSON read, without a drain.)
			w.streamResult(rc, info, append([]byte(nil), env.ID...), owner, taskID)
			return
		}
		if t.Status.Terminal() {
			w.writeOutcome(rc, env.ID, t, out)
			info.Outcome = answerOutcome(t, out)
			return
		}
		w.awaitResult(rc, info, append([]byte(nil), env.ID...), owner, taskID, acceptsSSE(&rc.Request.Header))
	}
}

func (w *Wire) tasksList(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, owner string, identified bool) {
	if !identified {
		// T-76, E-06: without an identity tasks.list is not advertised.
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeMethodNotFound,
			"taskgate: tasks/list needs an Authorization header or a session"))
		return
	}
	var cursor string
	if env.Params != nil {
		vals, err := jsonx.Members(env.Params, "cursor")
		if err != nil {
			wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: invalid params: "+err.Error()))
			return
		}
		if vals[0] != nil {
			var ok bool
			if cursor, ok = jsonx.UnquoteValue(vals[0]); !ok {
				wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: params.cursor must be a string"))
				return
			}
		}
	}
	tasks, next, err := w.Eng.List(w.Root, owner, cursor)
	if errors.Is(err, taskstore.ErrBadCursor) {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: invalid cursor")) // T-56
		return
	}
	if err != nil {
		w.StoreError(rc, info, env.ID, err)
		return
	}
	res := make([]byte, 0, 64+200*len(tasks))
	res = append(res, `{"tasks":[`...)
	for i := range tasks {
		if i > 0 {
			res = append(res, ',')
		}
		res = appendTask(res, &tasks[i])
	}
	res = append(res, ']')
	if next != "" {
		res = append(res, `,"nextCursor":`...)
		res = wire.AppendJSONString(res, next)
	}
	res = append(res, '}')
	wire.RPCResult(rc, env.ID, res)
}

// appendTask appends the wire form of t (the flat Task of the schema); a
// running task reports the pollInterval of a poll answered at once
// (engine.PollInterval).
func appendTask(dst []byte, t *taskstore.Task) []byte {
	return appendTaskPolled(dst, t, engine.PollInterval(t, time.Now(), false, false))
}

// appendTaskPolled is appendTask reporting poll as pollInterval: what
// tasks/get and the CreateTaskResult tell the owner
// (Engine.ReportedPollInterval: shorter where this process holds the
// task's polls, longer for owners whose rate-limit budget runs low).
func appendTaskPolled(dst []byte, t *taskstore.Task, poll time.Duration) []byte {
	dst = append(dst, `{"taskId":`...)
	dst = wire.AppendJSONString(dst, t.ID)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, t.Status...)
	dst = append(dst, '"')
	if t.StatusMessage != "" {
		dst = append(dst, `,"statusMessage":`...)
		dst = wire.AppendJSONString(dst, t.StatusMessage)
	}
	dst = append(dst, `,"createdAt":"`...)
	dst = t.CreatedAt.UTC().AppendFormat(dst, timeFormat)
	dst = append(dst, `","lastUpdatedAt":"`...)
	dst = t.UpdatedAt.UTC().AppendFormat(dst, timeFormat)
	dst = append(dst, `","ttl":`...)
	dst = strconv.AppendInt(dst, t.TTL.Milliseconds(), 10)
	if t.PollInterval > 0 {
		dst = append(dst, `,"pollInterval":`...)
		dst = strconv.AppendInt(dst, poll.Milliseconds(), 10)
	}
	return append(dst, '}')
}

// timeFormat is RFC 3339 in UTC with milliseconds (T-26, T-27).
const timeFormat = "2006-01-02T15:04:05.000Z"

// appendOutcome appends the tasks/result answer for a terminal task:
// the upstream result with related-task _meta (T-36..T-40), the upstream
// error verbatim (T-38, Q-02), or -32603 for cancelled tasks and
// calls that produced no upstream answer.
// answerOutcome is the request outcome of a tasks/result answered with
// appendOutcome: "rpc_error" when the answer is a JSON-RPC error, "" (ok)
// when it is a result.
func answerOutcome(t *taskstore.Task, out *taskstore.Outcome) string {
	if t.Status == taskstore.Cancelled || out == nil || out.Kind != taskstore.OutcomeResult {
		return "rpc_error"
	}
	return ""
}

func appendOutcome(dst, id []byte, t *taskstore.Task, out *taskstore.Outcome) []byte {
	if n := outcomeSize(id, t, out); out != nil && cap(dst)-len(dst) < n {
		// One allocation, also for megabytes (slices.Grow makes two
		// under the race detector).
		dst = append(make([]byte, 0, len(dst)+n), dst...)
	}
	switch {
	case t.Status == taskstore.Cancelled:
		return wire.AppendError(dst, id, wire.CodeInternalError, "taskgate: task was cancelled; it has no result")
	case out != nil && out.Kind == taskstore.OutcomeResult:
		if b, err := appendRelatedResult(dst, id, out.Raw, t.ID); err == nil {
			return b
		}
		return wire.AppendError(dst, id, wire.CodeInternalError, "taskgate: stored result is malformed")
	case out != nil && out.Kind == taskstore.OutcomeError:
		return wire.AppendRawError(dst, id, out.Raw)
	}
	msg := t.StatusMessage
	if msg == "" {
		msg = "task failed without an upstream answer"
	}
	return wire.AppendError(dst, id, wire.CodeInternalError, "taskgate: "+msg)
}

// outcomeSize bounds the length of appendOutcome's answer for a task
// with an outcome.
func outcomeSize(id []byte, t *taskstore.Task, out *taskstore.Outcome) int {
	if out == nil {
		return 0
	}
	return len(out.Raw) + len(id) + len(t.ID) + len(t.StatusMessage) + 160
}

// appendRelatedResult appends the success response carrying result with
// _meta[related-task] = {taskId} (T-40). A result without _meta of its own
// (nearly all, and the large ones) is rendered around the stored bytes:
// one scan and one copy, where parsing and re-emitting the result would
// copy it twice more. One with _meta is merged as withRelatedTask does.
func appendRelatedResult(dst, id, result []byte, taskID string) ([]byte, error) {
	vals, err := jsonx.Members(result, "_meta")
	if err != nil {
		return dst, err
	}
	body := bytes.TrimRight(result, " \t\r\n")
	if vals[0] != nil || len(body) == 0 || body[len(body)-1] != '}' {
		res, err := withRelatedTask(result, taskID)
		if err != nil {
			return dst, err
		}
		return wire.AppendResult(dst, id, res), nil
	}
	// Members found an object: the member goes before its closing brace,
	// after a comma unless it has no members.
	body = bytes.TrimRight(body[:len(body)-1], " \t\r\n")
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, body...)
	if body[len(body)-1] != '{' {
		dst = append(dst, ',')
	}
	dst = append(dst, `"_meta":{"`+MetaRelatedTask+`":{"taskId":`...)
	dst = wire.AppendJSONString(dst, taskID)
	return append(dst, "}}}}"...), nil
}

// withRelatedTask returns result with _meta[related-task] = {taskId}.
func withRelatedTask(result []byte, taskID string) ([]byte, error) {
	meta := []byte("{}")
	vals, err := jsonx.Members(result, "_meta")
	if err != nil {
		return nil, err
	}
	if vals[0] != nil && vals[0][0] == '{' {
		meta = vals[0]
	}
	rel := make([]byte, 0, len(taskID)+14)
	rel = append(rel, `{"taskId":`...)
	rel = wire.AppendJSONString(rel, taskID)
	rel = append(rel, '}')
	if meta, err = jsonx.SetMember(meta, MetaRelatedTask, rel); err != nil {
		return nil, err
	}
	return jsonx.SetMember(result, "_meta", meta)
}

func (w *Wire) writeOutcome(rc *fasthttp.RequestCtx, id []byte, t *taskstore.Task, out *taskstore.Outcome) {
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("application/json")
	// The answer is this call's own buffer, never written again: the
	// response takes it as it is rather than copy it (megabytes, for a
	// large result).
	rc.Response.SetBodyRaw(appendOutcome(nil, id, t, out))
}

func acceptsSSE(hdr *fasthttp.RequestHeader) bool {
	return bytes.Contains(hdr.Peek(fasthttp.HeaderAccept), []byte("text/event-stream"))
}

// acceptsJSON reports whether a JSON answer suits the client: it asked for
// application/json (or anything), or gave no Accept header.
func acceptsJSON(hdr *fasthttp.RequestHeader) bool {
	a := hdr.Peek(fasthttp.HeaderAccept)
	return len(a) == 0 || bytes.Contains(a, []byte("application/json")) ||
		bytes.Contains(a, []byte("*/*")) || bytes.Contains(a, []byte("application/*"))
}

// awaitResult blocks a tasks/result until the task is terminal (T-37). With
// SSE it answers at once with a priming event and keep-alive comments, so
// idle timeouts of proxies on the way do not cut the wait; the final answer
// is the last event, after which the stream ends. The event ids let a
// client resume a cut stream with GET + Last-Event-ID (E-25). A client
// that accepts only JSON gets the answer when it is ready.
func (w *Wire) awaitResult(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, owner, taskID string, sse bool) {
	if !sse {
		w.awaitJSONResult(rc, info, id, owner, taskID, nil)
		return
	}
	w.streamResult(rc, info, id, owner, taskID)
}

// awaitJSONResult is awaitResult for a client that reads JSON: one answer
// once the task is terminal. j, when not nil, is the task's call running
// in this process, waited for through its runner.
func (w *Wire) awaitJSONResult(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, owner, taskID string, j *wire.Job) {
	// A client that leaves ends the wait at once; a shutdown only once
	// this process's calls have recorded their outcomes (WaitRoot).
	ctx, cancel := context.WithCancel(w.WaitCtxOf(info))
	var left atomic.Bool
	unwatch := sysconn.WatchClose(rc.Conn(), func() { left.Store(true); cancel() })
	w.Waiters.Inc()
	var t *taskstore.Task
	var out *taskstore.Outcome
	var err error
	ok := false
	if j != nil {
		t, out, ok, err = w.Eng.AwaitSettled(ctx, &j.Job)
	}
	if !ok {
		t, out, err = w.Eng.WaitTerminal(ctx, owner, taskID, nil, nil)
	}
	w.Waiters.Dec()
	unwatch()
	cancel()
	if left.Load() {
		info.Outcome = wire.OutcomeClientGone
		rc.SetConnectionClose()
		return
	}
	if err != nil {
		w.StoreError(rc, info, id, err)
		return
	}
	info.Outcome = answerOutcome(t, out)
	w.writeOutcome(rc, id, t, out)
}

// localResult answers a tasks/result for a call that runs in this process
// from the runner's memory: it waits for the runner to settle the task and
// answers with the outcome the runner stored, in one write, without
// reading the store. Only when the runner queued messages for the task
// (the client must get them on this stream, before the result) or the
// wait outlasts a keep-alive interval for a client that accepts SSE does
// the answer become a stream: for a task that never queued a message it
// then carries keep-alive comments and the result, still without store
// round trips; once one is queued, the stream drains the task's queue
// through the store as for a remote runner (streamResult).
func (w *Wire) localResult(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, j *wire.Job) {
	owner, taskID := j.Task.Owner, j.Task.ID
	hdr := &rc.Request.Header
	if !acceptsSSE(hdr) {
		w.awaitJSONResult(rc, info, id, owner, taskID, j) // waits through the runner (engine.AwaitSettled)
		return
	}
	if !j.Queued() {
		// A client that leaves ends the wait at once; a shutdown only
		// once this call has recorded its outcome (WaitRoot).
		ctx, cancel := context.WithCancel(w.WaitCtxOf(info))
		var left atomic.Bool
		unwatch := sysconn.WatchClose(rc.Conn(), func() { left.Store(true); cancel() })
		stream := time.NewTimer(w.Config.KeepAlive)
		w.Waiters.Inc()
		t, out, settled, err := w.Eng.AwaitLocal(ctx, &j.Job, stream.C)
		w.Waiters.Dec()
		stream.Stop()
		unwatch()
		cancel()
		switch {
		case left.Load():
			info.Outcome = wire.OutcomeClientGone
			rc.SetConnectionClose()
			return
		case err != nil:
			w.StoreError(rc, info, id, err)
			return
		case settled:
			info.Outcome = answerOutcome(t, out)
		}
		switch {
		case settled && acceptsJSON(hdr):
			w.writeOutcome(rc, id, t, out)
			return
		case settled:
			// An SSE-only client: the result is the stream's one event.
			wire.SSEHeader(rc, false)
			rc.SetBody(sse.Append(nil, resultEventID(taskID, id), appendOutcome(nil, id, t, out)))
			return
		}
	}
	w.streamLocalResult(rc, info, id, j)
}

// streamLocalResult is streamResult for a call that runs in this process:
// keep-alive comments and the result from the runner's memory while the
// task has no queued message, then (once one is queued) the store's wait
// with the queue drained onto the stream.
func (w *Wire) streamLocalResult(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, j *wire.Job) {
	owner, taskID := j.Task.Owner, j.Task.ID
	w.startResultStream(rc, info, id, taskID, func(ctx context.Context, bw *bufio.Writer, evID string, left *atomic.Bool) string {
		keep := time.NewTicker(w.Config.KeepAlive)
		defer keep.Stop()
		for !j.Queued() {
			t, out, settled, err := w.Eng.AwaitLocal(ctx, &j.Job, keep.C)
			switch {
			case err != nil:
				_, _ = bw.Write(sse.Append(nil, evID, resultError(id, err)))
				_ = bw.Flush()
				if errors.Is(err, taskstore.ErrNotFound) {
					return "rpc_error"
				}
				return "store_unavailable"
			case settled:
				_ = sse.Write(bw, evID, appendOutcome(nil, id, t, out))
				_ = bw.Flush()
				return answerOutcome(t, out)
			case left.Load():
				return wire.OutcomeClientGone
			case ctx.Err() != nil:
				return "shutdown" // the client resumes on another replica
			case j.Queued():
			default:
				if _, err := bw.WriteString(": keep-alive\n\n"); err != nil || bw.Flush() != nil {
					return wire.OutcomeClientGone
				}
			}
		}
		return w.resultStreamBody(ctx, bw, evID, id, owner, taskID, left)
	})
}

// resultError is the final answer of a tasks/result stream whose wait
// failed with err.
func resultError(id []byte, err error) []byte {
	if errors.Is(err, taskstore.ErrNotFound) {
		return wire.AppendError(nil, id, wire.CodeInvalidParams, wire.MsgTaskNotFound)
	}
	return wire.AppendError(nil, id, wire.CodeInternalError, wire.MsgStoreUnavailable)
}

// resumeResult serves GET + Last-Event-ID of a cut tasks/result stream
// (E-25): the answer is a new stream that ends with the result, delivered
// with the original request id. The owner check is the store lookup.
func (w *Wire) resumeResult(rc *fasthttp.RequestCtx, info *wire.Info, taskID string, rpcID []byte) {
	owner, _ := w.Owner(&rc.Request.Header)
	_, err := w.Eng.Task(w.Root, owner, taskID)
	if err != nil {
		status := fasthttp.StatusNotFound
		if !errors.Is(err, taskstore.ErrNotFound) {
			status = fasthttp.StatusServiceUnavailable
		}
		info.Outcome = "resume_refused"
		wire.HTTPError(rc, status, nil, wire.CodeInvalidParams, wire.MsgTaskNotFound)
		return
	}
	w.streamResult(rc, info, rpcID, owner, taskID)
}

// streamResult answers with an SSE stream that ends with the task's result.
func (w *Wire) streamResult(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, owner, taskID string) {
	w.startResultStream(rc, info, id, taskID, func(ctx context.Context, bw *bufio.Writer, evID string, left *atomic.Bool) string {
		return w.resultStreamBody(ctx, bw, evID, id, owner, taskID, left)
	})
}

// startResultStream starts a tasks/result SSE answer: its priming event
// (H-07: an id and empty data; retry tells the client how soon to resume
// when the connection drops), then body, which writes the rest and returns
// the request's outcome. A client that leaves ends body's ctx at once (and
// sets left), and with it the stream's claim to deliver the task's
// messages (SetListening).
func (w *Wire) startResultStream(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, taskID string,
	body func(ctx context.Context, bw *bufio.Writer, evID string, left *atomic.Bool) string) {
	wire.SSEHeader(rc, true)
	evID := resultEventID(taskID, id)
	// The stream writer below runs after the handler has returned, when rc,
	// its Request, Response and headers are fasthttp's: it never touches
	// them. It and body use copies only (evID, and the id, owner and taskID
	// that body captured, which callers copy out of the request), se, and
	// conn, only to see the client leave, until the writer returns; w is
	// valid until then too.
	conn := rc.Conn()
	parent := w.WaitCtxOf(info) // WaitRoot with the request's trace span, when traced
	se := w.BeginStream(info)
	w.Eng.Enter()
	// The bounded stream (as SetBodyStreamWriter, the writer runs at once
	// in a goroutine of its own) hands the server blocks of up to 32 KiB:
	// a result of megabytes goes out in chunks of that size, where
	// SetBodyStreamWriter's pipe is read and written, and flushed, 4 KiB at
	// a time (2048 writes for 8 MiB).
	rc.Response.SetBodyStream(fasthttp.NewBoundedStreamReader(func(bw *bufio.Writer) {
		defer w.Eng.Leave()
		w.Waiters.Inc()
		defer w.Waiters.Dec()
		outcome := ""
		defer func() { se.End(outcome) }()
		var left atomic.Bool
		// WaitRoot: on shutdown the wait goes on until this process's
		// calls have recorded their outcomes, so it ends with one.
		ctx, cancel := context.WithCancel(parent)
		defer cancel()
		defer sysconn.WatchClose(conn, func() { left.Store(true); cancel() })()
		fmt.Fprintf(bw, "id: %s\nretry: %d\ndata: \n\n", evID, resumeRetryMs)
		if bw.Flush() != nil {
			return
		}
		outcome = body(ctx, bw, evID, &left)
	}), -1)
}

// resultStreamBody waits through the store for the task's end, marked as
// its listener, delivering its queued messages as they come, and ends the
// stream with the result. It returns the request's outcome.
func (w *Wire) resultStreamBody(ctx context.Context, bw *bufio.Writer, evID string, id []byte, owner, taskID string, left *atomic.Bool) string {
	w.Eng.Mail.Listen(owner, taskID, listeningTTLKeepAlive*w.Config.KeepAlive)
	defer w.Eng.Mail.Listen(owner, taskID, 0)
	keep := func() bool {
		w.Eng.Mail.Listen(owner, taskID, listeningTTLKeepAlive*w.Config.KeepAlive)
		_, err := bw.WriteString(": keep-alive\n\n")
		return err == nil && bw.Flush() == nil
	}
	n := 0
	var open []openQuestion
	deliver := func(msgs []taskstore.Message) int {
		for i, m := range msgs {
			n++
			if _, err := bw.Write(sse.Append(nil, evID+"."+strconv.Itoa(n), m.Data)); err != nil || bw.Flush() != nil {
				return i
			}
			open = noteQuestion(open, taskID, m.Data)
		}
		return len(msgs)
	}
	t, out, err := w.Eng.WaitTerminal(ctx, owner, taskID, keep, deliver)
	if err != nil && len(open) > 0 {
		// The stream ends before the task: questions it carried that
		// are still unanswered go to the owner's next stream.
		w.redeliverOpen(owner, open)
	}
	var buf []byte
	outcome := ""
	switch {
	case err == nil:
		buf = appendOutcome(nil, id, t, out)
		outcome = answerOutcome(t, out)
	case errors.Is(err, taskstore.ErrNotFound):
		buf = wire.AppendError(nil, id, wire.CodeInvalidParams, wire.MsgTaskNotFound)
		outcome = "rpc_error"
	case errors.Is(err, engine.ErrClientGone), left.Load():
		return wire.OutcomeClientGone
	case ctx.Err() != nil:
		return "shutdown" // shutting down: the client resumes on another replica
	default:
		buf = wire.AppendError(nil, id, wire.CodeInternalError, wire.MsgStoreUnavailable)
		outcome = "store_unavailable"
	}
	_ = sse.Write(bw, evID, buf)
	_ = bw.Flush()
	return outcome
}

// resumeRetryMs is the SSE retry hint on tasks/result streams.
const resumeRetryMs = 2000

// resultEventID names the events of a tasks/result stream: the prefix marks
// it as taskgate's, then the task id and the JSON-RPC request id.
func resultEventID(taskID string, rpcID []byte) string {
	return resultEventPrefix + taskID + "." + base64.RawURLEncoding.EncodeToString(rpcID)
}

const resultEventPrefix = "tg1."

func parseResultEventID(s string) (taskID string, rpcID []byte, ok bool) {
	rest, found := strings.CutPrefix(s, resultEventPrefix)
	if !found {
		return "", nil, false
	}
	taskID, enc, found := strings.Cut(rest, ".")
	if !found || taskID == "" {
		return "", nil, false
	}
	rpcID, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(rpcID) == 0 {
		return "", nil, false
	}
	env := jsonx.Scanner{B: rpcID}
	if raw, err := env.Value(); err != nil || len(raw) != len(rpcID) || !wire.ValidID(rpcID) {
		return "", nil, false
	}
	return taskID, rpcID, true
}
