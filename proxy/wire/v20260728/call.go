package v20260728

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/proxy/tracing"
	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// callState is the 2026-wire part of a task's job: the questions the
// upstream call asked and the client has not answered yet, keyed by keys
// unique for the task's life ("in-1", "in-2", ...). It lives in the process
// running the call, with what it needs to forward each answer upstream;
// the store holds each open question too (AddInputRequest), so tasks/get
// on any process shows them and tasks/update on any process answers them
// (AnswerInputs, which hands the answer to this process through the task's
// inbox: TakeAnswers).
//
// A 2025 upstream asks with JSON-RPC requests on the call's stream, each
// answered with a JSON-RPC response under the upstream's id. A 2026
// upstream answers the call with an InputRequiredResult; once all its
// questions are answered, the runner calls again with inputResponses (under
// the upstream's own keys) and the upstream's requestState.
type callState struct {
	era    int
	params []byte // the call's params as sent upstream (for the retries of a 2026 upstream)
	// declared input types of the creating request: only these are asked.
	elicitation, sampling, roots bool
	caps                         bridgeCaps     // what its upstream session declares (a 2025 upstream)
	session                      *bridgeSession // the upstream session of a 2025 upstream (nil otherwise)

	// notes carries, for a plain call (one its client never sees as a
	// task) whose request asked for notifications, the call's progress
	// for token and its log messages at logLevel or above to the request
	// waiting for the call's answer; nil otherwise. Full, it drops.
	notes    chan []byte
	token    []byte
	logLevel string

	asked     chan struct{} // closed at the first question
	askedOnce sync.Once
	newQ      chan struct{} // closed at the next question (then replaced); under mu

	mu       sync.Mutex
	answered bool                 // some question was answered
	next     int                  // last key number handed out
	open     map[string]*question // by key
	order    []string             // keys in the order asked
	round    int                  // pending questions of the current 2026 round
	answers  map[string][]byte    // upstream key -> answer, current 2026 round
	state    string               // upstream requestState of the current round
	roundOK  chan struct{}        // closed when the current 2026 round is fully answered
}

// question is one open question of a task.
type question struct {
	method string
	params []byte
	upID   []byte // 2025 upstream: the request's JSON-RPC id
	upKey  string // 2026 upstream: the upstream's key
	// unstored: recording it in the store failed, so only this process
	// shows it and takes its answer.
	unstored bool
}

func newCallState(era int, m *reqMeta, params []byte) *callState {
	return &callState{
		era: era, params: params,
		elicitation: m.elicitation, sampling: m.sampling, roots: m.roots, caps: m.caps(),
		asked: make(chan struct{}), open: make(map[string]*question),
	}
}

// wantNotes makes the job carry the notifications the plain call's
// request asked for (its progressToken, its logLevel) to that request.
func (mj *callState) wantNotes(token []byte, logLevel string) {
	if token == nil && logLevel == "" {
		return
	}
	mj.token, mj.logLevel = token, logLevel
	mj.notes = make(chan []byte, 64)
}

// notify hands an upstream notification of the call to the request
// waiting for a plain call's answer, if it asked for that kind. It never
// blocks the runner: with nobody reading (between the rounds of a call
// that asks questions), what does not fit is dropped.
func (mj *callState) notify(env *wire.Envelope, msg []byte) {
	if mj.notes == nil {
		return
	}
	switch env.Method {
	case wire.MethodProgress:
		tv, err := jsonx.Members(env.Params, "progressToken")
		if err != nil || mj.token == nil || wire.CanonicalID(tv[0]) != wire.CanonicalID(mj.token) {
			return
		}
	case wire.MethodLogMessage:
		lv, err := jsonx.Members(env.Params, "level")
		if err != nil || mj.logLevel == "" {
			return
		}
		if l, ok := jsonx.UnquoteValue(lv[0]); !ok || logLevelRank(l) < logLevelRank(mj.logLevel) {
			return
		}
	default:
		return
	}
	select {
	case mj.notes <- msg:
	default:
	}
}

// release gives back the upstream session (when the call ends or never
// started).
func (mj *callState) release() {
	if mj.session != nil {
		mj.session.done()
		mj.session = nil
	}
}

// nextQuestion returns a channel closed when the next question is asked.
func (mj *callState) nextQuestion() <-chan struct{} {
	mj.mu.Lock()
	defer mj.mu.Unlock()
	if mj.newQ == nil {
		mj.newQ = make(chan struct{})
	}
	return mj.newQ
}

// unstored reports whether the open question key is missing from the store.
func (mj *callState) unstored(key string) bool {
	mj.mu.Lock()
	defer mj.mu.Unlock()
	q, ok := mj.open[key]
	return ok && q.unstored
}

