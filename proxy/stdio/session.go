package stdio

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// session is one client session and its child process.
//
// Routing of what the child writes (it cannot say which request a message
// belongs to: stdio has no streams):
//   - a response goes to the stream of the request with its id;
//   - notifications/progress goes to the request that set its
//     progressToken;
//   - the child's requests (elicitation, sampling, roots, ping) and
//     notifications/message go to the one request in flight when there is
//     exactly one, else to the session's GET stream: with several in
//     flight there is no telling whose they are, and the GET stream is
//     the MCP place for messages that belong to no request;
//   - every other notification (list_changed, resources/updated, ...)
//     goes to the GET stream.
//
// Whatever stream a request of the child reaches, the client's answer is
// a JSON-RPC response that is written to the child as is: the child
// matches it by its own id, so a message on the "wrong" stream is never
// answered to the wrong place.
type session struct {
	srv   *Server
	sid   string
	label string
	log   zerolog.Logger
	child *child

	mu      sync.Mutex
	calls   map[string]*call // requests in flight by canonical id
	tokens  map[string]*call // the same by canonical progress token
	get     *queue           // messages for the GET stream
	getOpen bool
	last    time.Time // last traffic either way
	state   sessionState
	// initCall is the initialize request until it is answered.
	initCall  *call
	initTimer *time.Timer
	// initTimedOut: the child was killed for not answering initialize.
	initTimedOut bool
	// shared: the one child of shared mode (see shared.go).
	shared bool
	ended  chan struct{} // closed when the session ended
}

type sessionState int

const (
	running  sessionState = iota
	draining              // DELETE seen: ends when the last call does
	ended
)

// call is one client request in flight.
type call struct {
	raw json.RawMessage // the id as the client sent it
	id  string          // canonical (in shared mode: of taskgate's id)
	// view and origToken: in shared mode, the call's session and the
	// progressToken the client sent.
	view      *view
	origToken json.RawMessage
	token     string // canonical progress token, "" without one
	q         *queue
}

// errDuplicateID is returned for a request whose id is already in flight.
var errDuplicateID = errors.New("a request with this id is already in flight in this session")

// errSessionEnded is returned for requests of a session that is ending.
var errSessionEnded = errors.New("session ended")

// startCall registers a client request before it is written to the child.
func (s *session) startCall(m *message) (*call, error) {
	c := &call{raw: append(json.RawMessage(nil), m.id...), id: canonicalID(m.id), token: requestProgressToken(m.params), q: newQueue(s.srv.cfg.QueueMax)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != running {
		return nil, errSessionEnded
	}
	if _, dup := s.calls[c.id]; dup {
		return nil, errDuplicateID
	}
	if c.token != "" {
		if _, dup := s.tokens[c.token]; dup {
			c.token = "" // its progress goes to the GET stream
		} else {
			s.tokens[c.token] = c
		}
	}
	s.calls[c.id] = c
	s.last = time.Now()
	return c, nil
}

// forget removes c from the tables; s.mu is held.
func (s *session) forget(c *call) {
	if s.calls[c.id] == c {
		delete(s.calls, c.id)
	}
	if c.token != "" && s.tokens[c.token] == c {
		delete(s.tokens, c.token)
	}
}

// endCall forgets a call (answered, cancelled, or its caller left).
func (s *session) endCall(c *call) {
	s.mu.Lock()
	s.forget(c)
	s.last = time.Now()
	drained := s.state == draining && len(s.calls) == 0
	s.mu.Unlock()
	c.q.close()
	if c.view != nil {
		s.srv.sharedCallDone(c)
	}
	if drained {
		s.end("the client ended the session and its last call finished", "")
	}
}

// cancelCall ends the stream of the request a client's
// notifications/cancelled names: the server should not answer it.
func (s *session) cancelCall(id string) {
	s.mu.Lock()
	c := s.calls[id]
	s.mu.Unlock()
	if c != nil {
		s.endCall(c)
	}
}

// send writes a client message to the child.
func (s *session) send(line []byte) error {
	s.touch()
	return s.child.send(oneLine(line))
}

func (s *session) touch() {
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
}

// supervise runs the child's readers and closes its pipes once it is gone.
// A process that exited while something it started still holds its output
// open gets StopGrace to finish writing; then taskgate stops reading.
func (s *session) supervise() {
	defer s.srv.wg.Done()
	c, grace := s.child, s.srv.cfg.StopGrace
	readDone, errDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(errDone)
		logStderr(c, s.log, s.srv.cfg.StderrLines)
	}()
	go func() {
		defer close(readDone)
		s.readLoop()
	}()
	select {
	case <-readDone:
	case <-c.exited:
		select {
		case <-readDone:
		case <-time.After(grace):
			_ = c.stdout.Close() // unblocks the reader
			<-readDone
		}
	}
	select {
	case <-errDone:
	case <-time.After(grace):
		_ = c.stderr.Close()
		<-errDone
	}
	c.closeFiles()
}

