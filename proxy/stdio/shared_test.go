package stdio

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// The proof of shared mode: several sessions over one child send the same
// request ids and progress tokens at the same time; every answer and every
// progress notification reaches its own caller only, with the caller's id
// and token.
func TestSharedAnswersNeverCross(t *testing.T) {
	s, _ := startServer(t, "plain", func(c *Config) { c.Shared = true })
	clients := make([]*tclient, 4)
	for i := range clients {
		clients[i] = newClient(t, s)
		clients[i].initialize()
	}
	if s.Started() != 1 {
		t.Fatalf("shared mode started %d children for %d sessions, want 1", s.Started(), len(clients))
	}
	pid := resultText(clients[0].post(callBody(1, "pid", `{}`)).last())
	if got := resultText(clients[3].post(callBody(1, "pid", `{}`)).last()); got != pid {
		t.Fatalf("sessions reached processes %s and %s, want one", pid, got)
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			for j := range 25 {
				want := fmt.Sprintf("session %d call %d", i, j)
				a := c.post(callBody(7, "echo", fmt.Sprintf(`{"text":%q}`, want)))
				if got := resultText(a.last()); got != want || fmt.Sprint(a.last()["id"]) != "7" {
					t.Errorf("session %d: answer %v, want %q with id 7", i, a.last(), want)
				}
				a = c.post(callBody(8, "progress", `{}`)) // progressToken "tok-8" in every session
				if len(a.msgs) != 2 || resultText(a.last()) != "done" {
					t.Errorf("session %d: progress call got %v, want its progress and result only", i, a.msgs)
					continue
				}
				params, _ := a.msgs[0]["params"].(map[string]any)
				if a.msgs[0]["method"] != methodProgress || params["progressToken"] != "tok-8" {
					t.Errorf("session %d: first message %v, want progress with the client's token", i, a.msgs[0])
				}
			}
		})
	}
	wg.Wait()
}

// What the shared child sends on its own reaches no session: its requests
// are refused, its log messages dropped.
func TestSharedChildRequestsReachNoSession(t *testing.T) {
	s, _ := startServer(t, "plain", func(c *Config) { c.Shared = true })
	c := newClient(t, s)
	c.initialize()
	a := c.post(callBody(1, "ask", `{}`))
	if len(a.msgs) != 1 || resultText(a.last()) != "answer " {
		t.Fatalf("ask in shared mode: %v, want only the result (the elicitation refused, so no answer)", a.msgs)
	}
	a = c.post(callBody(2, "progress", `{}`))
	for _, m := range a.msgs {
		if m["method"] == methodLog {
			t.Errorf("a log message of the shared child reached a session: %v", m)
		}
	}
}

// Cancelling a call cancels that session's call only; DELETE ends one
// session; a crash ends them all.
func TestSharedSessionsLifecycle(t *testing.T) {
	s, _ := startServer(t, "plain", func(c *Config) { c.Shared = true })
	a, b := newClient(t, s), newClient(t, s)
	a.initialize()
	b.initialize()
	go a.post(callBody(5, "hang", `{}`))
	go b.post(callBody(5, "hang", `{}`))
	inFlight := func() int {
		s.sh.mu.Lock()
		child := s.sh.child
		s.sh.mu.Unlock()
		child.mu.Lock()
		defer child.mu.Unlock()
		return len(child.calls)
	}
	waitFor(t, "both calls in flight", func() bool { return inFlight() == 2 })
	if r := a.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`); r.status != http.StatusAccepted {
		t.Fatalf("cancel: HTTP %d", r.status)
	}
	waitFor(t, "only B's call in flight", func() bool { return inFlight() == 1 })

	req, _ := http.NewRequest(http.MethodDelete, "http://stdio"+Path, nil)
	req.Header.Set(headerSessionID, a.sid)
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if r := a.post(callBody(6, "echo", `{"text":"x"}`)); r.status != http.StatusNotFound {
		t.Errorf("deleted session: HTTP %d, want 404", r.status)
	}
	if got := resultText(b.post(callBody(6, "echo", `{"text":"still"}`)).last()); got != "still" {
		t.Errorf("the other session after a DELETE: %q", got)
	}
	if r := b.post(callBody(9, "die", `{}`)); !strings.Contains(errorMessage(r.last()), "exited (exit status 3)") {
		t.Errorf("call of the crashed shared child: %v", r.msgs)
	}
	waitFor(t, "the sessions to end with the child", func() bool {
		return b.post(callBody(10, "echo", `{"text":"x"}`)).status == http.StatusNotFound
	})
	b.sid = ""
	b.initialize()
	if s.Started() != 2 {
		t.Errorf("started %d children, want a new one after the crash", s.Started())
	}
}
