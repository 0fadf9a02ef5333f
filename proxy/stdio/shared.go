package stdio

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Shared mode (Config.Shared) runs one child for every client session, for
// stateless servers whose processes are costly. Sessions are views of the
// one child; what keeps their answers apart:
//
//   - every request is written to the child with a fresh id of taskgate's
//     ("tg-" and a counter) and, when it asks for progress, a fresh
//     progressToken; the call records the client's originals;
//   - the child's response is delivered only to the call with that id,
//     with the client's id put back; its notifications/progress only to the
//     call with that token, with the client's token put back;
//   - nothing else the child writes reaches any session: its requests
//     (elicitation, sampling, roots, ping) are answered with an error, its
//     other notifications are dropped, since nothing says whose they are.
//
// The child is initialized once, by the first session's initialize; later
// sessions get that answer (with their own id) and their initialize and
// notifications/initialized never reach the child. A session's
// notifications/cancelled is written with taskgate's id of the call it
// names; responses from the client are dropped (the child asked nothing).

// view is one client session of the shared child.
type view struct {
	sid, label string
	ids        map[string]string // canonical client id -> canonical bridge id, calls in flight
	last       time.Time
	ended      chan struct{}
}

// sharedState is the shared child and its sessions; mu guards all of it
// and serializes starting the child.
type sharedState struct {
	mu     sync.Mutex
	child  *session
	result json.RawMessage // the child's initialize result
	views  map[string]*view
	seq    uint64
}

// maxViews bounds the sessions of a shared child.
const maxViews = 4096

func (s *Server) postShared(rc *fasthttp.RequestCtx, sid []byte, m message) {
	body := rc.PostBody()
	if len(sid) == 0 {
		if m.method != methodInitialize || !m.isRequest() {
			writeError(rc, fasthttp.StatusBadRequest, m.id, codeInvalidRequest, "taskgate: a request without Mcp-Session-Id must be initialize")
			return
		}
		s.initializeShared(rc, m, body)
		return
	}
	s.sh.mu.Lock()
	v := s.sh.views[string(sid)]
	child := s.sh.child
	if v != nil {
		v.last = time.Now()
	}
	s.sh.mu.Unlock()
	if v == nil || child == nil {
		writeError(rc, fasthttp.StatusNotFound, m.id, codeInvalidRequest, "taskgate: session not found (it ended); initialize again")
		return
	}
	switch {
	case m.isResponse(), m.method == "notifications/initialized":
		rc.SetStatusCode(fasthttp.StatusAccepted)
		return
	case !m.isRequest():
		line := body
		if m.method == methodCancelled {
			s.sh.mu.Lock()
			bridge := v.ids[cancelledID(m.params)]
			s.sh.mu.Unlock()
			if bridge == "" {
				rc.SetStatusCode(fasthttp.StatusAccepted) // nothing of this session in flight
				return
			}
			var err error
			if line, err = withParam(body, "requestId", bridgeIDJSON(strings.TrimPrefix(bridge, "s:"))); err != nil {
				writeError(rc, fasthttp.StatusBadRequest, nil, codeInvalidRequest, "taskgate: "+err.Error())
				return
			}
			child.cancelCall(bridge)
		}
		if err := child.send(line); err != nil {
			writeError(rc, fasthttp.StatusBadGateway, nil, codeInternalError, "taskgate: writing to the stdio MCP server failed: "+err.Error())
			return
		}
		rc.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	c, line, err := s.startSharedCall(child, v, m, body)
	if err != nil {
		status := fasthttp.StatusBadRequest
		if errors.Is(err, errSessionEnded) {
			status = fasthttp.StatusNotFound
		}
		writeError(rc, status, m.id, codeInvalidRequest, "taskgate: "+err.Error())
		return
	}
	if err := child.send(line); err != nil {
		child.endCall(c)
		writeError(rc, fasthttp.StatusBadGateway, m.id, codeInternalError, "taskgate: writing to the stdio MCP server failed: "+err.Error())
		return
	}
	s.answer(rc, child, c)
}

// startSharedCall registers a request of view v under a fresh bridge id
// (and progress token) and returns the line to write to the child.
func (s *Server) startSharedCall(child *session, v *view, m message, body []byte) (*call, []byte, error) {
	s.sh.mu.Lock()
	s.sh.seq++
	n := s.sh.seq
	orig := canonicalID(m.id)
	if _, dup := v.ids[orig]; dup {
		s.sh.mu.Unlock()
		return nil, nil, errDuplicateID
	}
	s.sh.mu.Unlock()
	bid := "tg-" + strconv.FormatUint(n, 10)
	c := &call{raw: append(json.RawMessage(nil), m.id...), id: "s:" + bid, q: newQueue(s.cfg.QueueMax), view: v}
	line, err := withMember(body, "id", bridgeIDJSON(bid))
	if err != nil {
		return nil, nil, err
	}
	if tok := rawProgressToken(m.params); tok != nil {
		c.origToken = tok
		c.token = "s:" + bid + "-progress"
		if line, err = withProgressToken(line, bridgeIDJSON(bid+"-progress")); err != nil {
			return nil, nil, err
		}
	}
	child.mu.Lock()
	if child.state != running {
		child.mu.Unlock()
		return nil, nil, errSessionEnded
	}
	child.calls[c.id] = c
	if c.token != "" {
		child.tokens[c.token] = c
	}
	child.last = time.Now()
	child.mu.Unlock()
	s.sh.mu.Lock()
	v.ids[orig] = c.id
	s.sh.mu.Unlock()
	return c, line, nil
}

// sharedCallDone forgets an ended call in its view.
func (s *Server) sharedCallDone(c *call) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if id := canonicalID(c.raw); c.view.ids[id] == c.id {
		delete(c.view.ids, id)
	}
	c.view.last = time.Now()
}

