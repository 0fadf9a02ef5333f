package v20260728

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability"
	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/proxy/sse"
	"github.com/taskgate/taskgate/proxy/sysconn"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/proxy/wire/v20260728/schema"
	"github.com/taskgate/taskgate/taskstore"
)

// createTask stores a task for a 2026 tools/call that declared the tasks
// extension, starts its runner, and answers once the call has run for the
// promote window (or ended, or asked the client something, sooner):
//
//   - the call ended: its result (or error) as a plain answer; the task
//     record stays readable for its ttl;
//   - the upstream asked the client: an InputRequiredResult with the
//     questions and a signed requestState; the client's retry with the
//     answers (resumeHeld) goes on with the same call and gets the task;
//   - otherwise: the flat CreateTaskResult. The task was stored (and
//     acknowledged by the store) before, so tasks/get on any replica finds
//     it.
//
// With plain (a call that did not declare the extension, to a 2025
// upstream, whose client can answer questions) there is no window: the
// client gets the call's outcome, or an InputRequiredResult whenever the
// upstream asks, and never sees the task that carries the call.
func (w *Wire) createTask(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, tool string, st policy.Settings, m *reqMeta, era int, plain bool) {
	if w.Eng.Closed() {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInternalError, wire.MsgShuttingDown))
		return
	}
	owner, _ := w.Owner(&rc.Request.Header)
	if !w.AllowTaskOp(rc, info, env.ID, owner) {
		return
	}
	params, err := upstreamParams(env.Params, era)
	if err == nil && era == era2026 && w.owned() {
		params, err = withoutTasksExtension(params)
	}
	if err != nil {
		wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: invalid tools/call params: "+err.Error()))
		return
	}
	id, upNonce, ok := w.ReserveTaskCall(rc, info, env, tool, st)
	if !ok {
		return
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	t := &taskstore.Task{
		ID:           id,
		Owner:        owner,
		Status:       taskstore.Working,
		CreatedAt:    now,
		UpdatedAt:    now,
		TTL:          st.TTL(nil),
		PollInterval: st.PollInterval,
		Tool:         tool,
		UpstreamID:   `"` + wire.UpstreamIDPrefix + upNonce + `"`,
		Runner:       w.Config.ProcessID,
		Era:          schema.ProtocolVersion,
	}
	info.TaskID = id

	mj := newCallState(era, m, params)
	if plain {
		token, err := progressToken(env.Params)
		if err != nil {
			wire.RPCError(rc, info, env.ID, wire.NewError(wire.CodeInvalidParams, "taskgate: invalid params._meta: "+err.Error()))
			return
		}
		mj.wantNotes(token, m.logLevel)
	}
	req := fasthttp.AcquireRequest()
	if err := w.prepareCall(rc, req, era, mj); err != nil {
		fasthttp.ReleaseRequest(req)
		w.Eng.Limits.ReleaseTool(tool)
		w.UpstreamFailed(rc, info, env.ID, err)
		return
	}
	req.SetBody(appendCallBody(nil, t.UpstreamID, params))

	j := &wire.Job{Req: req, Call: &call{w: w, mj: mj}}
	if !w.StoreTask(rc, info, env, j, t, st, "", "", mj.release) {
		return
	}
	w.LogOf(info).Info().Str(wire.LogTaskID, id).Str(wire.LogOwner, owner).Str(wire.LogTool, tool).Str("wire", schema.ProtocolVersion).
		Dur("ttl", t.TTL).Msg("task created")
	w.Eng.Start(&j.Job)

	untrack := func() {}
	if plain {
		// The client may cancel the call it waits for (cancel.go).
		untrack = w.trackCall(rc, env.ID, func(reason string) { _ = w.Eng.Withdraw(w.Root, &j.Job, reason) })
	}
	var window <-chan time.Time
	if !plain {
		timer := time.NewTimer(w.window)
		defer timer.Stop()
		window = timer.C
	}
	select {
	case <-j.Settled():
		w.plainOutcome(rc, info, env.ID, j, m)
	case <-mj.asked:
		info.Outcome = "input_required"
		w.inputRequired(rc, env.ID, owner, j, plain)
		w.expireHold(j)
	case <-window:
		w.created(rc, env.ID, j.Task)
	case n := <-mj.notes: // (nil unless plain)
		w.streamPlain(rc, info, env.ID, owner, j, m, n, mj.asked, true, untrack)
		return
	}
	untrack()
}