// answeredAny reports whether the client answered any question yet.
func (mj *callState) answeredAny() bool {
	mj.mu.Lock()
	defer mj.mu.Unlock()
	return mj.answered
}

// declares reports whether the creating request declared what method asks.
func (mj *callState) declares(method string) bool {
	switch method {
	case "elicitation/create":
		return mj.elicitation
	case "sampling/createMessage":
		return mj.sampling
	case "roots/list":
		return mj.roots
	}
	return false
}

// add records a question and returns its key.
func (mj *callState) add(q *question) string {
	mj.mu.Lock()
	defer mj.mu.Unlock()
	mj.next++
	key := "in-" + strconv.Itoa(mj.next)
	mj.open[key] = q
	mj.order = append(mj.order, key)
	if mj.newQ != nil {
		close(mj.newQ)
		mj.newQ = nil
	}
	return key
}

// openRequests renders the open questions as an InputRequests object.
func (mj *callState) openRequests() []byte {
	mj.mu.Lock()
	defer mj.mu.Unlock()
	out := []byte{'{'}
	n := 0
	for _, k := range mj.order {
		q, ok := mj.open[k]
		if !ok {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = wire.AppendJSONString(out, k)
		out = append(out, ':')
		out = appendInputRequest(out, q.method, q.params)
	}
	return append(out, '}')
}

// appendInputRequest appends one input request as the client sees it:
// {"method":..,"params":..}.
func appendInputRequest(dst []byte, method string, params []byte) []byte {
	dst = append(dst, `{"method":`...)
	dst = wire.AppendJSONString(dst, method)
	dst = append(dst, `,"params":`...)
	dst = append(dst, params...)
	return append(dst, '}')
}

// appendInputRequests renders requests of the store as an InputRequests
// object.
func appendInputRequests(dst []byte, reqs []taskstore.InputRequest) []byte {
	dst = append(dst, '{')
	for i, r := range reqs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = wire.AppendJSONString(dst, r.Key)
		dst = append(dst, ':')
		dst = append(dst, r.Request...)
	}
	return append(dst, '}')
}

// deliver applies answers: each open key is closed at once and its answer
// goes to the upstream (2025: a JSON-RPC response; 2026: kept for the
// retry, which starts once the round is complete). Unknown and answered
// keys are ignored. It reports whether no question is open afterwards.
func (mj *callState) deliver(w *Wire, j *wire.Job, answers []keyVal) bool {
	type post struct{ body []byte }
	var posts []post
	taken := 0
	mj.mu.Lock()
	for _, a := range answers {
		q, ok := mj.open[a.key]
		if !ok {
			continue
		}
		delete(mj.open, a.key)
		mj.answered = true
		taken++
		switch mj.era {
		case era2025:
			posts = append(posts, post{wire.AppendResult(nil, q.upID, a.val)})
		default:
			mj.answers[q.upKey] = append([]byte(nil), a.val...)
			mj.round--
			if mj.round == 0 && mj.roundOK != nil {
				close(mj.roundOK)
				mj.roundOK = nil
			}
		}
	}
	none := len(mj.open) == 0
	mj.mu.Unlock()
	for _, p := range posts {
		w.PostUpstream(j, p.body)
	}
	if none && taken > 0 {
		j.TraceEvent(tracing.EventWorking)
		w.Eng.Mail.Working(w.Root, &j.Job)
	}
	return none
}

// deliverAnswers takes the answers other processes left in the task's
// inbox and delivers them.
func (c *call) deliverAnswers(ctx context.Context, j *wire.Job) {
	w := c.w
	raw := w.Eng.Mail.TakeAnswers(ctx, &j.Job)
	if len(raw) == 0 {
		return
	}
	answers := make([]keyVal, 0, len(raw))
	for _, r := range raw {
		vals, err := jsonx.Members(r, "key", "answer")
		if err != nil || vals[1] == nil {
			continue
		}
		if k, ok := jsonx.UnquoteValue(vals[0]); ok {
			answers = append(answers, keyVal{key: k, val: vals[1]})
		}
	}
	stateOf(j).deliver(w, j, answers)
}

// ask makes q an open question of the task: recorded in the store (so
// any process shows it and can take its answer), input_required, and
// visible to tasks/get.
func (c *call) ask(ctx context.Context, j *wire.Job, q *question) {
	w := c.w
	mj := stateOf(j)
	key := mj.add(q)
	if err := w.Eng.Mail.AddInputRequest(ctx, &j.Job, key, appendInputRequest(nil, q.method, q.params)); err != nil {
		j.Log.Warn().Err(err).Msg("recording an open question in the store failed; only this process shows it and takes its answer")
		mj.mu.Lock()
		q.unstored = true
		mj.mu.Unlock()
	}
	j.TraceEvent(tracing.EventInputRequired, tracing.MethodName.String(q.method))
	w.Eng.Mail.InputRequired(ctx, &j.Job, q.method)
	mj.askedOnce.Do(func() { close(mj.asked) })
}

