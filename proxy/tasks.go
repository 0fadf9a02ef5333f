package proxy

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
	"github.com/taskgate/taskgate/taskstore"
)

// metaRelatedTask is the _meta key that ties a message to its task (T-40, T-42).
const metaRelatedTask = "io.modelcontextprotocol/related-task"

// Messages a client sees for task errors. A foreign task gets exactly the
// unknown-task answer (T-75).
const (
	msgTaskNotFound     = "taskgate: task not found (unknown id, expired, or not yours)"
	msgStoreUnavailable = "taskgate: task store unavailable"
	msgShuttingDown     = "taskgate: shutting down; try another replica"
)

// toolsCall enforces the tool policy on tools/call and turns task-augmented
// calls into tasks; plain calls of allowed tools pass through.
func (h *Handler) toolsCall(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) {
	if env.id == nil || !h.tasksActive(&rc.Request.Header) {
		if env.id != nil && len(rc.Request.Header.Peek(headerProtocolVersion)) == 0 {
			h.noVersionTaskCall(rc, info, env)
		}
		h.pass(rc, info, env.id)
		return
	}
	if env.params == nil {
		h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: tools/call needs params"))
		return
	}
	vals, err := jsonx.Members(env.params, "name", "task")
	if err != nil {
		h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: invalid tools/call params: "+err.Error()))
		return
	}
	name, ok := jsonx.UnquoteValue(vals[0])
	if !ok {
		h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: tools/call params.name must be a string"))
		return
	}
	st := h.policy().For(name)
	task := vals[1]
	if task == nil || string(task) == "null" {
		if st.TaskSupport == policy.Required {
			// T-10, E-09: the upstream is not contacted.
			h.rpcError(rc, info, env.id, newRPCError(codeMethodNotFound,
				fmt.Sprintf("taskgate: tool %q must be called as a task (taskSupport: required); add params.task", name)))
			return
		}
		h.pass(rc, info, env.id)
		return
	}
	if task[0] != '{' {
		h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: tools/call params.task must be an object"))
		return
	}
	if st.TaskSupport == policy.Forbidden {
		// T-08, E-08: the upstream is not contacted.
		h.rpcError(rc, info, env.id, newRPCError(codeMethodNotFound,
			fmt.Sprintf("taskgate: tool %q cannot be called as a task (taskSupport: forbidden); call it without params.task", name)))
		return
	}
	h.createTask(rc, info, env, name, st, task)
}

// noVersionTaskCall handles a task-augmented tools/call without the
// MCP-Protocol-Version header. Such a request is at 2025-03-26, which has
// no tasks, so it is served as a plain call: the upstream runs it and the
// client gets its result in the answer (a valid answer to a task request
// the receiver does not serve as a task). Since the client evidently
// wanted a task, taskgate says why it did not make one: a warning once per
// session (or per owner without one), and the outcome
// "task_without_version" on taskgate_requests_total.
func (h *Handler) noVersionTaskCall(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) {
	if env.params == nil {
		return
	}
	vals, err := jsonx.Members(env.params, "task")
	if err != nil || vals[0] == nil || string(vals[0]) == "null" {
		return
	}
	info.outcome = "task_without_version"
	key := rc.Request.Header.Peek(headerSessionID)
	if len(key) == 0 {
		key = rc.Request.Header.Peek(fasthttp.HeaderAuthorization)
	}
	id := h.hashShort(key)
	if !h.warnedOnce(id) {
		return
	}
	h.logOf(info).Warn().Str(logSession, id).
		Msg("task-augmented tools/call without the MCP-Protocol-Version header: served as a plain call, no task " +
			"(a request without the header is at 2025-03-26, which has no tasks); the client must send MCP-Protocol-Version: 2025-11-25")
}

// maxWarned bounds the sessions remembered by warnedOnce; beyond it the
// memory is cleared and warnings may repeat.
const maxWarned = 4096

// warnedOnce reports whether key is seen for the first time.
func (h *Handler) warnedOnce(key string) bool {
	h.warnedMu.Lock()
	defer h.warnedMu.Unlock()
	if h.warned == nil || len(h.warned) >= maxWarned {
		h.warned = make(map[string]struct{})
	}
	if _, ok := h.warned[key]; ok {
		return false
	}
	h.warned[key] = struct{}{}
	return true
}