// streamPlain answers a plain call (see createTask) whose request asked for
// notifications once the first one, n, came before the call's answer: an
// SSE stream (HTTP 200) with n, each later notification as it comes, and
// then the call's outcome, or an InputRequiredResult when the upstream
// asks (asked closes; hold: the call was not answered yet, so an unanswered
// hold expires). A client that closes the stream withdraws the call.
func (w *Wire) streamPlain(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, owner string, j *wire.Job, m *reqMeta, n []byte, asked <-chan struct{}, hold bool, untrack func()) {
	id = append([]byte(nil), id...)
	meta := *m
	wire.SSEHeader(rc, true)
	// The writer runs after the handler returned: it uses copies (id,
	// meta, n), the job and conn, never rc.
	conn := rc.Conn()
	se := w.BeginStream(info)
	w.Eng.Enter()
	rc.SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer w.Eng.Leave()
		defer untrack()
		outcome := ""
		defer func() { se.End(outcome) }()
		ctx, cancel := context.WithCancel(w.Root)
		defer cancel()
		defer sysconn.WatchClose(conn, cancel)()
		write := func(msg []byte) bool {
			_, err := bw.Write(sse.Append(nil, "", msg))
			return err == nil && bw.Flush() == nil
		}
		ok := write(n)
		for ok {
			select {
			case n := <-stateOf(j).notes:
				ok = write(n)
			case <-j.Settled():
				drainNotes(j, write)
				ft, out := j.Final()
				a := plainMessage(id, ft, out, &meta)
				outcome = a.outcome
				write(a.msg)
				return
			case <-asked:
				drainNotes(j, write)
				outcome = "input_required"
				write(wire.AppendResult(nil, id, w.inputRequiredResult(owner, j)))
				if hold {
					w.expireHold(j)
				}
				return
			case <-ctx.Done():
				ok = false
			}
		}
		outcome = wire.OutcomeClientGone
		if w.Root.Err() == nil {
			// Closing a request's stream cancels it.
			_ = w.Eng.Withdraw(w.Root, &j.Job, "the client closed the request")
		}
	})
}

// drainNotes writes the notifications j's call sent before its answer.
func drainNotes(j *wire.Job, write func([]byte) bool) {
	for {
		select {
		case n := <-stateOf(j).notes:
			if !write(n) {
				return
			}
		default:
			return
		}
	}
}

// created answers with the CreateTaskResult of t.
func (w *Wire) created(rc *fasthttp.RequestCtx, id []byte, t *taskstore.Task) {
	wt := w.toWireTask(t)
	wire.RPCResult(rc, id, schema.AppendCreateTaskResult(make([]byte, 0, 256), &wt))
}

// plainOutcome answers a call that ended within the promote window with
// its outcome, as a plain call would have been answered.
func (w *Wire) plainOutcome(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, j *wire.Job, m *reqMeta) {
	t, out := j.Final()
	w.plainAnswer(rc, info, id, j.Task, t, out, m)
}

// plainAnswer is plainOutcome for task (its final state ft and outcome
// out, when known; else read from the store).
func (w *Wire) plainAnswer(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, task, ft *taskstore.Task, out *taskstore.Outcome, m *reqMeta) {
	t := ft
	if t == nil {
		var err error
		t, out, err = w.Eng.Outcome(w.Root, task.Owner, task.ID)
		if err != nil {
			w.StoreError(rc, info, id, err)
			return
		}
	}
	w.answerBridged(rc, info, plainMessage(id, t, out, m))
}