// readLoop reads the child's output until it ends, then ends the session.
func (s *session) readLoop() {
	r := newLineReader(s.child.stdout, s.srv.cfg.MaxLineSize)
	for {
		line, err := r.next()
		switch {
		case errors.Is(err, errLineTooLong):
			s.tooLong(line)
			continue
		case err != nil:
			s.childGone()
			return
		}
		if len(line) == 0 {
			continue
		}
		s.fromChild(append([]byte(nil), line...))
	}
}

// tooLong handles a dropped over-long line: the call it answers, when its
// id is among the first bytes, fails.
func (s *session) tooLong(prefix []byte) {
	msg := fmt.Sprintf("taskgate: the stdio MCP server's message exceeds the limit of %d bytes", s.srv.cfg.MaxLineSize)
	s.srv.m.dropped.WithLabelValues("too_long").Inc()
	s.log.Warn().Int("limit", s.srv.cfg.MaxLineSize).Msg("stdio server wrote a line over the size limit; dropped")
	id := prefixID(prefix)
	if id == "" {
		return
	}
	s.mu.Lock()
	c := s.calls[id]
	s.mu.Unlock()
	if c != nil {
		c.q.fail(appendError(nil, c.raw, codeInternalError, msg), 0)
		s.endCall(c)
	}
}

// fromChild routes one line of the child's output.
func (s *session) fromChild(line []byte) {
	if isBatch(line) {
		var batch []json.RawMessage
		if json.Unmarshal(line, &batch) != nil {
			s.srv.m.dropped.WithLabelValues("invalid").Inc()
			s.log.Warn().Msg("stdio server wrote invalid JSON; line dropped")
			return
		}
		for _, m := range batch {
			s.route([]byte(m))
		}
		return
	}
	s.route(line)
}

func (s *session) route(msg []byte) {
	m, err := parseMessage(msg)
	if err != nil {
		// Never the content: it may hold a user's data.
		s.srv.m.dropped.WithLabelValues("invalid").Inc()
		s.log.Warn().Err(err).Int("bytes", len(msg)).Msg("stdio server wrote a line that is not a JSON-RPC message; dropped")
		return
	}
	if s.shared {
		s.touch()
		s.routeShared(m, msg)
		return
	}
	s.mu.Lock()
	s.last = time.Now()
	var target *call
	toGet, initFailed := false, false
	switch {
	case m.isResponse():
		// Forgotten before its answer is pushed: the caller may reuse the
		// id as soon as it has the answer.
		target = s.calls[canonicalID(m.id)]
		if target != nil {
			s.forget(target)
		}
		if target == s.initCall && target != nil {
			initFailed = m.failed
			s.initCall = nil
			if s.initTimer != nil {
				s.initTimer.Stop()
			}
		}
	case m.method == methodProgress:
		if tok := notificationToken(m.params); tok != "" {
			target = s.tokens[tok]
		}
		toGet = target == nil
	case m.method == methodLog || m.isRequest():
		if len(s.calls) == 1 {
			for _, c := range s.calls {
				target = c
			}
		}
		toGet = target == nil
	default:
		toGet = true
	}
	s.mu.Unlock()
	switch {
	case m.isResponse() && target != nil:
		target.q.push(msg, false, true)
		s.endCall(target)
		if initFailed {
			// The client cannot use a session whose initialize failed.
			s.end("the stdio server refused initialize", "")
		}
	case m.isResponse():
		// The caller left or cancelled; the server answered anyway.
		s.log.Debug().Msg("stdio server answered a request nobody waits for; dropped")
	case target != nil:
		if _, ok := target.q.push(msg, !m.isRequest(), false); ok {
			return
		}
		fallthrough // the call ended meanwhile: the GET stream takes it
	case toGet:
		if dropped, _ := s.get.push(msg, !m.isRequest(), false); dropped > 0 {
			s.log.Warn().Int("dropped", dropped).Int("queue_max", s.srv.cfg.QueueMax).
				Msg("GET stream queue full: dropped the oldest notifications")
		}
	}
}