// createTask stores a new working task, starts its runner and answers with
// CreateTaskResult without waiting for the upstream (T-14, E-07).
func (h *Handler) createTask(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope, tool string, st policy.Settings, task []byte) {
	if h.eng.Closed() {
		h.rpcError(rc, info, env.id, newRPCError(codeInternalError, msgShuttingDown))
		return
	}
	owner, _ := h.owner(&rc.Request.Header)
	tv, err := jsonx.Members(task, "ttl")
	if err != nil {
		h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: invalid params.task: "+err.Error()))
		return
	}
	params, err := jsonx.DeleteMember(env.params, "task")
	if err != nil {
		h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: invalid tools/call params: "+err.Error()))
		return
	}
	if !h.allowTaskOp(rc, info, env.id, owner) {
		return
	}
	id, upNonce, ok := h.reserveTaskCall(rc, info, env, tool, st)
	if !ok {
		return
	}
	// The task's messages go to any stream of its owner (sessions.go); the
	// call runs on the client's upstream session, which the client's
	// DELETE then ends only after the call.
	group := streamGroup(owner)
	upSess := h.sessionKey(rc.Request.Header.Peek(headerSessionID))
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
		UpstreamID:   `"` + upstreamIDPrefix + upNonce + `"`,
		Runner:       h.cfg.ProcessID,
		Session:      group,
		Era:          "2025-11-25",
	}
	info.taskID = id

	// The upstream request: the client's, minus params.task (P-03), under
	// an id the client cannot collide with (P-07), same headers.
	h.prepareUpstream(rc, &rc.Request)
	req := fasthttp.AcquireRequest()
	rc.Request.Header.CopyTo(&req.Header)
	body := make([]byte, 0, len(params)+len(t.UpstreamID)+64)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = append(body, t.UpstreamID...)
	body = append(body, `,"method":"tools/call","params":`...)
	body = append(body, params...)
	body = append(body, '}')
	req.SetBody(body)

	j := &job{req: req}
	if !h.storeTask(rc, info, env, j, t, st, group, upSess, nil) {
		return
	}
	h.logOf(info).Info().Str(logTaskID, id).Str(logOwner, owner).Str(logTool, tool).
		Dur("ttl", t.TTL).Msg("task created")
	h.eng.Start(&j.Job)

	res := make([]byte, 0, 256)
	res = append(res, `{"task":`...)
	res = appendTaskPolled(res, t, h.eng.Limits.Thrifty(owner))
	res = append(res, '}')
	h.rpcResult(rc, env.id, res)
}

// reserveTaskCall takes one of tool's concurrency slots (policy
// maxConcurrent) and makes the new task's id and the random id of its
// upstream request, which is separate from the task id the client knows
// (P-07, E-45). Both wires call it. When either fails it answers the client
// and returns ok false, holding nothing.
func (h *Handler) reserveTaskCall(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope, tool string, st policy.Settings) (id, upNonce string, ok bool) {
	id, upNonce, err := h.eng.Limits.Reserve(tool, st)
	switch {
	case errors.Is(err, engine.ErrToolBusy):
		h.rpcError(rc, info, env.id, newRPCError(codeInternalError, fmt.Sprintf(
			"taskgate: tool %q already runs %d task calls here (policy maxConcurrent); retry later", tool, st.MaxConcurrent)))
		return "", "", false
	case err != nil:
		h.rpcError(rc, info, env.id, newRPCError(codeInternalError, "taskgate: generating a task id failed"))
		return "", "", false
	}
	return id, upNonce, true
}

