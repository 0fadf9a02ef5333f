package e2e

// Issue 11 §1 and §2, with real processes: a task outlives the client
// session that created it (the client's DELETE does not end the upstream
// session while the task runs; a later session of the same owner reads
// the result); sessions are bound to the credential that opened them (a
// foreign DELETE, POST or GET gets 404 and never reaches the upstream);
// a task's question is answered from another session of the owner, on
// another replica; an unanswered question whose stream went is delivered
// again to the owner's next stream.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// deleteSession sends DELETE for the client's session and returns the status.
func (c *rawClient) deleteSession() int {
	c.t.Helper()
	return c.do(c.request(context.Background(), http.MethodDelete, nil)).Status
}

// ping POSTs a ping and returns the HTTP status.
func (c *rawClient) ping() int {
	c.t.Helper()
	body, _ := c.marshalRequest("ping", nil)
	return c.postRaw(body).Status
}

// sessionOf returns a client for endpoint that uses c's session, protocol
// version and headers (another connection of the same client, or another
// replica).
func sessionOf(t testing.TB, endpoint string, c *rawClient) *rawClient {
	o := newRawClient(t, endpoint)
	o.header, o.session, o.version = c.header.Clone(), c.session, c.version
	return o
}

// nextQuestion reads s until an elicitation/create.
func nextQuestion(t testing.TB, s *liveStream, timeout time.Duration) *rpcMsg {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ev, ok := s.nextMsg(time.Until(deadline))
		if !ok {
			t.Fatalf("stream ended before the question: %s", describeEvents(s.all))
		}
		if ev.msg.Method == "elicitation/create" {
			return ev.msg
		}
	}
}

// A task survives its session: the client DELETEs the session while the
// call runs; taskgate answers 204, the session is gone for the client
// (404), the upstream keeps it (the call goes on) until the task ended and
// then ends it; a new session of the same owner, through the mcp-go
// client, reads the result.
func TestTaskOutlivesItsSession(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	const auth = "Bearer outlive-token"
	a := newRawClient(t, gw.URL)
	a.header.Set("Authorization", auth)
	a.initialize()
	tk := a.createTask("slow", map[string]any{"seconds": 2, "steps": 2}, nil)

	if st := a.deleteSession(); st != http.StatusNoContent {
		t.Fatalf("DELETE of a session with a running task: HTTP %d, want 204", st)
	}
	if st := a.ping(); st != http.StatusNotFound {
		t.Errorf("ping on the deleted session: HTTP %d, want 404", st)
	}
	direct := sessionOf(t, up.URL, a)
	if st := direct.ping(); st != http.StatusOK {
		t.Errorf("upstream session while its task runs: ping HTTP %d, want 200 (the DELETE must wait for the task)", st)
	}

	c, _ := newMCPClient(t, gw.URL, map[string]string{"Authorization": auth})
	res := taskResult(t, c, tk.TaskID)
	if got := textOf(res.Content); got != "slept 2 seconds" || res.IsError {
		t.Errorf("tasks/result from a new session = %q isError %v, want \"slept 2 seconds\"", got, res.IsError)
	}
	if g := getTask(t, c, tk.TaskID); g.Status != mcp.TaskStatusCompleted {
		t.Errorf("task from a new session: %s %q, want completed", g.Status, g.StatusMessage)
	}
	waitFor(t, 10*time.Second, "taskgate to end the upstream session after its last task", func() bool {
		return direct.ping() == http.StatusNotFound
	})
}