// plainMessage renders the final state t and outcome out of a call as the
// answer to its plain request id.
func plainMessage(id []byte, t *taskstore.Task, out *taskstore.Outcome, m *reqMeta) bridgeAnswer {
	switch {
	case out != nil && out.Kind == taskstore.OutcomeResult:
		msg, err := capability.Result2026(wire.AppendResult(nil, id, out.Raw), false)
		if err != nil {
			msg = wire.AppendResult(nil, id, out.Raw)
		}
		return bridgeAnswer{status: fasthttp.StatusOK, msg: msg}
	case out != nil && out.Kind == taskstore.OutcomeError:
		if res, missing, ok := urlElicitationAnswer(out.Raw, m); ok {
			if missing != nil {
				return bridgeAnswer{status: fasthttp.StatusBadRequest, outcome: "rpc_error",
					msg: wire.AppendErrorData(nil, id, schema.CodeMissingCapability,
						"taskgate: the upstream needs a URL elicitation, which the request did not declare", missing)}
			}
			return bridgeAnswer{status: fasthttp.StatusOK, outcome: "input_required", msg: wire.AppendResult(nil, id, res)}
		}
		return bridgeAnswer{status: fasthttp.StatusOK, msg: wire.AppendRawError(nil, id, out.Raw)}
	case t.Status == taskstore.Cancelled:
		return bridgeAnswer{status: fasthttp.StatusOK, outcome: "rpc_error",
			msg: wire.AppendError(nil, id, wire.CodeInternalError, "taskgate: the call was cancelled")}
	default:
		return bridgeAnswer{status: fasthttp.StatusOK, outcome: "rpc_error",
			msg: wire.AppendError(nil, id, wire.CodeInternalError, "taskgate: "+t.StatusMessage)}
	}
}

// inputRequired answers with an InputRequiredResult holding j's open
// questions and a requestState naming j's task.
func (w *Wire) inputRequired(rc *fasthttp.RequestCtx, id []byte, owner string, j *wire.Job, plain bool) {
	state := signState(w.KeyedHash, owner, j.Task.ID, j.Task.Tool, plain, time.Now().Add(holdFor))
	wire.RPCResult(rc, id, schema.AppendInputRequired(nil, stateOf(j).openRequests(), state))
}

// inputRequiredResult is the InputRequiredResult of a plain call j (see
// inputRequired).
func (w *Wire) inputRequiredResult(owner string, j *wire.Job) []byte {
	state := signState(w.KeyedHash, owner, j.Task.ID, j.Task.Tool, true, time.Now().Add(holdFor))
	return schema.AppendInputRequired(nil, stateOf(j).openRequests(), state)
}

// expireHold cancels the held call of j when its client has not answered
// any question by the time the requestState expires: nobody else knows the
// task, and it would hold an upstream call and a place in the owner's
// limit until the policy timeout.
func (w *Wire) expireHold(j *wire.Job) {
	time.AfterFunc(holdFor, func() {
		if stateOf(j).answeredAny() || w.Root.Err() != nil {
			return
		}
		if w.Eng.Withdraw(w.Root, &j.Job, "the client did not answer the questions before its requestState expired") == nil {
			w.Log.Info().Str(wire.LogTaskID, j.Task.ID).Msg("held call cancelled: its requestState expired unanswered")
		}
	})
}

// holdFor is how long a requestState of an InputRequiredResult is valid.
const holdFor = 10 * time.Minute

// requestStatePrefix starts the requestState values taskgate signs.
const requestStatePrefix = "tgs1."

