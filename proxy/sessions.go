package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/capability/jsonx"
	"github.com/taskgate/taskgate/taskstore"
)

// Sessions and their tasks.
//
// A task belongs to its owner, not to the MCP session that created it: it
// keeps running when the client ends that session and its result stays
// readable from any later session of the same owner.
//
//   - Owner binding. When the upstream answers an initialize with an
//     Mcp-Session-Id, taskgate records in the store which credential (a
//     keyed hash of the Authorization header, or "none") opened the
//     session. A later request that carries the session id with another
//     credential is answered 404, as for an unknown session, and never
//     reaches the upstream (POST, GET and DELETE alike). Bindings are
//     cached in memory; they never change.
//   - Deferred close. Each task call running on an upstream session is
//     recorded on the session's record. A client's DELETE of a session on
//     which calls still run is answered 204 by taskgate itself; the session
//     is marked closing (the client's later requests on it get 404) and the
//     runner of the last call ends it upstream with its own DELETE. The
//     wait is bounded by the calls' deadlines: the policy timeout and the
//     task's ttl. A DELETE of a session without running calls is forwarded.
//   - Owner routing. The messages of a task's call (progress, questions)
//     are queued for the task's owner, not for its session: a tasks/result
//     stream of the task, or any GET stream of any session of the owner,
//     on any replica, delivers them. taskgate renames each question's
//     JSON-RPC id to one of its own (questionID), so that an answer POSTed
//     on any session of the owner is matched by owner and id alone and the
//     upstream still receives the id it sent.
//   - Redelivery. A stream that carried a question and ends while the
//     question is still unanswered puts it back in the task's queue, so the
//     next stream of the owner that can carry it delivers it again. The
//     first answer wins; later ones are ignored.

// sessionBindTTL is how long a session's binding lives without use; each
// replica extends it at most once per sessionRefresh while the session is
// in use.
const (
	sessionBindTTL = 7 * 24 * time.Hour
	sessionRefresh = time.Hour
	// sessionRecheck is how long a replica trusts its cached view of a
	// session record before reading it again (to learn a close made
	// through another replica).
	sessionRecheck = time.Minute
)

// msgSessionNotFound is the body of the 404 for a foreign or ended session.
const msgSessionNotFound = "taskgate: session not found"

// credNone is the credential of a session opened without Authorization.
const credNone = "-"

// credential returns the credential a request carries: "a" and the keyed
// hash of its Authorization header (the owner of its tasks), or credNone.
func (h *Handler) credential(hdr *fasthttp.RequestHeader) string {
	if a := hdr.Peek(fasthttp.HeaderAuthorization); len(a) > 0 {
		return "a" + h.keyedHash("authorization", a)
	}
	return credNone
}

// streamGroup is the store's name of the streams that may carry owner's
// task messages: every session of the owner. Anonymous callers (neither
// Authorization nor a session) have none.
func streamGroup(owner string) string {
	if owner == ownerAnonymous {
		return ""
	}
	return owner
}

// binding is a replica's cached view of a session record.
type binding struct {
	cred      string // "" = unbound (no record, or no credential recorded)
	closing   bool
	checked   time.Time // when it was read from the store
	refreshed time.Time // when this replica last extended the binding
	// logID is the session id as logs show it (hashShort), kept here so
	// that a request's log line costs no keyed hash ("": not yet known).
	logID string
}

// bindingCache maps session ids to bindings: two generations, so hot
// sessions survive and memory stays bounded. Safe for concurrent use.
type bindingCache struct {
	mu       sync.RWMutex
	cur, old map[string]binding
	max      int
}

func (c *bindingCache) get(sid []byte) (binding, bool) {
	c.mu.RLock()
	b, ok := c.cur[string(sid)]
	if !ok {
		b, ok = c.old[string(sid)]
	}
	c.mu.RUnlock()
	return b, ok
}

func (c *bindingCache) put(sid string, b binding) {
	c.mu.Lock()
	if c.cur == nil {
		c.cur = make(map[string]binding)
	}
	if c.max > 0 && len(c.cur) >= c.max {
		c.old, c.cur = c.cur, make(map[string]binding, c.max)
	}
	c.cur[sid] = b
	c.mu.Unlock()
}

// bindSession records that the session the upstream just opened belongs to
// cred. It runs before the client sees the session id. When the store
// cannot record it, only this replica knows the binding (logged to log,
// the initialize request's logger).
func (h *Handler) bindSession(log *zerolog.Logger, sid, cred string) {
	now := time.Now()
	h.bindings.put(sid, binding{cred: cred, checked: now, refreshed: now, logID: h.hashShort([]byte(sid))})
	if err := h.store.BindSession(h.root, h.sessionKey([]byte(sid)), cred, sessionBindTTL); err != nil {
		log.Warn().Err(err).Msg("recording the session's owner failed; only this replica enforces it")
	}
}