// initializeShared makes a session of the shared child, starting and
// initializing the child first when there is none.
func (s *Server) initializeShared(rc *fasthttp.RequestCtx, m message, body []byte) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if len(s.sh.views) >= maxViews {
		rc.Response.Header.Set("Retry-After", "5")
		writeError(rc, fasthttp.StatusServiceUnavailable, m.id, codeServerGone,
			fmt.Sprintf("taskgate: the shared stdio MCP server has %d sessions, its limit; try again later", maxViews))
		return
	}
	if c := s.sh.child; c != nil && c.isEnded() {
		s.endViews() // the child ended; its sharedEnded may not have run yet
	}
	if s.sh.child == nil {
		status, msg := s.startShared(m, body)
		if status != 0 {
			writeError(rc, status, m.id, codeServerGone, msg)
			return
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	v := &view{sid: hex.EncodeToString(b[:]), ids: map[string]string{}, last: time.Now(), ended: make(chan struct{})}
	v.label = (*s.label.Load())([]byte(v.sid))
	s.sh.views[v.sid] = v
	rc.Response.Header.Set(headerSessionID, v.sid)
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("application/json")
	out := append([]byte(`{"jsonrpc":"2.0","id":`), m.id...)
	out = append(append(append(out, `,"result":`...), s.sh.result...), '}')
	rc.SetBody(out)
}

// startShared starts the shared child and runs its initialize with the
// first client's request; s.sh.mu is held. It returns an HTTP status and
// message on failure.
func (s *Server) startShared(m message, body []byte) (int, string) {
	child, err := s.newSession()
	switch {
	case errors.Is(err, errClosed):
		return fasthttp.StatusServiceUnavailable, "taskgate: shutting down"
	case err != nil:
		s.log.Error().Err(err).Msg("stdio server did not start")
		return fasthttp.StatusBadGateway, "taskgate: the stdio MCP server did not start: " + err.Error()
	}
	child.shared = true
	line, err := withMember(body, "id", bridgeIDJSON("tg-init"))
	if err != nil {
		child.end("", "")
		return fasthttp.StatusBadRequest, "taskgate: " + err.Error()
	}
	c := &call{raw: json.RawMessage(`"tg-init"`), id: "s:tg-init", q: newQueue(s.cfg.QueueMax)}
	child.mu.Lock()
	child.calls[c.id] = c
	child.mu.Unlock()
	if err := child.send(line); err != nil {
		child.end("writing initialize failed", "")
		return fasthttp.StatusBadGateway, "taskgate: writing to the stdio MCP server failed: " + err.Error()
	}
	timer := time.NewTimer(s.cfg.InitTimeout)
	defer timer.Stop()
	for {
		msgs, end := c.q.take(nil)
		if end {
			var r struct {
				Result json.RawMessage `json:"result"`
				Error  *struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if len(msgs) == 0 || json.Unmarshal(msgs[len(msgs)-1], &r) != nil || r.Result == nil {
				msg := "taskgate: the stdio MCP server refused initialize"
				if r.Error != nil {
					msg += ": " + r.Error.Message
				}
				child.end("the stdio server refused initialize", "")
				return fasthttp.StatusBadGateway, msg
			}
			s.sh.child, s.sh.result = child, r.Result
			_ = child.send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
			return 0, ""
		}
		select {
		case <-c.q.wake:
		case <-timer.C:
			child.mu.Lock()
			child.initTimedOut = true
			child.mu.Unlock()
			child.end("initialize timed out", "")
			go child.child.kill()
			return fasthttp.StatusGatewayTimeout, fmt.Sprintf("taskgate: the stdio MCP server did not answer initialize within %s; it was stopped", s.cfg.InitTimeout)
		}
	}
}

// sharedEnded ends every session of the shared child once it ended.
func (s *Server) sharedEnded(child *session) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if s.sh.child == child {
		s.endViews()
	}
}

// endViews ends every session of the shared child and forgets the child;
// s.sh.mu is held.
func (s *Server) endViews() {
	for _, v := range s.sh.views {
		close(v.ended)
	}
	clear(s.sh.views)
	s.sh.child, s.sh.result = nil, nil
}

// deleteShared ends one session of the shared child; its calls in flight
// still get their answers.
func (s *Server) deleteShared(rc *fasthttp.RequestCtx, sid []byte) {
	s.sh.mu.Lock()
	v := s.sh.views[string(sid)]
	if v != nil {
		delete(s.sh.views, v.sid)
		close(v.ended)
	}
	s.sh.mu.Unlock()
	if v == nil {
		writeError(rc, fasthttp.StatusNotFound, nil, codeInvalidRequest, "taskgate: session not found")
		return
	}
	rc.SetStatusCode(fasthttp.StatusNoContent)
}

// getShared serves a GET stream of a shared session: keep-alive comments
// only (nothing the child writes on its own is routed to a session).
func (s *Server) getShared(rc *fasthttp.RequestCtx, sid []byte) {
	s.sh.mu.Lock()
	v := s.sh.views[string(sid)]
	s.sh.mu.Unlock()
	if v == nil {
		writeError(rc, fasthttp.StatusNotFound, nil, codeInvalidRequest, "taskgate: session not found (it ended); initialize again")
		return
	}
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.Response.Header.SetContentType("text/event-stream")
	rc.Response.Header.Set("Cache-Control", "no-cache")
	rc.Response.ImmediateHeaderFlush = true
	q, keepAlive, ended := newQueue(1), s.cfg.KeepAlive, v.ended
	// The writer runs after getShared returned: it uses q and ended only,
	// never rc or its Request, Response and headers, and w only until it
	// returns.
	rc.SetBodyStreamWriter(func(w *bufio.Writer) { writeStream(w, q, keepAlive, ended) })
}

// reapViews ends shared sessions idle for longer than IdleTimeout.
func (s *Server) reapViews(now time.Time) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	for sid, v := range s.sh.views {
		if len(v.ids) == 0 && now.Sub(v.last) > s.cfg.IdleTimeout {
			delete(s.sh.views, sid)
			close(v.ended)
		}
	}
}