// Method names the router looks at.
const (
	methodInitialize = "initialize"
	methodProgress   = "notifications/progress"
	methodLog        = "notifications/message"
	methodCancelled  = "notifications/cancelled"
)

// childGone runs when the child's output ended: the process exited or
// closed its stdout. Unless taskgate stopped it, every call in flight gets
// a JSON-RPC error that names the exit status, and the session ends.
func (s *session) childGone() {
	c := s.child
	select {
	case <-c.exited:
	case <-time.After(s.srv.cfg.StopGrace):
		// Output closed but the process lives on: it cannot answer.
		c.kill()
	}
	if c.isStopping() {
		reason := "stopped"
		s.mu.Lock()
		if s.initTimedOut {
			reason = "init_timeout"
		}
		s.mu.Unlock()
		s.srv.m.exits.WithLabelValues(reason).Inc()
		s.end("", "")
		return
	}
	s.srv.m.exits.WithLabelValues("crashed").Inc()
	status := c.exitStatus()
	s.log.Warn().Str("exit", status).Msg("stdio server exited; its session ends")
	s.end("stdio server exited", "taskgate: the stdio MCP server exited ("+status+"); the session ended, initialize again")
}

// initExpired kills a child that did not answer initialize in time.
func (s *session) initExpired() {
	s.mu.Lock()
	c := s.initCall
	s.initCall = nil
	s.initTimedOut = c != nil
	s.mu.Unlock()
	if c == nil {
		return
	}
	msg := fmt.Sprintf("taskgate: the stdio MCP server did not answer initialize within %s; it was stopped", s.srv.cfg.InitTimeout)
	s.log.Warn().Stringer("init_timeout", s.srv.cfg.InitTimeout).Msg("stdio server did not answer initialize in time; killing it")
	c.q.fail(appendError(nil, c.raw, codeServerGone, msg), 504)
	s.end("initialize timed out", msg)
	go s.child.kill()
}

// end ends the session once: it leaves the server's table, the calls in
// flight get errMsg as a JSON-RPC error (when not empty), the GET stream
// closes and the child is stopped. reason is logged ("" for a quiet end).
func (s *session) end(reason, errMsg string) {
	s.mu.Lock()
	if s.state == ended {
		s.mu.Unlock()
		return
	}
	s.state = ended
	calls := make([]*call, 0, len(s.calls))
	for _, c := range s.calls {
		calls = append(calls, c)
	}
	clear(s.calls)
	clear(s.tokens)
	if s.initTimer != nil {
		s.initTimer.Stop()
	}
	s.mu.Unlock()
	s.srv.remove(s)
	for _, c := range calls {
		if errMsg != "" {
			// HTTP 200: the error is the call's answer, which a task's
			// runner stores as the task's outcome.
			c.q.fail(appendError(nil, c.raw, codeServerGone, errMsg), 0)
		} else {
			c.q.close()
		}
	}
	s.get.close()
	close(s.ended)
	if s.shared {
		// Not here: end may run under the shared state's lock (startShared).
		go s.srv.sharedEnded(s)
	}
	if reason != "" {
		s.log.Info().Str("reason", reason).Msg("stdio session ended")
	}
	s.srv.wg.Add(1)
	go func() {
		defer s.srv.wg.Done()
		s.child.stop()
	}()
}

// isEnded reports whether the session has ended.
func (s *session) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == ended
}

// drain ends the session after its last call (a client's DELETE).
func (s *session) drain() {
	s.mu.Lock()
	if s.state != running {
		s.mu.Unlock()
		return
	}
	s.state = draining
	idle := len(s.calls) == 0
	n := len(s.calls)
	s.mu.Unlock()
	if idle {
		s.end("the client ended the session", "")
		return
	}
	s.log.Info().Int("calls_in_flight", n).Msg("client ended the session; its stdio server stops after its last call")
}

// idleFor reports how long the session has been idle (0 while a call is in
// flight or its GET stream is open).
func (s *session) idleFor(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) > 0 || s.getOpen || s.state != running {
		return 0
	}
	return now.Sub(s.last)
}

// openGet marks the GET stream open; false when one is open already.
func (s *session) openGet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.getOpen || s.state == ended {
		return false
	}
	s.getOpen = true
	s.last = time.Now()
	return true
}

func (s *session) closeGet() {
	s.mu.Lock()
	s.getOpen = false
	s.last = time.Now()
	s.mu.Unlock()
}