// sessionAllowed checks a request that carries a session id against the
// session's binding. It answers 404 (and reports false) for a session
// bound to another credential or ended by its client; unbound sessions
// (not opened through taskgate) pass. While the store is unreachable a
// session this replica has not seen passes, except a DELETE, which gets
// 503: ending a session is never done unchecked.
func (h *Handler) sessionAllowed(rc *fasthttp.RequestCtx, info *reqInfo, sid []byte) bool {
	now := time.Now()
	b, ok := h.bindings.get(sid)
	if !ok || now.Sub(b.checked) > sessionRecheck {
		fresh, err := h.loadBinding(sid, b, ok, now)
		switch {
		case err == nil:
			b = fresh
		case ok:
			// Keep the cached view.
		case rc.IsDelete():
			info.outcome = "store_unavailable"
			h.httpRPCError(rc, fasthttp.StatusServiceUnavailable, nil, codeInternalError,
				"taskgate: task store unavailable; cannot check who owns the session")
			return false
		default:
			return true
		}
	}
	info.sessionLog = b.logID
	if b.cred == "" && !b.closing {
		return true
	}
	if b.closing || !h.credMatches(&rc.Request.Header, b.cred) {
		info.outcome = "session_not_found"
		h.httpRPCError(rc, fasthttp.StatusNotFound, nil, codeInvalidRequest, msgSessionNotFound)
		return false
	}
	return true
}

// credMatches reports whether the request carries credential cred.
func (h *Handler) credMatches(hdr *fasthttp.RequestHeader, cred string) bool {
	a := hdr.Peek(fasthttp.HeaderAuthorization)
	if len(a) == 0 {
		return cred == credNone
	}
	if len(cred) < 2 || cred[0] != 'a' {
		return false
	}
	sum := h.keyedHashHex("authorization", a)
	return string(sum[:]) == cred[1:]
}

// loadBinding reads the session's record and caches it; a binding of this
// replica's that is due is extended on the way.
func (h *Handler) loadBinding(sid []byte, prev binding, had bool, now time.Time) (binding, error) {
	if now.UnixNano() < h.storeDownUntil.Load() {
		return binding{}, taskstore.ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(h.root, min(h.cfg.StoreTimeout, versionLookupTimeout))
	defer cancel()
	key := h.sessionKey(sid)
	rec, err := h.store.Session(ctx, key)
	b := binding{checked: now, refreshed: prev.refreshed, logID: prev.logID}
	if b.logID == "" {
		b.logID = h.hashShort(sid)
	}
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		if had && prev.cred != "" && !prev.closing {
			// This replica bound it (the store missed the write, or the
			// record expired while in use here): keep enforcing it.
			b.cred = prev.cred
		}
	case err != nil:
		h.storeDownUntil.Store(now.Add(storeRetryAfter).UnixNano())
		h.log.Warn().Err(err).Msg("reading the session's owner failed")
		return binding{}, err
	default:
		b.cred, b.closing = rec.Credential, rec.Closing
	}
	if b.cred != "" && !b.closing && now.Sub(b.refreshed) > sessionRefresh {
		if err := h.store.BindSession(ctx, key, b.cred, sessionBindTTL); err == nil {
			b.refreshed = now
		}
	}
	h.bindings.put(string(sid), b)
	return b, nil
}

// deleteSession serves a client's DELETE of its session (already checked
// by sessionAllowed). It reports false when the DELETE is to be forwarded:
// no task call runs on the session. Else the session is marked closing and
// taskgate answers 204 itself; the last call's runner ends the session
// upstream (the engine, then closeUpstreamSession).
func (h *Handler) deleteSession(rc *fasthttp.RequestCtx, info *reqInfo) bool {
	sid := rc.Request.Header.Peek(headerSessionID)
	if len(sid) == 0 || h.native.Load() {
		return false
	}
	if len(rc.Request.Header.Peek(fasthttp.HeaderAuthorization)) == 0 {
		// Without Authorization the session owns its tasks: nobody can
		// read them once it ended, so they are cancelled, not kept.
		owner, _ := h.owner(&rc.Request.Header)
		h.eng.CancelOwnerTasks(owner, msgSessionEnded)
		return false
	}
	deferred, err := h.eng.EndSession(h.root, h.sessionKey(sid))
	if err != nil {
		h.log.Warn().Err(err).Msg("ending the session in the store failed; its running tasks would fail: refusing the DELETE")
		info.outcome = "store_unavailable"
		h.httpRPCError(rc, fasthttp.StatusServiceUnavailable, nil, codeInternalError, msgStoreUnavailable)
		return true
	}
	if b, ok := h.bindings.get(sid); ok || deferred {
		b.closing = deferred
		if !deferred {
			b = binding{} // the record is gone: read it again next time
		}
		b.checked = time.Now()
		h.bindings.put(string(sid), b)
	}
	if !deferred {
		return false
	}
	info.outcome = "session_close_deferred"
	h.log.Info().Str(logSession, h.hashShort(sid)).
		Msg("session ended by the client; it stays open upstream until its running tasks end")
	rc.SetStatusCode(fasthttp.StatusNoContent)
	return true
}

