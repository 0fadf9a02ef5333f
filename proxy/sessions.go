package proxy

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/wire"
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
func (i *ident) credential(hdr *fasthttp.RequestHeader) string {
	if a := hdr.Peek(fasthttp.HeaderAuthorization); len(a) > 0 {
		return "a" + i.keyedHash("authorization", a)
	}
	return credNone
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
func (i *ident) bindSession(log *zerolog.Logger, sid, cred string) {
	now := time.Now()
	i.bindings.put(sid, binding{cred: cred, checked: now, refreshed: now, logID: i.hashShort([]byte(sid))})
	if err := i.store.BindSession(i.root, i.sessionKey([]byte(sid)), cred, sessionBindTTL); err != nil {
		log.Warn().Err(err).Msg("recording the session's owner failed; only this replica enforces it")
	}
}

// sessionAllowed checks a request that carries a session id against the
// session's binding. It answers 404 (and reports false) for a session
// bound to another credential or ended by its client; unbound sessions
// (not opened through taskgate) pass. While the store is unreachable a
// session this replica has not seen passes, except a DELETE, which gets
// 503: ending a session is never done unchecked.
func (i *ident) sessionAllowed(rc *fasthttp.RequestCtx, info *wire.Info, sid []byte) bool {
	now := time.Now()
	b, ok := i.bindings.get(sid)
	if !ok || now.Sub(b.checked) > sessionRecheck {
		fresh, err := i.loadBinding(sid, b, ok, now)
		switch {
		case err == nil:
			b = fresh
		case ok:
			// Keep the cached view.
		case rc.IsDelete():
			info.Outcome = "store_unavailable"
			wire.HTTPError(rc, fasthttp.StatusServiceUnavailable, nil, wire.CodeInternalError,
				"taskgate: task store unavailable; cannot check who owns the session")
			return false
		default:
			return true
		}
	}
	info.SessionLog = b.logID
	if b.cred == "" && !b.closing {
		return true
	}
	if b.closing || !i.credMatches(&rc.Request.Header, b.cred) {
		info.Outcome = "session_not_found"
		wire.HTTPError(rc, fasthttp.StatusNotFound, nil, wire.CodeInvalidRequest, msgSessionNotFound)
		return false
	}
	return true
}

// credMatches reports whether the request carries credential cred.
func (i *ident) credMatches(hdr *fasthttp.RequestHeader, cred string) bool {
	a := hdr.Peek(fasthttp.HeaderAuthorization)
	if len(a) == 0 {
		return cred == credNone
	}
	if len(cred) < 2 || cred[0] != 'a' {
		return false
	}
	sum := i.keyedHashHex("authorization", a)
	return string(sum[:]) == cred[1:]
}

// loadBinding reads the session's record and caches it; a binding of this
// replica's that is due is extended on the way.
func (i *ident) loadBinding(sid []byte, prev binding, had bool, now time.Time) (binding, error) {
	if now.UnixNano() < i.storeDownUntil.Load() {
		return binding{}, taskstore.ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(i.root, min(i.storeTimeout, versionLookupTimeout))
	defer cancel()
	key := i.sessionKey(sid)
	rec, err := i.store.Session(ctx, key)
	b := binding{checked: now, refreshed: prev.refreshed, logID: prev.logID}
	if b.logID == "" {
		b.logID = i.hashShort(sid)
	}
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		if had && prev.cred != "" && !prev.closing {
			// This replica bound it (the store missed the write, or the
			// record expired while in use here): keep enforcing it.
			b.cred = prev.cred
		}
	case err != nil:
		i.storeDownUntil.Store(now.Add(storeRetryAfter).UnixNano())
		i.log.Warn().Err(err).Msg("reading the session's owner failed")
		return binding{}, err
	default:
		b.cred, b.closing = rec.Credential, rec.Closing
	}
	if b.cred != "" && !b.closing && now.Sub(b.refreshed) > sessionRefresh {
		if err := i.store.BindSession(ctx, key, b.cred, sessionBindTTL); err == nil {
			b.refreshed = now
		}
	}
	i.bindings.put(string(sid), b)
	return b, nil
}

// deleteSession serves a client's DELETE of its session (already checked
// by sessionAllowed). It reports false when the DELETE is to be forwarded:
// no task call runs on the session. Else the session is marked closing and
// taskgate answers 204 itself; the last call's runner ends the session
// upstream (the engine, then closeUpstreamSession).
func (h *Handler) deleteSession(rc *fasthttp.RequestCtx, info *wire.Info) bool {
	sid := rc.Request.Header.Peek(wire.HeaderSessionID)
	if len(sid) == 0 || h.f.Native.Load() {
		return false
	}
	if len(rc.Request.Header.Peek(fasthttp.HeaderAuthorization)) == 0 {
		// Without Authorization the session owns its tasks: nobody can
		// read them once it ended, so they are cancelled, not kept.
		owner, _ := h.id.owner(&rc.Request.Header)
		h.eng.CancelOwnerTasks(owner, msgSessionEnded)
		return false
	}
	deferred, err := h.eng.EndSession(h.root, h.f.SessionKey(sid))
	if err != nil {
		h.log.Warn().Err(err).Msg("ending the session in the store failed; its running tasks would fail: refusing the DELETE")
		info.Outcome = "store_unavailable"
		wire.HTTPError(rc, fasthttp.StatusServiceUnavailable, nil, wire.CodeInternalError, wire.MsgStoreUnavailable)
		return true
	}
	if b, ok := h.id.bindings.get(sid); ok || deferred {
		b.closing = deferred
		if !deferred {
			b = binding{} // the record is gone: read it again next time
		}
		b.checked = time.Now()
		h.id.bindings.put(string(sid), b)
	}
	if !deferred {
		return false
	}
	info.Outcome = "session_close_deferred"
	h.log.Info().Str(wire.LogSession, h.id.hashShort(sid)).
		Msg("session ended by the client; it stays open upstream until its running tasks end")
	rc.SetStatusCode(fasthttp.StatusNoContent)
	return true
}

// msgSessionEnded is the statusMessage of a task cancelled because the
// session that owned it ended.
const msgSessionEnded = "cancelled: the client ended the MCP session that owned this task " +
	"(without an Authorization header a task belongs to its session)"

// clear forgets every cached binding.
func (c *bindingCache) clear() {
	c.mu.Lock()
	c.cur, c.old = nil, nil
	c.mu.Unlock()
}
