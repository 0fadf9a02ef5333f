package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskgate/taskgate/proxy/engine"
	"github.com/taskgate/taskgate/taskstore"
)

// countingEnv is a taskEnv whose Handler's store counts its calls.
func countingEnv(t *testing.T, cfg Config) (*taskEnv, *countingStore) {
	t.Helper()
	var cs *countingStore
	e := newTaskEnvWrapped(t, "", cfg, func(s taskstore.Store) taskstore.Store {
		cs = &countingStore{Store: s, calls: make(map[string]int)}
		return cs
	})
	return e, cs
}

// streamMethods are the store calls of a tasks/result that waits through
// the store (subscription, listening mark, queue drains).
var streamMethods = []string{"Watch", "SetListening", "Drain", "Requeue"}

// runnerMethods are the store calls of a runner itself: its outcome, the
// end of its session record, and the supervisor of a call that outlives
// watchDelay (subscription, answers, re-read, lease), which a loaded
// machine can reach in a test.
var runnerMethods = []string{"Recover", "Finish", "EndSessionTask", "WatchFunc", "TakeAnswers", "Get", "Renew"}

// A blocking tasks/result on the runner's replica is answered from the
// runner's memory whatever the client accepts: no store call at all while
// it waits (only the runner's own Finish and the end of its session
// record), and the answer in the form the client can read.
func TestTaskResultFromRunnerMemory(t *testing.T) {
	for _, tc := range []struct {
		accept  string
		wantSSE bool
	}{
		{"application/json", false},
		{"application/json, text/event-stream", false}, // every SDK sends this
		{"text/event-stream", true},
	} {
		t.Run(tc.accept, func(t *testing.T) {
			e, cs := countingEnv(t, Config{KeepAlive: time.Minute})
			task := e.createTask(alice, "block", `{}`, `{}`)
			pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
			before := cs.callsExcept("Recover")
			waiter := make(chan rpcReply, 1)
			go func() {
				waiter <- e.send(alice, fmt.Sprintf(`{"jsonrpc":"2.0","id":"w","method":"tasks/result","params":{"taskId":%q}}`, task.TaskID), tc.accept)
			}()
			// The waiter must hold the runner before the call ends: one that
			// arrives after it (the job gone from memory) rightly reads the
			// store. The waiters gauge counts it once it holds the job.
			pollUntil(t, 5*time.Second, func() bool { return testutil.ToFloat64(e.h.m.waiters) == 1 }, "the waiter to block")
			e.up.releaseAll()
			r := <-waiter
			if r.Error != nil || !strings.Contains(string(r.Result), `"text":"released"`) || !strings.Contains(string(r.Result), task.TaskID) {
				t.Fatalf("tasks/result = %s, want the released result with its related task", r.raw)
			}
			if r.sse != tc.wantSSE {
				t.Errorf("answer is SSE: %v, want %v", r.sse, tc.wantSSE)
			}
			if tc.wantSSE && strings.Count(r.raw, "data:") != 1 {
				t.Errorf("SSE answer %q, want one event: the result", r.raw)
			}
			got := diff(cs.callsExcept(runnerMethods...), before)
			// The owner check of the session may read its binding once.
			delete(got, "Session")
			if len(got) != 0 {
				t.Errorf("store calls while tasks/result waited on the local runner: %v, want none", got)
			}
		})
	}
}