// signState returns a requestState naming owner's task taskID of tool,
// valid until exp: the task id, tool and expiry, and a keyed hash of them
// and the owner (so only the owner can use it, and any replica sharing the
// owner key can verify it).
func signState(keyedHash func(domain string, v []byte) string, owner, taskID, tool string, plain bool, exp time.Time) string {
	kind := "t"
	if plain {
		kind = "p"
	}
	payload := taskID + "." + strconv.FormatInt(exp.Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString([]byte(tool)) + "." + kind
	return requestStatePrefix + payload + "." + keyedHash("request-state", []byte(owner+"\x00"+payload))
}

// verifyState returns the task id a requestState of signState names, if
// it is intact, unexpired, the owner's, and for tool.
// plain reports a state of a plain call (see createTask).
func verifyState(keyedHash func(domain string, v []byte) string, owner, tool, state string) (taskID string, plain, ok bool) {
	rest, ok := strings.CutPrefix(state, requestStatePrefix)
	if !ok {
		return "", false, false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", false, false
	}
	payload, mac := rest[:i], rest[i+1:]
	if !equalConstantTime(mac, keyedHash("request-state", []byte(owner+"\x00"+payload))) {
		return "", false, false
	}
	parts := strings.Split(payload, ".")
	if len(parts) != 4 || (parts[3] != "t" && parts[3] != "p") {
		return "", false, false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || time.Now().Unix() > exp {
		return "", false, false
	}
	if t, err := base64.RawURLEncoding.DecodeString(parts[2]); err != nil || string(t) != tool {
		return "", false, false
	}
	return parts[0], parts[3] == "p", true
}

func equalConstantTime(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var d byte
	for i := range len(a) {
		d |= a[i] ^ b[i]
	}
	return d == 0
}

// resumeHeld serves the retry of a call that got an InputRequiredResult
// from createTask: the answers go to the held call (its task), and the
// client gets the task's CreateTaskResult. A tampered, expired or foreign
// requestState is refused with -32602.
func (w *Wire) resumeHeld(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, tool, state string) {
	owner, _ := w.Owner(&rc.Request.Header)
	if !w.AllowTaskOp(rc, info, env.ID, owner) {
		return
	}
	taskID, plain, ok := verifyState(w.KeyedHash, owner, tool, state)
	if !ok {
		fail(rc, info, env.ID, 200, wire.CodeInvalidParams, "taskgate: requestState is invalid, expired, or not for this call", nil)
		return
	}
	info.TaskID = taskID
	vals, err := jsonx.Members(env.Params, "inputResponses")
	if err != nil || !isObject(vals[0]) {
		fail(rc, info, env.ID, 200, wire.CodeInvalidParams, "taskgate: a retry with requestState needs an inputResponses object", nil)
		return
	}
	meta, _ := parseMeta(env.Params)
	m := &meta
	var next <-chan struct{}
	j := w.LocalJob(owner, taskID)
	if plain && j != nil && stateOf(j) != nil {
		next = stateOf(j).nextQuestion()
	}
	t, err := w.answer(owner, taskID, vals[0])
	if err != nil {
		w.taskError(rc, info, env.ID, err)
		return
	}
	if !plain {
		w.created(rc, env.ID, t)
		return
	}
	if next == nil {
		// The call runs on another replica: wait through the store for
		// its outcome or its next open question.
		t, out, reqs, err := w.Eng.WaitTerminalOrInput(w.Root, owner, taskID)
		switch {
		case err != nil:
			w.taskError(rc, info, env.ID, err)
		case len(reqs) > 0:
			info.Outcome = "input_required"
			state := signState(w.KeyedHash, owner, taskID, tool, true, time.Now().Add(holdFor))
			wire.RPCResult(rc, env.ID, schema.AppendInputRequired(nil, appendInputRequests(nil, reqs), state))
		default:
			w.plainAnswer(rc, info, env.ID, t, t, out, m)
		}
		return
	}
	if string(stateOf(j).openRequests()) != "{}" {
		info.Outcome = "input_required"
		w.inputRequired(rc, env.ID, owner, j, true) // questions left unanswered
		return
	}
	untrack := w.trackCall(rc, env.ID, func(reason string) { _ = w.Eng.Withdraw(w.Root, &j.Job, reason) })
	select {
	case <-j.Settled():
		w.plainOutcome(rc, info, env.ID, j, m)
	case <-next:
		info.Outcome = "input_required"
		w.inputRequired(rc, env.ID, owner, j, true)
	case n := <-stateOf(j).notes: // (nil unless the creating request asked)
		w.streamPlain(rc, info, env.ID, owner, j, m, n, next, false, untrack)
		return
	}
	untrack()
}

// tasksMethod serves tasks/get, tasks/update and tasks/cancel of the 2026
// wire from the store. The checks come before any lookup: a request that
// does not declare the extension gets -32021 (even for an unknown id), and
// the Mcp-Name header must be present and equal params.taskId (else
// -32020). A foreign task is an unknown one (-32602).
func (w *Wire) tasksMethod(rc *fasthttp.RequestCtx, info *wire.Info, env *wire.Envelope, m *reqMeta) {
	if env.ID == nil {
		fail(rc, info, nil, 400, wire.CodeInvalidRequest, "taskgate: "+env.Method+" must be a request with an id", nil)
		return
	}
	if !m.tasks {
		info.Outcome = "capability_missing"
		fail(rc, info, env.ID, 400, schema.CodeMissingCapability, "taskgate: "+env.Method+
			" needs the extension "+schema.ExtensionTasks+" in the request's client capabilities", []byte(schema.RequiredTasksData))
		return
	}
	var taskID string
	var responses []byte
	if env.Params != nil {
		vals, err := jsonx.Members(env.Params, "taskId", "inputResponses")
		if err != nil {
			fail(rc, info, env.ID, 200, wire.CodeInvalidParams, "taskgate: invalid params: "+err.Error(), nil)
			return
		}
		taskID, _ = jsonx.UnquoteValue(vals[0])
		responses = vals[1]
	}
	if n, ok := headerName(rc.Request.Header.Peek(schema.HeaderName)); !ok || n != taskID || n == "" {
		fail(rc, info, env.ID, 400, schema.CodeHeaderMismatch,
			"taskgate: the Mcp-Name header must equal params.taskId on "+env.Method, nil)
		return
	}
	owner, _ := w.Owner(&rc.Request.Header)
	if !w.AllowTaskOp(rc, info, env.ID, owner) {
		return
	}
	info.TaskID = taskID
	switch env.Method {
	case wire.MethodTasksGet:
		t, out, err := w.Eng.Poll(w.CtxOf(info), owner, taskID, true)
		if err != nil {
			w.StoreError(rc, info, env.ID, err)
			return
		}
		wire.RPCResult(rc, env.ID, w.appendGet(nil, t, out, w.openRequests(t)))
	case wire.MethodTasksUpdate:
		if !isObject(responses) {
			fail(rc, info, env.ID, 200, wire.CodeInvalidParams, "taskgate: tasks/update needs an inputResponses object", nil)
			return
		}
		if _, err := w.answer(owner, taskID, responses); err != nil {
			w.taskError(rc, info, env.ID, err)
			return
		}
		wire.RPCResult(rc, env.ID, []byte(schema.Ack))
	case wire.MethodTasksCancel:
		_, err := w.Eng.Cancel(w.CtxOf(info), owner, taskID, "cancelled by the client", false)
		switch {
		case errors.Is(err, taskstore.ErrTerminal):
			// Cancelling a finished task changes nothing and is
			// acknowledged like any cancel on this wire.
		case err != nil:
			w.StoreError(rc, info, env.ID, err)
			return
		}
		wire.RPCResult(rc, env.ID, []byte(schema.Ack))
	}
}

// taskError answers err: a JSON-RPC error taskgate made, or a store error.
func (w *Wire) taskError(rc *fasthttp.RequestCtx, info *wire.Info, id []byte, err error) {
	var re *wire.Error
	if errors.As(err, &re) {
		wire.RPCError(rc, info, id, re)
		return
	}
	w.StoreError(rc, info, id, err)
}

// appendGet renders the tasks/get result of t: a tool result is inline
// when the task completed (a result with isError true, which the 2025 wire
// shows as failed, is completed here), the upstream's JSON-RPC error
// verbatim when it failed (or an error naming why taskgate failed it), and
// the open questions (reqs, an InputRequests object or nil for none) while
// it waits for input.
func (w *Wire) appendGet(dst []byte, t *taskstore.Task, out *taskstore.Outcome, reqs []byte) []byte {
	wt := w.toWireTask(t)
	var d schema.Detail
	switch {
	case t.Status == taskstore.Completed || t.Status == taskstore.Failed && out != nil && out.Kind == taskstore.OutcomeResult:
		wt.Status = string(taskstore.Completed)
		if out != nil {
			d.Result = completeResult(out.Raw)
		}
	case t.Status == taskstore.Failed && out != nil && out.Kind == taskstore.OutcomeError:
		d.Error = failedTaskError(out.Raw)
	case t.Status == taskstore.Failed:
		msg := t.StatusMessage
		if msg == "" {
			msg = "task failed without an upstream answer"
		}
		d.Error = wire.AppendErrorObject(nil, wire.CodeInternalError, "taskgate: "+msg)
	case t.Status == taskstore.InputRequired:
		if len(reqs) > 0 {
			d.InputRequests = reqs
		} else {
			// Every question is answered; the runner has not
			// recorded that yet.
			wt.Status = string(taskstore.Working)
		}
	}
	return schema.AppendGetResult(dst, &wt, d)
}

// completeResult returns a stored tool result as the 2026 wire inlines it
// in a completed task: a CallToolResult of that revision, which carries
// resultType "complete". A 2025 upstream's result has no resultType, so it
// gets one as its first member; a 2026 upstream's result has it already
// and is returned as it is, and so is anything that is not a JSON object.
func completeResult(res []byte) []byte {
	start := jsonx.SkipSpace(res, 0)
	if start >= len(res) || res[start] != '{' {
		return res
	}
	if vals, err := jsonx.Members(res, "resultType"); err != nil || vals[0] != nil {
		return res
	}
	i := jsonx.SkipSpace(res, start+1)
	out := make([]byte, 0, len(res)+len(`"resultType":"complete",`))
	out = append(out, `{"resultType":"complete"`...)
	if res[i] != '}' {
		out = append(out, ',')
	}
	return append(out, res[i:]...)
}

// openRequests returns the open questions of t as an InputRequests object,
// or nil when it has none or does not wait for input. They come from the
// store, so every process shows the same ones; only when the store cannot
// be read does the process running the call show its own.
func (w *Wire) openRequests(t *taskstore.Task) []byte {
	if t.Status != taskstore.InputRequired {
		return nil
	}
	reqs, err := w.Eng.Mail.InputRequests(w.Root, t.Owner, t.ID)
	if err == nil {
		if len(reqs) == 0 {
			return nil
		}
		return appendInputRequests(nil, reqs)
	}
	w.Log.Debug().Err(err).Str(wire.LogTaskID, t.ID).Msg("reading a task's open questions from the store failed")
	if j := w.LocalJob(t.Owner, t.ID); j != nil && stateOf(j) != nil {
		if r := stateOf(j).openRequests(); string(r) != "{}" {
			return r
		}
	}
	return nil
}

// toWireTask is what the 2026 wire shows of t; a running task's
// pollIntervalMs starts small and grows with its age, as on the 2025 wire
// (Engine.ReportedPollInterval).
func (w *Wire) toWireTask(t *taskstore.Task) schema.Task {
	return schema.Task{
		ID:            t.ID,
		Status:        string(t.Status),
		StatusMessage: t.StatusMessage,
		CreatedAt:     t.CreatedAt,
		UpdatedAt:     t.UpdatedAt,
		TTL:           t.TTL,
		PollInterval:  w.Eng.ReportedPollInterval(t),
	}
}

// answer hands the client's answers (responses: key -> answer) to owner's
// task taskID and returns the task. Unknown and already answered keys are
// ignored, and so are answers to a finished task. The store takes the
// answered questions off the task atomically, so a tasks/get on any
// process right after no longer shows them, and hands the answers to the
// process running the call; when that is this process they are delivered
// before answer returns.
func (w *Wire) answer(owner, taskID string, responses []byte) (*taskstore.Task, error) {
	ctx := w.Root
	t, err := w.Eng.Task(ctx, owner, taskID)
	if err != nil || t.Status.Terminal() {
		return t, err
	}
	answers, err := splitObject(responses)
	if err != nil {
		return nil, wire.NewError(wire.CodeInvalidParams, "taskgate: invalid inputResponses: "+err.Error())
	}
	if len(answers) == 0 {
		return t, nil
	}
	in := make([]taskstore.InputAnswer, len(answers))
	for i, a := range answers {
		in[i] = taskstore.InputAnswer{Key: a.key, Msg: appendAnswer(nil, a.key, a.val)}
	}
	taken, open, err := w.Eng.Mail.AnswerInputs(ctx, owner, taskID, in)
	switch {
	case errors.Is(err, taskstore.ErrTerminal):
		return t, nil
	case err != nil:
		return nil, err
	}
	if open == 0 && len(taken) > 0 && t.Status == taskstore.InputRequired {
		t.Status = taskstore.Working
	}
	if j := w.LocalJob(owner, taskID); j != nil && stateOf(j) != nil {
		// The store put the answers it took in the inbox, for the
		// runner's supervisor; delivering them here makes them reach the
		// call now (a key is delivered once, whichever gets there first).
		// Questions the store never recorded are answered here only.
		byKey := make(map[string]bool, len(taken))
		for _, k := range taken {
			byKey[k] = true
		}
		var mine []keyVal
		for _, a := range answers {
			if byKey[a.key] || stateOf(j).unstored(a.key) {
				mine = append(mine, a)
				delete(byKey, a.key)
			}
		}
		if len(mine) > 0 && stateOf(j).deliver(w, j, mine) && t.Status == taskstore.InputRequired {
			t.Status = taskstore.Working
		}
	}
	return t, nil
}

// keyVal is one member of a JSON object.
type keyVal struct {
	key string
	val []byte
}

// splitObject returns the members of a JSON object in order.
func splitObject(obj []byte) ([]keyVal, error) {
	var out []keyVal
	s := jsonx.Scanner{B: obj}
	s.Space()
	err := s.Object(func(k []byte, escaped bool, v []byte) error {
		name, ok := jsonx.Unquote(k, escaped)
		if !ok {
			return jsonx.ErrSyntax
		}
		out = append(out, keyVal{key: name, val: v})
		return nil
	})
	return out, err
}

// appendAnswer is an answer as it travels through the store: {"key":..,"answer":..}.
func appendAnswer(dst []byte, key string, val []byte) []byte {
	dst = append(dst, `{"key":`...)
	dst = wire.AppendJSONString(dst, key)
	dst = append(dst, `,"answer":`...)
	dst = append(dst, val...)
	return append(dst, '}')
}

// upstreamParams returns the params of a 2026 tools/call as the upstream
// gets them: without a legacy task member, without the inputResponses and
// requestState of a retry (taskgate answers those itself), and for a 2025
// upstream without the 2026 _meta keys (an upstream of that era that knows
// them would take the call for a 2026 request).
func upstreamParams(params []byte, era int) ([]byte, error) {
	out := params
	var err error
	for _, k := range [...]string{"task", "inputResponses", "requestState"} {
		if out, err = jsonx.DeleteMember(out, k); err != nil {
			return nil, err
		}
	}
	if era == era2025 {
		return strip2026Meta(out)
	}
	return out, nil
}

// strip2026Meta removes the per-request keys of the 2026 wire from
// params._meta.
func strip2026Meta(params []byte) ([]byte, error) {
	vals, err := jsonx.Members(params, "_meta")
	if err != nil || !isObject(vals[0]) {
		return params, err
	}
	meta := vals[0]
	for _, k := range [...]string{schema.MetaProtocolVersion, schema.MetaClientCapabilities, schema.MetaClientInfo, schema.MetaLogLevel} {
		if meta, err = jsonx.DeleteMember(meta, k); err != nil {
			return nil, err
		}
	}
	if string(meta) == "{}" {
		return jsonx.DeleteMember(params, "_meta")
	}
	return jsonx.SetMember(params, "_meta", meta)
}

// appendCallBody appends a tools/call request with id and params.
func appendCallBody(dst []byte, id string, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"method":"tools/call","params":`...)
	dst = append(dst, params...)
	return append(dst, '}')
}