// msgSessionEnded is the statusMessage of a task cancelled because the
// session that owned it ended.
const msgSessionEnded = "cancelled: the client ended the MCP session that owned this task " +
	"(without an Authorization header a task belongs to its session)"

// closeUpstreamSession ends j's upstream session with a DELETE: j was the
// last call running on a session its client had ended (the engine's
// endSessionTask found that).
func (h *Handler) closeUpstreamSession(j *job) {
	var hdr fasthttp.RequestHeader
	status, err := 0, j.header(&hdr)
	if err == nil {
		status, err = h.up.Delete(&hdr, 10*time.Second)
	}
	if err != nil || status >= 300 && status != fasthttp.StatusNotFound {
		j.Log.Warn().Err(err).Int(logStatus, status).Msg("ending the session upstream after its last task failed")
		return
	}
	j.Log.Info().Msg("session ended upstream after its last running task")
}

// Question ids. A question (a request the upstream sends during a task's
// call) reaches the client under an id taskgate issues: the prefix,
// 128 random bits, then the upstream's own id (raw JSON, base64url), so
// that whoever receives the answer can restore the upstream's id.
const questionIDPrefix = upstreamIDPrefix + "q-"

// questionID returns the JSON string id under which the client sees the
// upstream request id upID.
func questionID(upID []byte) ([]byte, error) {
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	out := make([]byte, 0, 2+len(questionIDPrefix)+33+base64.RawURLEncoding.EncodedLen(len(upID)))
	out = append(out, '"')
	out = append(out, questionIDPrefix...)
	out = hex.AppendEncode(out, nonce[:])
	out = append(out, '.')
	out = base64.RawURLEncoding.AppendEncode(out, upID)
	return append(out, '"'), nil
}

// upstreamIDOf returns the upstream id inside a question id (raw JSON);
// ok is false when id is not one.
func upstreamIDOf(id []byte) ([]byte, bool) {
	s, ok := jsonx.UnquoteValue(id)
	if !ok {
		return nil, false
	}
	rest, found := strings.CutPrefix(s, questionIDPrefix)
	if !found {
		return nil, false
	}
	_, enc, found := strings.Cut(rest, ".")
	if !found {
		return nil, false
	}
	up, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(up) == 0 {
		return nil, false
	}
	// One whole JSON value that is a valid id, or the answer would not be
	// JSON any more.
	sc := jsonx.Scanner{B: up}
	if raw, err := sc.Value(); err != nil || len(raw) != len(up) || !validID(up) {
		return nil, false
	}
	return up, true
}

// toUpstreamAnswer gives a client's answer to a question the upstream's id
// back. A message without a question id is returned as is.
func toUpstreamAnswer(msg []byte) []byte {
	vals, err := jsonx.Members(msg, "id")
	if err != nil || vals[0] == nil {
		return msg
	}
	up, ok := upstreamIDOf(vals[0])
	if !ok {
		return msg
	}
	if out, err := jsonx.SetMember(msg, "id", up); err == nil {
		return out
	}
	return msg
}

// asQuestion returns the upstream request msg as the client sees it: with
// related-task _meta and a question id. It returns the question id too.
func asQuestion(msg []byte, upID []byte, taskID string) (out, qid []byte, err error) {
	if out, err = withRelatedTaskParams(msg, taskID); err != nil {
		return nil, nil, err
	}
	if qid, err = questionID(upID); err != nil {
		return nil, nil, err
	}
	if out, err = jsonx.SetMember(out, "id", qid); err != nil {
		return nil, nil, err
	}
	return out, qid, nil
}

// openQuestion is a question a stream delivered, remembered until the
// stream ends (redeliverOpen).
type openQuestion struct {
	taskID string
	qid    string // canonical question id
	msg    []byte
}

// noteQuestion appends msg to qs when it is a question (a request with a
// question id) of taskID.
func noteQuestion(qs []openQuestion, taskID string, msg []byte) []openQuestion {
	env, err := parseEnvelope(msg)
	if err != nil || !env.isRequest() || !bytes.HasPrefix(env.id, []byte(`"`+questionIDPrefix)) {
		return qs
	}
	return append(qs, openQuestion{taskID: taskID, qid: canonicalID(env.id), msg: msg})
}

// redeliverOpen puts the questions a stream delivered and nobody answered
// back in their tasks' queues, for the owner's next stream (the stream is
// gone). A question whose task ended is dropped by the store.
func (h *Handler) redeliverOpen(owner string, qs []openQuestion) {
	group := streamGroup(owner)
	for _, q := range qs {
		if h.eng.Mail.Redeliver(owner, group, q.taskID, q.qid, q.msg) {
			h.log.Debug().Str(logTaskID, q.taskID).Msg("stream ended before its question was answered; queued again")
		}
	}
}