// A session id is no credential: with another Authorization, or none, a
// DELETE, POST or GET on the session gets 404 and never reaches the
// upstream; the owner's session and task carry on.
func TestForeignSessionRequests404(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	tp := startTap(t, up.URL)
	gw := startTaskgate(t, tp.URL)
	owner := newRawClient(t, gw.URL)
	owner.header.Set("Authorization", "Bearer owner-token")
	owner.initialize()
	tk := owner.createTask("slow", map[string]any{"seconds": 1, "steps": 1}, nil)

	for _, cred := range []string{"Bearer mallory-token", ""} {
		f := newRawClient(t, gw.URL)
		f.session, f.version = owner.session, owner.version
		if cred != "" {
			f.header.Set("Authorization", cred)
		}
		if st := f.deleteSession(); st != http.StatusNotFound {
			t.Errorf("foreign DELETE (Authorization %q): HTTP %d, want 404", cred, st)
		}
		r := f.postRaw([]byte(`{"jsonrpc":"2.0","id":"foreign-post","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`))
		if r.Status != http.StatusNotFound {
			t.Errorf("foreign POST (Authorization %q): HTTP %d %q, want 404", cred, r.Status, r.Body)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req := f.request(ctx, http.MethodGet, nil)
		req.Header.Set("Accept", "text/event-stream")
		if r := f.do(req); r.Status != http.StatusNotFound {
			t.Errorf("foreign GET (Authorization %q): HTTP %d, want 404", cred, r.Status)
		}
		cancel()
	}
	for _, m := range tp.messages() {
		if strings.Contains(string(m.ID), "foreign") {
			t.Errorf("a foreign request reached the upstream: %s %s", m.Method, m.ID)
		}
	}
	var tools struct {
		Tools []json.RawMessage `json:"tools"`
	}
	owner.result("tools/list", nil, &tools) // the session is alive
	if len(tools.Tools) == 0 {
		t.Errorf("owner's tools/list after the foreign requests is empty")
	}
	if g := owner.waitTerminal(tk.TaskID, 15*time.Second); g.Status != "completed" {
		t.Errorf("owner's task: %s %q, want completed", g.Status, g.StatusMessage)
	}
}

// A task's question, delivered on a tasks/result stream of a second
// session of the same owner, is answered on that session and completes
// the task.
func TestAnswerFromAnotherSession(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL)
	first := newRawClient(t, gw.URL)
	first.header.Set("Authorization", "Bearer answer-token")
	first.initializeWith(elicitCaps)
	tk := first.createTask("ask", map[string]any{"question": "Colour?"}, nil)
	first.waitStatus(tk.TaskID, "input_required", 10*time.Second)

	second := newRawClient(t, gw.URL)
	second.header = first.header.Clone()
	second.initializeWith(elicitCaps)
	if second.session == first.session {
		t.Fatalf("the second client got the first one's session")
	}
	s := openStream(t, second, http.MethodPost, tasksResultBody("res-2", tk.TaskID))
	q := nextQuestion(t, s, 10*time.Second)
	checkElicitation(t, q, tk.TaskID, "Colour?")
	if r := second.postRaw(elicitAnswer(q.ID, tk.TaskID, "teal")); r.Status != http.StatusAccepted {
		t.Fatalf("answer on the second session: HTTP %d %q, want 202", r.Status, r.Body)
	}
	checkFinalResult(t, s.rest(10*time.Second), "res-2", tk.TaskID, "you said: teal")
}

// An open question whose stream went (the client dropped its GET stream,
// then ended the session) is delivered again, with the same id, on the
// GET stream of the owner's next session, and its answer there completes
// the task.
func TestOpenQuestionRedelivered(t *testing.T) {
	t.Parallel()
	up := startLegacy(t)
	gw := startTaskgate(t, up.URL, "--keepalive", "200ms")
	first := newRawClient(t, gw.URL)
	first.header.Set("Authorization", "Bearer redeliver-token")
	first.initializeWith(elicitCaps)
	g1 := openStream(t, first, http.MethodGet, nil)
	tk := first.createTask("ask", map[string]any{"question": "Size?"}, nil)
	q1 := nextQuestion(t, g1, 10*time.Second)
	checkElicitation(t, q1, tk.TaskID, "Size?")
	g1.close() // the client goes away without answering
	if st := first.deleteSession(); st != http.StatusNoContent {
		t.Fatalf("DELETE while the task waits for input: HTTP %d, want 204", st)
	}

	second := newRawClient(t, gw.URL)
	second.header = first.header.Clone()
	second.initializeWith(elicitCaps)
	g2 := openStream(t, second, http.MethodGet, nil)
	q2 := nextQuestion(t, g2, 15*time.Second)
	checkElicitation(t, q2, tk.TaskID, "Size?")
	if string(q2.ID) != string(q1.ID) {
		t.Errorf("redelivered question id %s, want the first delivery's %s", q2.ID, q1.ID)
	}
	if r := second.postRaw(elicitAnswer(q2.ID, tk.TaskID, "large")); r.Status != http.StatusAccepted {
		t.Fatalf("answer: HTTP %d %q, want 202", r.Status, r.Body)
	}
	// A second answer to the same question is accepted and ignored.
	if r := second.postRaw(elicitAnswer(q2.ID, tk.TaskID, "small")); r.Status != http.StatusAccepted {
		t.Errorf("a second answer: HTTP %d %q, want 202", r.Status, r.Body)
	}
	if g := second.waitTerminal(tk.TaskID, 15*time.Second); g.Status != "completed" {
		t.Fatalf("task after the redelivered answer: %s %q, want completed", g.Status, g.StatusMessage)
	}
	var res toolResult
	second.result("tasks/result", map[string]any{"taskId": tk.TaskID}, &res)
	if res.text() != "you said: large" {
		t.Errorf("result %q, want \"you said: large\" (the first answer wins)", res.text())
	}
}