// routeShared routes one message of the shared child (see the comment at
// the top of this file).
func (s *session) routeShared(m message, msg []byte) {
	s.mu.Lock()
	var target *call
	switch {
	case m.isResponse():
		if target = s.calls[canonicalID(m.id)]; target != nil {
			s.forget(target)
		}
	case m.method == methodProgress:
		if tok := notificationToken(m.params); tok != "" {
			target = s.tokens[tok]
		}
	}
	s.mu.Unlock()
	switch {
	case target != nil && m.isResponse():
		out := msg
		if target.view != nil { // the initialize call keeps taskgate's id
			var err error
			if out, err = withMember(msg, "id", target.raw); err != nil {
				out = appendError(nil, target.raw, codeInternalError, "taskgate: malformed answer from the stdio MCP server")
			}
		}
		target.q.push(out, false, true)
		s.endCall(target)
	case target != nil:
		if out, err := withParam(msg, "progressToken", target.origToken); err == nil {
			target.q.push(out, true, false)
		}
	case m.isRequest():
		_ = s.child.send(appendError(nil, m.id, -32601, "taskgate: the clients of a shared stdio server take no requests"))
	default:
		s.log.Debug().Str("rpc_method", m.method).Msg("shared stdio server message that belongs to no call; dropped")
	}
}

// bridgeIDJSON is a bridge id as a JSON string.
func bridgeIDJSON(id string) json.RawMessage { return json.RawMessage(strconv.Quote(id)) }

// rawProgressToken returns params._meta.progressToken as sent, or nil.
func rawProgressToken(params json.RawMessage) json.RawMessage {
	if !bytes.Contains(params, []byte(`"progressToken"`)) {
		return nil
	}
	var p struct {
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || len(p.Meta.ProgressToken) == 0 || string(p.Meta.ProgressToken) == "null" {
		return nil
	}
	return p.Meta.ProgressToken
}

// withMember returns the JSON object msg with member key set to val.
func withMember(msg []byte, key string, val json.RawMessage) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(msg, &obj); err != nil || obj == nil {
		return nil, errors.New("not a JSON object")
	}
	obj[key] = val
	return marshalRaw(obj)
}

// withParam returns msg with params[key] set to val.
func withParam(msg []byte, key string, val json.RawMessage) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(msg, &obj); err != nil || obj == nil {
		return nil, errors.New("not a JSON object")
	}
	params, err := withMember(orEmpty(obj["params"]), key, val)
	if err != nil {
		return nil, errors.New("params is not an object")
	}
	obj["params"] = params
	return marshalRaw(obj)
}

// withProgressToken returns msg with params._meta.progressToken set.
func withProgressToken(msg []byte, tok json.RawMessage) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(msg, &obj); err != nil || obj == nil {
		return nil, errors.New("not a JSON object")
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(orEmpty(obj["params"]), &params); err != nil || params == nil {
		return nil, errors.New("params is not an object")
	}
	meta, err := withMember(orEmpty(params["_meta"]), "progressToken", tok)
	if err != nil {
		return nil, errors.New("params._meta is not an object")
	}
	params["_meta"] = meta
	if obj["params"], err = marshalRaw(params); err != nil {
		return nil, err
	}
	return marshalRaw(obj)
}

func orEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	return b
}

func marshalRaw(obj map[string]json.RawMessage) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