// storeTask durably creates t, the task of a tools/call whose job is j
// (holding its upstream request), with the runner's first lease (both
// wires); session and upSession are the job's (engine.Job). When that
// fails it frees what the call held (release, if set; the tool's
// concurrency slot; j's request), answers the client with the reason and
// returns false.
func (h *Handler) storeTask(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope, j *job, t *taskstore.Task, st policy.Settings, session, upSession string, release func()) bool {
	ctx := h.ctxOf(info)
	if info.span != nil {
		ctx = h.traceCall(info, j, t)
	}
	err := h.eng.Create(ctx, &j.Job, t, st, j, session, upSession)
	if err == nil {
		if j.span != nil {
			j.tracedCreated(info)
		}
		return true
	}
	j.failCall(err)
	if release != nil {
		release()
	}
	fasthttp.ReleaseRequest(j.req)
	switch {
	case errors.Is(err, taskstore.ErrOwnerLimit):
		h.rpcError(rc, info, env.id, newRPCError(codeInternalError, fmt.Sprintf(
			"taskgate: too many unfinished tasks for this caller (limit %d); wait for some to finish", h.cfg.MaxTasksPerOwner)))
	default:
		h.rpcError(rc, info, env.id, newRPCError(codeInternalError, msgStoreUnavailable))
	}
	return false
}

// tasksMethod serves tasks/get, tasks/result, tasks/list and tasks/cancel
// from the store; they never reach the upstream (P-03).
func (h *Handler) tasksMethod(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope) {
	owner, identified := h.owner(&rc.Request.Header)
	if !h.allowTaskOp(rc, info, env.id, owner) {
		return
	}
	if env.method == methodTasksList {
		h.tasksList(rc, info, env, owner, identified)
		return
	}
	var taskID string
	if env.params != nil {
		vals, err := jsonx.Members(env.params, "taskId")
		if err != nil {
			h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: invalid params: "+err.Error()))
			return
		}
		taskID, _ = jsonx.UnquoteValue(vals[0])
	}
	if taskID == "" {
		h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: params.taskId must be a non-empty string"))
		return
	}
	info.taskID = taskID
	ctx := h.ctxOf(info)
	switch env.method {
	case methodTasksGet:
		t, err := h.eng.Get(ctx, owner, taskID)
		if err != nil {
			h.storeError(rc, info, env.id, err)
			return
		}
		h.rpcResult(rc, env.id, appendTaskPolled(make([]byte, 0, 256), t, h.eng.Limits.Thrifty(owner)))
	case methodTasksCancel:
		t, err := h.eng.Cancel(ctx, owner, taskID, "cancelled by the client", true)
		if errors.Is(err, taskstore.ErrTerminal) {
			// T-57, E-27.
			h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: task already finished; it cannot be cancelled"))
			return
		}
		if err != nil {
			h.storeError(rc, info, env.id, err)
			return
		}
		h.rpcResult(rc, env.id, appendTask(make([]byte, 0, 256), t))
	case methodTasksResult:
		if j := h.localJob(owner, taskID); j != nil {
			// The call runs in this process and the task is not terminal
			// yet: wait for the runner, no store read first.
			h.localResult(rc, info, append([]byte(nil), env.id...), j)
			return
		}
		t, out, err := h.eng.Outcome(ctx, owner, taskID)
		if err != nil {
			h.storeError(rc, info, env.id, err)
			return
		}
		if t.Status.Terminal() && h.sessionless.Load() && len(rc.Request.Header.Peek(headerSessionID)) == 0 &&
			acceptsSSE(&rc.Request.Header) {
			// In front of a session-less upstream a client may have had
			// no GET stream to take the task's messages as they came:
			// those still queued go out on this answer's stream before
			// the result. (Elsewhere a finished task's answer stays one
			// JSON read, without a drain.)
			h.streamResult(rc, info, append([]byte(nil), env.id...), owner, taskID)
			return
		}
		if t.Status.Terminal() {
			h.writeOutcome(rc, env.id, t, out)
			info.outcome = answerOutcome(t, out)
			return
		}
		h.awaitResult(rc, info, append([]byte(nil), env.id...), owner, taskID, acceptsSSE(&rc.Request.Header))
	}
}