// relayQuestion handles a request a 2025 upstream sends during a task's
// call: a question of a type the creating request declared becomes an open
// question of the task; any other is answered with an error at once.
func (c *call) relayQuestion(ctx context.Context, j *wire.Job, env *wire.Envelope, msg []byte) {
	w := c.w
	if !stateOf(j).declares(env.Method) {
		w.PostUpstream(j, wire.AppendError(nil, env.ID, wire.CodeMethodNotFound,
			"taskgate: the client of this task did not declare support for "+env.Method))
		return
	}
	params := []byte("{}")
	if env.Params != nil {
		params = append([]byte(nil), env.Params...)
	}
	c.ask(ctx, j, &question{method: env.Method, params: params, upID: append([]byte(nil), env.ID...)})
}

// maxRounds bounds the input rounds of one call to a 2026 upstream.
const maxRounds = 32

// runCall runs the upstream call of a task created on the 2026 wire.
// For a 2026 upstream an InputRequiredResult is not the end: its questions
// become the task's, and the call is made again with the answers.
func (c *call) runCall(ctx context.Context, j *wire.Job) engine.Result {
	w := c.w
	mj := stateOf(j)
	defer mj.release()
	if mj.era == era2025 {
		return w.CallUpstreamOnce(ctx, j)
	}
	for round := 0; ; round++ {
		res := w.CallUpstreamOnce(ctx, j)
		if res.Outcome.Kind != taskstore.OutcomeResult || !isInputRequired(res.Outcome.Raw) {
			return res
		}
		if round >= maxRounds {
			return wire.InternalFailure("upstream asked for input more than %d times in one call", maxRounds)
		}
		vals, err := jsonx.Members(res.Outcome.Raw, "inputRequests", "requestState")
		if err != nil || !isObject(vals[0]) {
			return wire.InternalFailure("upstream answered input_required without an inputRequests object")
		}
		reqs, err := splitObject(vals[0])
		if err != nil || len(reqs) == 0 {
			return wire.InternalFailure("upstream answered input_required without questions")
		}
		state, _ := jsonx.UnquoteValue(vals[1])
		ok := make(chan struct{})
		mj.mu.Lock()
		mj.round, mj.answers, mj.state, mj.roundOK = len(reqs), make(map[string][]byte, len(reqs)), state, ok
		mj.mu.Unlock()
		for _, r := range reqs {
			qv, err := jsonx.Members(r.val, "method", "params")
			method, _ := jsonx.UnquoteValue(qv[0])
			if err != nil || !mj.declares(method) {
				return wire.InternalFailure("upstream asked for %q, which the client of this task did not declare", method)
			}
			params := qv[1]
			if params == nil {
				params = []byte("{}")
			}
			c.ask(ctx, j, &question{method: method, params: append([]byte(nil), params...), upKey: r.key})
		}
		select {
		case <-ok:
		case <-ctx.Done():
			return engine.Result{}
		}
		body, err := mj.retryParams()
		if err != nil {
			return wire.InternalFailure("building the retry with the client's answers failed: %v", err)
		}
		j.Req.SetBody(appendCallBody(nil, j.Task.UpstreamID, body))
	}
}

// retryParams returns the call's params with the current round's answers
// and the upstream's requestState.
func (mj *callState) retryParams() ([]byte, error) {
	mj.mu.Lock()
	defer mj.mu.Unlock()
	resp := []byte{'{'}
	n := 0
	for k, v := range mj.answers {
		if n > 0 {
			resp = append(resp, ',')
		}
		n++
		resp = wire.AppendJSONString(resp, k)
		resp = append(resp, ':')
		resp = append(resp, v...)
	}
	resp = append(resp, '}')
	out, err := jsonx.SetMember(mj.params, "inputResponses", resp)
	if err != nil || mj.state == "" {
		return out, err
	}
	return jsonx.SetMember(out, "requestState", wire.AppendJSONString(nil, mj.state))
}

// isInputRequired reports whether a result is an InputRequiredResult.
func isInputRequired(result []byte) bool {
	vals, err := jsonx.Members(result, "resultType")
	return err == nil && string(vals[0]) == `"input_required"`
}

var errNoBridgeSession = errors.New("no upstream session for the bridged 2026 client")

// bridgeDeadline bounds how long one bridged request may wait.
const bridgeDeadline = 5 * time.Minute