// Command budget of create + blocking tasks/result on one replica, for a
// client that accepts SSE: the task's own writes (Create, Finish) and at
// most one read (when the call ended before tasks/result arrived), never a
// subscription, listening mark or drain for a task that queued nothing.
func TestTaskRoundtripStoreBudget(t *testing.T) {
	e, cs := countingEnv(t, Config{})
	carol := identity{"Authorization": "Bearer carol-token"} // no session: no session records
	const ops = 50
	before := cs.callsExcept("Recover")
	for i := range ops {
		task := e.createTask(carol, "echo", fmt.Sprintf(`{"text":"n%d"}`, i), `{}`)
		r := e.send(carol, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tasks/result","params":{"taskId":%q}}`, i, task.TaskID),
			"application/json, text/event-stream")
		if r.Error != nil || !strings.Contains(string(r.Result), fmt.Sprintf(`n%d`, i)) {
			t.Fatalf("tasks/result %d = %s, want the echoed text", i, r.raw)
		}
	}
	// The last Finish may still be on its way.
	pollUntil(t, 5*time.Second, func() bool { return diff(cs.callsExcept("Recover"), before)["Finish"] == ops }, "every Finish")
	got := diff(cs.callsExcept("Recover", "WatchFunc", "TakeAnswers", "Get", "Renew"), before)
	for _, m := range streamMethods {
		if got[m] != 0 {
			t.Errorf("%d %s calls in %d roundtrips, want 0 (calls: %v)", got[m], m, ops, got)
		}
	}
	if got["Create"] != ops || got["Outcome"] > ops {
		t.Errorf("calls in %d roundtrips: %v, want %d Create, %d Finish and at most %d Outcome", ops, got, ops, ops, ops)
	}
	if n := total(got); n > 3*ops {
		t.Errorf("%d store calls in %d roundtrips (%.1f per op), want at most 3 per op: %v", n, ops, float64(n)/ops, got)
	}
	t.Logf("store calls per create + tasks/result: %.2f (%v)", float64(total(got))/ops, got)
}

// A wait longer than a keep-alive interval becomes a stream of keep-alive
// comments that ends with the result, still from the runner's memory.
func TestTaskResultLocalStreamKeepAlive(t *testing.T) {
	e, cs := countingEnv(t, Config{KeepAlive: 50 * time.Millisecond})
	task := e.createTask(alice, "block", `{}`, `{}`)
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
	before := cs.callsExcept("Recover")
	s := e.openStream(alice, fmt.Sprintf(`{"jsonrpc":"2.0","id":"k","method":"tasks/result","params":{"taskId":%q}}`, task.TaskID))
	for {
		ev, err := s.r.Next()
		if err != nil {
			t.Fatalf("stream ended before a keep-alive: %v", err)
		}
		if len(ev.Data) > 0 {
			t.Fatalf("event before the call ended: %q", ev.Raw)
		}
		if strings.Contains(string(ev.Raw), ": keep-alive") {
			break
		}
	}
	e.up.releaseAll()
	m := s.next(nil)
	if string(m.ID) != `"k"` || !strings.Contains(string(m.Result), `"text":"released"`) {
		t.Fatalf("last event = %s, want the result of request k", m.raw)
	}
	got := diff(cs.callsExcept(runnerMethods...), before)
	delete(got, "Session")
	if len(got) != 0 {
		t.Errorf("store calls of a streamed local wait: %v, want none", got)
	}
}

// The reported pollInterval of a poll answered at once is 5 % of the
// task's age, at least 100 ms, within the policy's bound; a terminal task
// reports the bound.
func TestReportedPollInterval(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		age    time.Duration
		bound  time.Duration
		status taskstore.Status
		want   time.Duration
	}{
		{0, 2 * time.Second, taskstore.Working, 100 * time.Millisecond},
		{-time.Second, 2 * time.Second, taskstore.Working, 100 * time.Millisecond}, // another replica's clock ahead
		{40 * time.Millisecond, 2 * time.Second, taskstore.Working, 100 * time.Millisecond},
		{3 * time.Second, 2 * time.Second, taskstore.Working, 150 * time.Millisecond},
		{3 * time.Second, 2 * time.Second, taskstore.InputRequired, 150 * time.Millisecond},
		{30 * time.Second, 2 * time.Second, taskstore.Working, 1500 * time.Millisecond},
		{time.Minute, 2 * time.Second, taskstore.Working, 2 * time.Second},
		{time.Hour, 2 * time.Second, taskstore.Working, 2 * time.Second},
		{0, 2 * time.Millisecond, taskstore.Working, 2 * time.Millisecond}, // bound below the start
		{time.Hour, 2 * time.Second, taskstore.Completed, 2 * time.Second},
	} {
		tk := &taskstore.Task{Status: tc.status, CreatedAt: created, PollInterval: tc.bound}
		if got := engine.PollInterval(tk, created.Add(tc.age), false, false); got != tc.want {
			t.Errorf("age %v, bound %v, %s: pollInterval %v, want %v", tc.age, tc.bound, tc.status, got, tc.want)
		}
	}
}