func (h *Handler) tasksList(rc *fasthttp.RequestCtx, info *reqInfo, env *envelope, owner string, identified bool) {
	if !identified {
		// T-76, E-06: without an identity tasks.list is not advertised.
		h.rpcError(rc, info, env.id, newRPCError(codeMethodNotFound,
			"taskgate: tasks/list needs an Authorization header or a session"))
		return
	}
	var cursor string
	if env.params != nil {
		vals, err := jsonx.Members(env.params, "cursor")
		if err != nil {
			h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: invalid params: "+err.Error()))
			return
		}
		if vals[0] != nil {
			var ok bool
			if cursor, ok = jsonx.UnquoteValue(vals[0]); !ok {
				h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: params.cursor must be a string"))
				return
			}
		}
	}
	tasks, next, err := h.eng.List(h.root, owner, cursor)
	if errors.Is(err, taskstore.ErrBadCursor) {
		h.rpcError(rc, info, env.id, newRPCError(codeInvalidParams, "taskgate: invalid cursor")) // T-56
		return
	}
	if err != nil {
		h.storeError(rc, info, env.id, err)
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
		res = appendJSONString(res, next)
	}
	res = append(res, '}')
	h.rpcResult(rc, env.id, res)
}

// allowTaskOp applies the per-owner rate limit (T-77); over it the caller
// gets -32603 naming the limit and a Retry-After header.
func (h *Handler) allowTaskOp(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, owner string) bool {
	ok, wait := h.eng.Limits.Allow(owner)
	if ok {
		return true
	}
	secs := int(wait/time.Second) + 1
	h.rpcError(rc, info, id, newRPCError(codeInternalError, fmt.Sprintf(
		"taskgate: too many task operations (limit %g/s per caller); retry in %ds", h.cfg.TaskRate, secs)))
	rc.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(secs))
	info.outcome = "rate_limited"
	return false
}

// storeError maps a store error to the client's JSON-RPC error (T-67, T-70).
func (h *Handler) storeError(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, err error) {
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		owner, _ := h.owner(&rc.Request.Header)
		h.eng.Limits.LookupMiss(owner) // E-42: misses cost more
		h.rpcError(rc, info, id, newRPCError(codeInvalidParams, msgTaskNotFound))
	case errors.Is(err, taskstore.ErrTerminal):
		h.rpcError(rc, info, id, newRPCError(codeInvalidParams, "taskgate: task already finished"))
	default:
		h.logOf(info).Error().Err(err).Str(logRPCMethod, info.method).Msg("task store operation failed")
		h.rpcError(rc, info, id, newRPCError(codeInternalError, msgStoreUnavailable))
	}
}

// appendTask appends the wire form of t (the flat Task of the schema).
func appendTask(dst []byte, t *taskstore.Task) []byte {
	return appendTaskPolled(dst, t, false)
}

// appendTaskPolled is appendTask; with thrifty set, a running task reports
// the policy's pollInterval instead of the short one of a young task (see
// reportedPollInterval), for owners whose rate-limit budget runs low.
func appendTaskPolled(dst []byte, t *taskstore.Task, thrifty bool) []byte {
	dst = append(dst, `{"taskId":`...)
	dst = appendJSONString(dst, t.ID)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, t.Status...)
	dst = append(dst, '"')
	if t.StatusMessage != "" {
		dst = append(dst, `,"statusMessage":`...)
		dst = appendJSONString(dst, t.StatusMessage)
	}
	dst = append(dst, `,"createdAt":"`...)
	dst = t.CreatedAt.UTC().AppendFormat(dst, timeFormat)
	dst = append(dst, `","lastUpdatedAt":"`...)
	dst = t.UpdatedAt.UTC().AppendFormat(dst, timeFormat)
	dst = append(dst, `","ttl":`...)
	dst = strconv.AppendInt(dst, t.TTL.Milliseconds(), 10)
	if t.PollInterval > 0 {
		dst = append(dst, `,"pollInterval":`...)
		dst = strconv.AppendInt(dst, engine.PollInterval(t, time.Now(), thrifty).Milliseconds(), 10)
	}
	return append(dst, '}')
}

// pollMin is the shortest pollInterval a running task reports
// (engine.PollInterval, both wires).
const pollMin = engine.PollMin