// Two replicas on one Redis: the binding made through A is enforced by B;
// the client ends its session through B while the call runs on A; a new
// session opened through B gets the question on its tasks/result stream,
// the answer POSTed through A completes the task, and A ends the first
// upstream session afterwards.
func TestSessionsAcrossReplicas(t *testing.T) {
	t.Parallel()
	redisURL := "redis://" + redistest.Start(t)
	up := startLegacy(t)
	const key = "e2e-sessions-owner-key-0123456789"
	a := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key)
	b := startTaskgate(t, up.URL, "--redis", redisURL, "--owner-key", key)

	first := newRawClient(t, a.URL)
	first.header.Set("Authorization", "Bearer replica-token")
	first.initializeWith(elicitCaps)
	foreign := sessionOf(t, b.URL, first)
	foreign.header.Set("Authorization", "Bearer someone-else")
	if st := foreign.deleteSession(); st != http.StatusNotFound {
		t.Errorf("foreign DELETE through the other replica: HTTP %d, want 404", st)
	}
	tk := first.createTask("ask", map[string]any{"question": "Replica?"}, nil)
	first.waitStatus(tk.TaskID, "input_required", 10*time.Second)
	if st := sessionOf(t, b.URL, first).deleteSession(); st != http.StatusNoContent {
		t.Fatalf("DELETE through the other replica while the call runs: HTTP %d, want 204", st)
	}

	second := newRawClient(t, b.URL)
	second.header = first.header.Clone()
	second.initializeWith(elicitCaps)
	s := openStream(t, second, http.MethodPost, tasksResultBody("res-r", tk.TaskID))
	q := nextQuestion(t, s, 10*time.Second)
	checkElicitation(t, q, tk.TaskID, "Replica?")
	if r := sessionOf(t, a.URL, second).postRaw(elicitAnswer(q.ID, tk.TaskID, "both")); r.Status != http.StatusAccepted {
		t.Fatalf("answer through replica A: HTTP %d %q, want 202", r.Status, r.Body)
	}
	checkFinalResult(t, s.rest(10*time.Second), "res-r", tk.TaskID, "you said: both")
	direct := sessionOf(t, up.URL, first)
	waitFor(t, 10*time.Second, "the first upstream session to end after its task", func() bool {
		return direct.ping() == http.StatusNotFound
	})
}

// A server that asks on its standalone GET stream (an mcp-go server here,
// like fastmcp ones): while the task is the only call on the session, its
// question reaches the client with related-task _meta, the task is
// input_required, and the answer completes it.
func TestGetStreamQuestionTiedToTask(t *testing.T) {
	t.Parallel()
	peer := startServer(t, "mcpgo-peer", mcpgoPeerBin, "--no-tasks", "--stateful")
	gw := startTaskgate(t, peer.URL)
	c := newRawClient(t, gw.URL)
	c.header.Set("Authorization", "Bearer get-stream-token")
	c.initializeWith(elicitCaps)
	g := openStream(t, c, http.MethodGet, nil)
	tk := c.createTask("ask_get", map[string]any{"question": "Via GET?"}, nil)
	q := nextQuestion(t, g, 10*time.Second)
	checkElicitation(t, q, tk.TaskID, "Via GET?")
	if g := c.getTask(tk.TaskID); g.Status != "input_required" {
		t.Errorf("task while its GET-stream question is open: %s %q, want input_required", g.Status, g.StatusMessage)
	}
	if r := c.postRaw(elicitAnswer(q.ID, tk.TaskID, "yes")); r.Status != http.StatusAccepted {
		t.Fatalf("answer: HTTP %d %q, want 202", r.Status, r.Body)
	}
	if g := c.waitTerminal(tk.TaskID, 15*time.Second); g.Status != "completed" {
		t.Fatalf("task after the answer: %s %q, want completed", g.Status, g.StatusMessage)
	}
	var res toolResult
	c.result("tasks/result", map[string]any{"taskId": tk.TaskID}, &res)
	if res.text() != "you said: yes" {
		t.Errorf("result %q, want \"you said: yes\"", res.text())
	}
}
