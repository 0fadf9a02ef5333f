package proxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/taskgate/taskgate/proxy/wire"
	"github.com/taskgate/taskgate/taskstore"
)

// A question the upstream sends on its standalone GET stream while exactly
// one task call runs on the session is the task's: it reaches the client
// with related-task _meta under a question id, the task is input_required,
// and the answer reaches the upstream under the upstream's id. With two
// calls running it cannot be attributed and passes through unchanged.
func TestGetStreamQuestionAttributed(t *testing.T) {
	up := newFakeUpstream(t)
	up.getEvents = make(chan string, 4)
	e := newTaskEnvOn(t, nil, Config{KeepAlive: 50 * time.Millisecond}, nil, up)
	const ask = `{"jsonrpc":"2.0","id":"get-e1","method":"elicitation/create","params":{"message":"sure?","requestedSchema":{"type":"object","properties":{}}}}`

	task := e.createTask(alice, "block", `{}`, `{}`)
	g := e.openStream(alice, "")
	up.getEvents <- ask
	q := g.nextMethod("elicitation/create")
	if relatedTaskOf(t, q) != task.TaskID || !bytes.HasPrefix(q.ID, []byte(`"`+wire.QuestionIDPrefix)) {
		t.Fatalf("question from the upstream's GET stream = %s, want it tied to the task under a question id", q.raw)
	}
	if got := e.waitStatus(alice, task.TaskID, "input_required"); !strings.Contains(got.StatusMessage, "elicitation/create") {
		t.Errorf("task while its question is open: %+v", got)
	}
	r := e.send(alice, `{"jsonrpc":"2.0","id":`+string(q.ID)+`,"result":{"action":"accept","content":{}}}`, "")
	if r.httpStatus != fasthttp.StatusAccepted {
		t.Fatalf("answer: HTTP %d %s, want 202", r.httpStatus, r.raw)
	}
	waitFor(t, 5*time.Second, "the upstream to get the answer under its own id", func() bool { return up.gotAnswer(`"get-e1"`) })
	e.waitStatus(alice, task.TaskID, "working")

	// A second call on the session: a question can no longer be attributed.
	e.createTask(alice, "block", `{}`, `{}`)
	up.getEvents <- strings.Replace(ask, "get-e1", "get-e2", 1)
	q2 := g.nextMethod("elicitation/create")
	if string(q2.ID) != `"get-e2"` || relatedTaskOf(t, q2) != "" {
		t.Errorf("unattributable question = %s, want it passed through unchanged", q2.raw)
	}
}

// The handler's view of bindings and closes: an unbound session passes;
// a bound one refuses other credentials with 404 before the upstream; a
// DELETE with a running call is answered 204 and ends the session for the
// client; the call's end ends it upstream.
func TestSessionBindingAndDeferredClose(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	e.h.id.bindSession(&e.h.log, "sess-a", e.h.id.credential(requestHeader(alice)))
	bob := identity{"Authorization": "Bearer bob-token", "Mcp-Session-Id": "sess-a"}
	noAuth := identity{"Mcp-Session-Id": "sess-a"}
	before := len(requestsOf(e.up))
	for _, who := range []identity{bob, noAuth} {
		if r := e.send(who, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, ""); r.httpStatus != fasthttp.StatusNotFound {
			t.Errorf("POST on a foreign session (%v): HTTP %d, want 404", who["Authorization"], r.httpStatus)
		}
		if st := e.httpDo(who, fasthttp.MethodDelete); st != fasthttp.StatusNotFound {
			t.Errorf("DELETE of a foreign session: HTTP %d, want 404", st)
		}
	}
	if n := len(requestsOf(e.up)); n != before {
		t.Errorf("%d foreign requests reached the upstream", n-before)
	}
	task := e.createTask(alice, "block", `{}`, `{}`)
	if st := e.httpDo(alice, fasthttp.MethodDelete); st != fasthttp.StatusNoContent {
		t.Fatalf("DELETE with a running call: HTTP %d, want 204", st)
	}
	if r := e.send(alice, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, ""); r.httpStatus != fasthttp.StatusNotFound {
		t.Errorf("POST after the client's DELETE: HTTP %d, want 404", r.httpStatus)
	}
	if deletes(e.up) != 0 {
		t.Fatalf("the DELETE reached the upstream while the call runs")
	}
	e.up.releaseAll()
	waitFor(t, 5*time.Second, "the runner to end the session upstream", func() bool { return deletes(e.up) == 1 })
	other := identity{"Authorization": "Bearer alice-token", "Mcp-Session-Id": "sess-new"}
	if got, _ := e.get(other, task.TaskID); got.Status != "completed" {
		t.Errorf("task from another session of the owner: %+v, want completed", got)
	}
}

func requestHeader(who identity) *fasthttp.RequestHeader {
	var h fasthttp.RequestHeader
	for k, v := range who {
		h.Set(k, v)
	}
	return &h
}

func requestsOf(u *fakeUpstream) []fakeRequest {
	reqs, _, _ := u.snapshot()
	return reqs
}

// deletes counts the DELETEs the upstream received.
func deletes(u *fakeUpstream) int {
	n := 0
	for _, r := range requestsOf(u) {
		if r.httpDelete {
			n++
		}
	}
	return n
}