// reportedPollInterval is the pollInterval t reports at now.
func reportedPollInterval(t *taskstore.Task, now time.Time) time.Duration {
	return engine.PollInterval(t, now, false)
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
	switch {
	case t.Status == taskstore.Cancelled:
		return appendErrorResponse(dst, id, codeInternalError, "taskgate: task was cancelled; it has no result")
	case out != nil && out.Kind == taskstore.OutcomeResult:
		if res, err := withRelatedTask(out.Raw, t.ID); err == nil {
			return appendResultResponse(dst, id, res)
		}
		return appendErrorResponse(dst, id, codeInternalError, "taskgate: stored result is malformed")
	case out != nil && out.Kind == taskstore.OutcomeError:
		return appendRawErrorResponse(dst, id, out.Raw)
	}
	msg := t.StatusMessage
	if msg == "" {
		msg = "task failed without an upstream answer"
	}
	return appendErrorResponse(dst, id, codeInternalError, "taskgate: "+msg)
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
	rel = appendJSONString(rel, taskID)
	rel = append(rel, '}')
	if meta, err = jsonx.SetMember(meta, metaRelatedTask, rel); err != nil {
		return nil, err
	}
	return jsonx.SetMember(result, "_meta", meta)
}

func (h *Handler) writeOutcome(rc *fasthttp.RequestCtx, id []byte, t *taskstore.Task, out *taskstore.Outcome) {
	size := 128
	if out != nil {
		size += len(out.Raw)
	}
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(appendOutcome(make([]byte, 0, size), id, t, out))
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
func (h *Handler) awaitResult(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, owner, taskID string, sse bool) {
	if !sse {
		h.awaitJSONResult(rc, info, id, owner, taskID, nil)
		return
	}
	h.streamResult(rc, info, id, owner, taskID)
}

// awaitJSONResult is awaitResult for a client that reads JSON: one answer
// once the task is terminal. j, when not nil, is the task's call running
// in this process, waited for through its runner.
func (h *Handler) awaitJSONResult(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, owner, taskID string, j *job) {
	// A client that leaves ends the wait at once; a shutdown only once
	// this process's calls have recorded their outcomes (WaitRoot).
	ctx, cancel := context.WithCancel(h.waitCtxOf(info))
	var left atomic.Bool
	unwatch := sysconn.WatchClose(rc.Conn(), func() { left.Store(true); cancel() })
	h.m.waiters.Inc()
	var t *taskstore.Task
	var out *taskstore.Outcome
	var err error
	ok := false
	if j != nil {
		t, out, ok, err = h.eng.AwaitSettled(ctx, &j.Job)
	}
	if !ok {
		t, out, err = h.eng.WaitTerminal(ctx, owner, taskID, nil, nil)
	}
	h.m.waiters.Dec()
	unwatch()
	cancel()
	if left.Load() {
		info.outcome = outcomeClientGone
		rc.SetConnectionClose()
		return
	}
	if err != nil {
		h.storeError(rc, info, id, err)
		return
	}
	info.outcome = answerOutcome(t, out)
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("application/json")
	rc.SetBody(appendOutcome(nil, id, t, out))
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
func (h *Handler) localResult(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, j *job) {
	owner, taskID := j.Task.Owner, j.Task.ID
	hdr := &rc.Request.Header
	if !acceptsSSE(hdr) {
		h.awaitJSONResult(rc, info, id, owner, taskID, j) // waits through the runner (engine.AwaitSettled)
		return
	}
	if !j.Queued() {
		// A client that leaves ends the wait at once; a shutdown only
		// once this call has recorded its outcome (WaitRoot).
		ctx, cancel := context.WithCancel(h.waitCtxOf(info))
		var left atomic.Bool
		unwatch := sysconn.WatchClose(rc.Conn(), func() { left.Store(true); cancel() })
		stream := time.NewTimer(h.cfg.KeepAlive)
		h.m.waiters.Inc()
		t, out, settled, err := h.eng.AwaitLocal(ctx, &j.Job, stream.C)
		h.m.waiters.Dec()
		stream.Stop()
		unwatch()
		cancel()
		switch {
		case left.Load():
			info.outcome = outcomeClientGone
			rc.SetConnectionClose()
			return
		case err != nil:
			h.storeError(rc, info, id, err)
			return
		case settled:
			info.outcome = answerOutcome(t, out)
		}
		switch {
		case settled && acceptsJSON(hdr):
			h.writeOutcome(rc, id, t, out)
			return
		case settled:
			// An SSE-only client: the result is the stream's one event.
			rc.SetStatusCode(fasthttp.StatusOK)
			rc.Response.Header.SetContentType("text/event-stream")
			rc.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
			rc.SetBody(sse.Append(nil, resultEventID(taskID, id), appendOutcome(nil, id, t, out)))
			return
		}
	}
	h.streamLocalResult(rc, info, id, j)
}

// streamLocalResult is streamResult for a call that runs in this process:
// keep-alive comments and the result from the runner's memory while the
// task has no queued message, then (once one is queued) the store's wait
// with the queue drained onto the stream.
func (h *Handler) streamLocalResult(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, j *job) {
	owner, taskID := j.Task.Owner, j.Task.ID
	h.startResultStream(rc, info, id, taskID, func(ctx context.Context, w *bufio.Writer, evID string, left *atomic.Bool) string {
		keep := time.NewTicker(h.cfg.KeepAlive)
		defer keep.Stop()
		for !j.Queued() {
			t, out, settled, err := h.eng.AwaitLocal(ctx, &j.Job, keep.C)
			switch {
			case err != nil:
				_, _ = w.Write(sse.Append(nil, evID, resultError(id, err)))
				_ = w.Flush()
				if errors.Is(err, taskstore.ErrNotFound) {
					return "rpc_error"
				}
				return "store_unavailable"
			case settled:
				_, _ = w.Write(sse.Append(nil, evID, appendOutcome(nil, id, t, out)))
				_ = w.Flush()
				return answerOutcome(t, out)
			case left.Load():
				return outcomeClientGone
			case ctx.Err() != nil:
				return "shutdown" // the client resumes on another replica
			case j.Queued():
			default:
				if _, err := w.WriteString(": keep-alive\n\n"); err != nil || w.Flush() != nil {
					return outcomeClientGone
				}
			}
		}
		return h.resultStreamBody(ctx, w, evID, id, owner, taskID, left)
	})
}

// resultError is the final answer of a tasks/result stream whose wait
// failed with err.
func resultError(id []byte, err error) []byte {
	if errors.Is(err, taskstore.ErrNotFound) {
		return appendErrorResponse(nil, id, codeInvalidParams, msgTaskNotFound)
	}
	return appendErrorResponse(nil, id, codeInternalError, msgStoreUnavailable)
}

// resumeResult serves GET + Last-Event-ID of a cut tasks/result stream
// (E-25): the answer is a new stream that ends with the result, delivered
// with the original request id. The owner check is the store lookup.
func (h *Handler) resumeResult(rc *fasthttp.RequestCtx, info *reqInfo, taskID string, rpcID []byte) {
	owner, _ := h.owner(&rc.Request.Header)
	_, err := h.eng.Task(h.root, owner, taskID)
	if err != nil {
		status := fasthttp.StatusNotFound
		if !errors.Is(err, taskstore.ErrNotFound) {
			status = fasthttp.StatusServiceUnavailable
		}
		info.outcome = "resume_refused"
		h.httpRPCError(rc, status, nil, codeInvalidParams, msgTaskNotFound)
		return
	}
	h.streamResult(rc, info, rpcID, owner, taskID)
}

// streamResult answers with an SSE stream that ends with the task's result.
func (h *Handler) streamResult(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, owner, taskID string) {
	h.startResultStream(rc, info, id, taskID, func(ctx context.Context, w *bufio.Writer, evID string, left *atomic.Bool) string {
		return h.resultStreamBody(ctx, w, evID, id, owner, taskID, left)
	})
}

// startResultStream starts a tasks/result SSE answer: its priming event
// (H-07: an id and empty data; retry tells the client how soon to resume
// when the connection drops), then body, which writes the rest and returns
// the request's outcome. A client that leaves ends body's ctx at once (and
// sets left), and with it the stream's claim to deliver the task's
// messages (SetListening).
func (h *Handler) startResultStream(rc *fasthttp.RequestCtx, info *reqInfo, id []byte, taskID string,
	body func(ctx context.Context, w *bufio.Writer, evID string, left *atomic.Bool) string) {
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("text/event-stream")
	rc.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	rc.Response.ImmediateHeaderFlush = true
	evID := resultEventID(taskID, id)
	// The stream writer below runs after the handler has returned, when rc,
	// its Request, Response and headers are fasthttp's: it never touches
	// them. It and body use copies only (evID, and the id, owner and taskID
	// that body captured, which callers copy out of the request), se, and
	// conn, only to see the client leave, until the writer returns; w is
	// valid until then too.
	conn := rc.Conn()
	parent := h.waitCtxOf(info) // WaitRoot with the request's trace span, when traced
	se := h.beginStream(info)
	h.eng.Enter()
	rc.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer h.eng.Leave()
		h.m.waiters.Inc()
		defer h.m.waiters.Dec()
		outcome := ""
		defer func() { se.end(outcome) }()
		var left atomic.Bool
		// WaitRoot: on shutdown the wait goes on until this process's
		// calls have recorded their outcomes, so it ends with one.
		ctx, cancel := context.WithCancel(parent)
		defer cancel()
		defer sysconn.WatchClose(conn, func() { left.Store(true); cancel() })()
		fmt.Fprintf(w, "id: %s\nretry: %d\ndata: \n\n", evID, resumeRetryMs)
		if w.Flush() != nil {
			return
		}
		outcome = body(ctx, w, evID, &left)
	})
}

