package wire

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/taskstore"
)

// Messages a client sees for task errors. A foreign task gets exactly the
// unknown-task answer (T-75).
const (
	MsgTaskNotFound     = "taskgate: task not found (unknown id, expired, or not yours)"
	MsgStoreUnavailable = "taskgate: task store unavailable"
	MsgShuttingDown     = "taskgate: shutting down; try another replica"
)

// ReserveTaskCall takes one of tool's concurrency slots (policy
// maxConcurrent) and makes the new task's id and the random id of its
// upstream request, which is separate from the task id the client knows
// (P-07, E-45). Both wires call it. When either fails it answers the client
// and returns ok false, holding nothing.
func (f *Front) ReserveTaskCall(rc *fasthttp.RequestCtx, info *Info, env *Envelope, tool string, st policy.Settings) (id, upNonce string, ok bool) {
	id, upNonce, err := f.Eng.Limits.Reserve(tool, st)
	switch {
	case errors.Is(err, engine.ErrToolBusy):
		RPCError(rc, info, env.ID, NewError(CodeInternalError, fmt.Sprintf(
			"taskgate: tool %q already runs %d task calls here (policy maxConcurrent); retry later", tool, st.MaxConcurrent)))
		return "", "", false
	case err != nil:
		RPCError(rc, info, env.ID, NewError(CodeInternalError, "taskgate: generating a task id failed"))
		return "", "", false
	}
	return id, upNonce, true
}

// StoreTask durably creates t, the task of a tools/call whose job is j
// (holding its upstream request), with the runner's first lease (both
// wires); session and upSession are the job's (engine.Job). When that
// fails it frees what the call held (release, if set; the tool's
// concurrency slot; j's request), answers the client with the reason and
// returns false.
func (f *Front) StoreTask(rc *fasthttp.RequestCtx, info *Info, env *Envelope, j *Job, t *taskstore.Task, st policy.Settings, session, upSession string, release func()) bool {
	ctx := f.CtxOf(info)
	if info.Span != nil {
		ctx = f.traceCall(info, j, t)
	}
	err := f.Eng.Create(ctx, &j.Job, t, st, j, session, upSession)
	if err == nil {
		if j.Span != nil {
			j.TracedCreated(info)
		}
		return true
	}
	j.FailCall(err)
	if release != nil {
		release()
	}
	fasthttp.ReleaseRequest(j.Req)
	switch {
	case errors.Is(err, taskstore.ErrOwnerLimit):
		RPCError(rc, info, env.ID, NewError(CodeInternalError, fmt.Sprintf(
			"taskgate: too many unfinished tasks for this caller (limit %d); wait for some to finish", f.Config.MaxTasksPerOwner)))
	default:
		RPCError(rc, info, env.ID, NewError(CodeInternalError, MsgStoreUnavailable))
	}
	return false
}

// AllowTaskOp applies the per-owner rate limit (T-77); over it the caller
// gets -32603 naming the limit and a Retry-After header.
func (f *Front) AllowTaskOp(rc *fasthttp.RequestCtx, info *Info, id []byte, owner string) bool {
	ok, wait := f.Eng.Limits.Allow(owner)
	if ok {
		return true
	}
	secs := int(wait/time.Second) + 1
	RPCError(rc, info, id, NewError(CodeInternalError, fmt.Sprintf(
		"taskgate: too many task operations (limit %g/s per caller); retry in %ds", f.Config.TaskRate, secs)))
	rc.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(secs))
	info.Outcome = "rate_limited"
	return false
}

// StoreError maps a store error to the client's JSON-RPC error (T-67, T-70).
func (f *Front) StoreError(rc *fasthttp.RequestCtx, info *Info, id []byte, err error) {
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		owner, _ := f.Owner(&rc.Request.Header)
		f.Eng.Limits.LookupMiss(owner) // E-42: misses cost more
		RPCError(rc, info, id, NewError(CodeInvalidParams, MsgTaskNotFound))
	case errors.Is(err, taskstore.ErrTerminal):
		RPCError(rc, info, id, NewError(CodeInvalidParams, "taskgate: task already finished"))
	default:
		f.LogOf(info).Error().Err(err).Str(LogRPCMethod, info.Method).Msg("task store operation failed")
		RPCError(rc, info, id, NewError(CodeInternalError, MsgStoreUnavailable))
	}
}

// UpstreamIDPrefix starts the JSON-RPC ids of taskgate's own upstream
// requests, followed by 128 random bits (P-07, E-45).
const UpstreamIDPrefix = "taskgate-"

// QuestionIDPrefix starts the ids of questions (requests the upstream
// sends during a task's call) as the client sees them: the prefix, 128
// random bits, then the upstream's own id (raw JSON, base64url), so that
// whoever receives the answer can restore the upstream's id.
const QuestionIDPrefix = UpstreamIDPrefix + "q-"

// OwnerAnonymous owns the tasks of requests that carry neither an
// Authorization header nor a session id. Such tasks are protected only by
// their unguessable ids, and tasks/list is not offered to them (T-76).
const OwnerAnonymous = "anon"

// StreamGroup is the store's name of the streams that may carry owner's
// task messages: every session of the owner. Anonymous callers (neither
// Authorization nor a session) have none.
func StreamGroup(owner string) string {
	if owner == OwnerAnonymous {
		return ""
	}
	return owner
}

// CanonicalID renders a raw JSON-RPC id the same way whoever encoded it:
// strings are re-encoded after unescaping, numbers kept as written.
func CanonicalID(raw []byte) string {
	if len(raw) > 0 && raw[0] == '"' {
		if s, ok := jsonx.UnquoteValue(raw); ok {
			return string(AppendJSONString(nil, s))
		}
	}
	return string(raw)
}

// CloseUpstreamSession ends j's upstream session with a DELETE: j was the
// last call running on a session its client had ended (the engine's
// endSessionTask found that).
func (f *Front) CloseUpstreamSession(j *Job) {
	var hdr fasthttp.RequestHeader
	status, err := 0, j.Header(&hdr)
	if err == nil {
		status, err = f.Up.Delete(&hdr, 10*time.Second)
	}
	if err != nil || status >= 300 && status != fasthttp.StatusNotFound {
		j.Log.Warn().Err(err).Int(LogStatus, status).Msg("ending the session upstream after its last task failed")
		return
	}
	j.Log.Info().Msg("session ended upstream after its last running task")
}

// ProgressText renders a progress notification for statusMessage.
func ProgressText(params []byte) string {
	if params == nil {
		return ""
	}
	vals, err := jsonx.Members(params, "message", "progress", "total")
	if err != nil {
		return ""
	}
	if m, ok := jsonx.UnquoteValue(vals[0]); ok && m != "" {
		return Truncate(m, 200)
	}
	if vals[1] == nil {
		return ""
	}
	if vals[2] != nil {
		return string(vals[1]) + " of " + string(vals[2])
	}
	return "progress " + string(vals[1])
}