// A tasks/get of a young call running here waits briefly for its end and
// answers with the terminal task the runner stored (no store read), so a
// client polling a short call needs no second poll.
func TestTaskGetHoldsYoungLocalCall(t *testing.T) {
	e, cs := countingEnv(t, Config{})
	// Hold a get for up to a minute (the test releases the call while the
	// get waits), for calls younger than a minute (a loaded machine may
	// take longer than holdYoungFor to get here).
	e.h.eng.SetHold(time.Minute, time.Minute)
	task := e.createTask(alice, "block", `{}`, `{}`)
	pollUntil(t, 5*time.Second, func() bool { return e.up.toolCalls() == 1 }, "the upstream call")
	before := cs.callsExcept("Recover")
	got := make(chan wireTask, 1)
	go func() {
		wt, _ := e.get(alice, task.TaskID)
		got <- wt
	}()
	pollUntil(t, 5*time.Second, func() bool { return testutil.ToFloat64(e.h.m.inflight) == 1 }, "tasks/get to wait")
	e.up.releaseAll()
	if wt := <-got; wt.Status != "completed" || wt.PollInterval != 1500 {
		t.Fatalf("tasks/get = %+v, want completed (reporting the policy's pollInterval 1500)", wt)
	}
	if n := diff(cs.callsExcept("Recover"), before)["Get"]; n != 0 {
		t.Errorf("tasks/get read the store %d times, want 0 (the runner's outcome)", n)
	}
	e.h.eng.SetHold(0, time.Minute)
	if wt, _ := e.get(alice, task.TaskID); wt.Status != "completed" {
		t.Errorf("tasks/get after the end = %+v, want completed", wt)
	}
}

// An owner that has spent more than half of its rate-limit burst is told
// the policy's pollInterval, not a young task's short one, so a client
// that follows pollInterval for many tasks at once slows down before the
// limiter refuses it.
func TestPollIntervalBacksOffNearTheRateLimit(t *testing.T) {
	e := newTaskEnv(t, "", Config{TaskRate: 0.001, TaskBurst: 10})
	task := e.createTask(alice, "block", `{}`, `{}`) // 1 of 10 tokens
	if task.PollInterval != heldYoungPoll {
		t.Fatalf("young task's pollInterval %d ms, want %d", task.PollInterval, heldYoungPoll)
	}
	var polls []int64
	for range 6 { // tokens left after each: 8 7 6 5 4 3
		wt, r := e.get(alice, task.TaskID)
		if r.Error != nil {
			t.Fatalf("tasks/get within the burst: %s", r.raw)
		}
		polls = append(polls, wt.PollInterval)
	}
	young, thrifty := polls[:3], polls[4:] // 8, 7, 6 left vs 4, 3 left
	for i, p := range young {
		if p >= 1000 {
			t.Errorf("poll %d (budget above half): pollInterval %d ms, want the young task's short one", i, p)
		}
	}
	for i, p := range thrifty {
		if p < 1000 {
			t.Errorf("poll %d (budget below half): pollInterval %d ms, want the policy's (>= 1 s)", i+4, p)
		}
	}
	e.call(alice, 1, "tasks/cancel", fmt.Sprintf(`{"taskId":%q}`, task.TaskID))
}