// resultStreamBody waits through the store for the task's end, marked as
// its listener, delivering its queued messages as they come, and ends the
// stream with the result. It returns the request's outcome.
func (h *Handler) resultStreamBody(ctx context.Context, w *bufio.Writer, evID string, id []byte, owner, taskID string, left *atomic.Bool) string {
	h.eng.Mail.Listen(owner, taskID, listeningTTLKeepAlive*h.cfg.KeepAlive)
	defer h.eng.Mail.Listen(owner, taskID, 0)
	keep := func() bool {
		h.eng.Mail.Listen(owner, taskID, listeningTTLKeepAlive*h.cfg.KeepAlive)
		_, err := w.WriteString(": keep-alive\n\n")
		return err == nil && w.Flush() == nil
	}
	n := 0
	var open []openQuestion
	deliver := func(msgs []taskstore.Message) int {
		for i, m := range msgs {
			n++
			if _, err := w.Write(sse.Append(nil, evID+"."+strconv.Itoa(n), m.Data)); err != nil || w.Flush() != nil {
				return i
			}
			open = noteQuestion(open, taskID, m.Data)
		}
		return len(msgs)
	}
	t, out, err := h.eng.WaitTerminal(ctx, owner, taskID, keep, deliver)
	if err != nil && len(open) > 0 {
		// The stream ends before the task: questions it carried that
		// are still unanswered go to the owner's next stream.
		h.redeliverOpen(owner, open)
	}
	var buf []byte
	outcome := ""
	switch {
	case err == nil:
		buf = appendOutcome(nil, id, t, out)
		outcome = answerOutcome(t, out)
	case errors.Is(err, taskstore.ErrNotFound):
		buf = appendErrorResponse(nil, id, codeInvalidParams, msgTaskNotFound)
		outcome = "rpc_error"
	case errors.Is(err, engine.ErrClientGone), left.Load():
		return outcomeClientGone
	case ctx.Err() != nil:
		return "shutdown" // shutting down: the client resumes on another replica
	default:
		buf = appendErrorResponse(nil, id, codeInternalError, msgStoreUnavailable)
		outcome = "store_unavailable"
	}
	_, _ = w.Write(sse.Append(nil, evID, buf))
	_ = w.Flush()
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
	if raw, err := env.Value(); err != nil || len(raw) != len(rpcID) || !validID(rpcID) {
		return "", nil, false
	}
	return taskID, rpcID, true
}

// holdYoungFor is the age below which a tasks/get of a local call waits
// up to holdYoungMax for its end (engine.Config.HoldYoung, HoldFor): a client
// polling a call of a few milliseconds learns of its end in the first
// answer rather than one pollInterval (pollMin) later.
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