// httpDo sends an empty request with method and returns the status.
func (e *taskEnv) httpDo(who identity, method string) int {
	e.t.Helper()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://taskgate/mcp")
	req.Header.SetMethod(method)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	for k, v := range who {
		req.Header.Set(k, v)
	}
	if err := e.c.DoTimeout(req, resp, 5*time.Second); err != nil {
		e.t.Fatal(fmt.Errorf("%s: %w", method, err))
	}
	return resp.StatusCode()
}

// checkBound returns a RequestCtx carrying who, and a Handler with the
// session bound to alice.
func checkBound(t *testing.T, who identity) (*Handler, *fasthttp.RequestCtx) {
	t.Helper()
	e := newTaskEnv(t, "", Config{})
	e.h.id.bindSession(&e.h.log, "sess-a", e.h.id.credential(requestHeader(alice)))
	var rc fasthttp.RequestCtx
	for k, v := range who {
		rc.Request.Header.Set(k, v)
	}
	return e.h, &rc
}

// The owner check of a request on a session this replica knows costs no
// allocation and no store round trip (it sits on the pass-through path).
func TestSessionCheckAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation budget of a sync.Pool path: checked without -race (CI runs the Allocs tests so)")
	}
	h, rc := checkBound(t, alice)
	sid := []byte("sess-a")
	var info wire.Info
	if !h.id.sessionAllowed(rc, &info, sid) {
		t.Fatalf("the owner's request refused")
	}
	if n := testing.AllocsPerRun(200, func() { h.id.sessionAllowed(rc, &info, sid) }); n != 0 {
		t.Errorf("sessionAllowed allocates %v times per request, want 0", n)
	}
}

// Without Authorization a session owns its tasks: its DELETE is forwarded
// and cancels them (nobody could read them afterwards).
func TestDeleteOfAnonymousSessionCancelsItsTasks(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	anon := identity{"Mcp-Session-Id": "sess-anon"}
	task := e.createTask(anon, "block", `{}`, `{}`)
	if st := e.httpDo(anon, fasthttp.MethodDelete); st != fasthttp.StatusNoContent {
		t.Fatalf("DELETE: HTTP %d, want the upstream's 204", st)
	}
	if deletes(e.up) != 1 {
		t.Errorf("the DELETE of a session without Authorization was not forwarded")
	}
	if got, _ := e.get(anon, task.TaskID); got.Status != "cancelled" || got.StatusMessage != msgSessionEnded {
		t.Errorf("task of the ended session: %+v, want cancelled with %q", got, msgSessionEnded)
	}
}

// BenchmarkSessionCheck: the owner check of a request on a session this
// replica knows (one keyed hash of the Authorization header, a map read).
func BenchmarkSessionCheck(b *testing.B) {
	store, closeStore, err := taskstore.NewEmbedded(taskstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(closeStore)
	h, err := New(Config{Upstream: "http://127.0.0.1:1/mcp"}, nil, store, zerolog.Nop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close(context.Background()) })
	h.id.bindSession(&h.log, "sess-a", h.id.credential(requestHeader(alice)))
	var rc fasthttp.RequestCtx
	for k, v := range alice {
		rc.Request.Header.Set(k, v)
	}
	sid := []byte("sess-a")
	var info wire.Info
	b.ReportAllocs()
	for b.Loop() {
		if !h.id.sessionAllowed(&rc, &info, sid) {
			b.Fatal("refused")
		}
	}
}

// An answer to a question id that is no longer pending (answered before,
// its task ended) or was never issued is accepted and dropped: it never
// reaches the upstream, which did not issue that id.
func TestStaleAnswerDropped(t *testing.T) {
	e := newTaskEnv(t, "", Config{})
	// A question id as taskgate issues them: prefix, 128 random bits,
	// the upstream's id in base64url.
	qid := []byte(`"` + wire.QuestionIDPrefix + strings.Repeat("0", 32) + "." + base64.RawURLEncoding.EncodeToString([]byte(`"srv-x"`)) + `"`)
	before := len(requestsOf(e.up))
	r := e.send(alice, `{"jsonrpc":"2.0","id":`+string(qid)+`,"result":{"action":"accept","content":{}}}`, "")
	if r.httpStatus != fasthttp.StatusAccepted {
		t.Errorf("stale answer: HTTP %d %s, want 202", r.httpStatus, r.raw)
	}
	if n := len(requestsOf(e.up)); n != before {
		t.Errorf("the stale answer reached the upstream")
	}
}

// Every request of a session logs the session id's keyed short hash,
// never the id itself, whether its binding was just read from the store or
// found cached.
func TestRequestLogShowsHashedSession(t *testing.T) {
	var logs lockedBuffer
	tp := newTestProxy(t, func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("application/json")
		rc.SetBodyString(`{"jsonrpc":"2.0","id":1,"result":{}}`)
	}, withLogger(zerolog.New(&logs)))
	for i := range 3 {
		if resp := tp.do(newPost(`{"jsonrpc":"2.0","id":1,"method":"ping"}`, "Mcp-Session-Id", "sess-log-1")); resp.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode(), resp.Body())
		}
	}
	want := `"session":"` + tp.h.id.hashShort([]byte("sess-log-1")) + `"`
	if n := strings.Count(logs.String(), want); n != 3 {
		t.Errorf("%d request lines with %s; want 3:\n%s", n, want, logs.String())
	}
	if strings.Contains(logs.String(), "sess-log-1") {
		t.Errorf("the session id itself reached the log:\n%s", logs.String())
	}
}
