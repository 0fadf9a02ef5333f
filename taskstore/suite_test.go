package taskstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// runSuite runs the Store contract tests against one kind of backend. Each
// subtest gets a fresh backend (or a fresh key prefix on a shared server).
func runSuite(t *testing.T, newBackend func(testing.TB) *backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *backend)
	}{
		{"CreateGet_T21_T26_T27", testCreateGet},
		{"CreateValidation", testCreateValidation},
		{"Update_T22_Q19", testUpdate},
		{"FinishOutcome_T36_T38", testFinishOutcome},
		{"SpilledOutcome", testSpilledOutcome},
		{"FinishAfterCancel_T59", testFinishAfterCancel},
		{"TerminalIsFinal_T23_T57_E27", testTerminalIsFinal},
		{"ForeignOwner_T75_E41", testForeignOwner},
		{"UnknownID_T67_E28", testUnknownID},
		{"Expiry_T30_E31_E32", testExpiry},
		{"ListPages_T52_T53", testListPages},
		{"ListDuringCreates_T55", testListDuringCreates},
		{"ListConcurrentCreates_T55", testListConcurrentCreates},
		{"ListBadCursor_T56_T68", testListBadCursor},
		{"ListLimitClamp_Q16", testListLimitClamp},
		{"OwnerLimit_T78_E46_Q23", testOwnerLimit},
		{"WatchAcrossReplicas", testWatch},
		{"WatchKinds", testWatchKinds},
		{"WatchFunc", testWatchFunc},
		{"Recover", testRecover},
		{"RecoverConcurrent", testRecoverConcurrent},
		{"RenewSeesCancel", testRenewSeesCancel},
		{"FinishCancelRace_T59", testFinishCancelRace},
		{"ConcurrentCreates_E14", testConcurrentCreates},
		{"NothingLeaks", testNothingLeaks},
		{"SessionVersion_Q10", testSessionVersion},
		{"StreamFIFO_E37", testStreamFIFO},
		{"StreamConcurrentDrain_H11_E37", testStreamConcurrentDrain},
		{"StreamBound_issue4", testStreamBound},
		{"StreamTerminal_T50", testStreamTerminal},
		{"FinishKeepsNotifications_E38", testFinishKeepsNotifications},
		{"StreamUnknown_T75", testStreamUnknown},
		{"StreamRouting_H11", testStreamRouting},
		{"PendingAnswer", testPendingAnswer},
		{"StreamKeysExpire", testStreamKeysExpire},
		{"SessionBinding", testSessionBinding},
		{"SessionLifetime", testSessionLifetime},
		{"SessionLastCallRace", testSessionLastCallRace},
		{"PendingTask", testPendingTask},
		{"InputRequests", testInputRequests},
		{"InputAnswerRace", testInputAnswerRace},
		{"AdminList", testAdminList},
		{"AdminFindStats", testAdminFindStats},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newBackend(t)) })
	}
}

const (
	ownerA = "owner-a"
	ownerB = "owner-b"
	dayTTL = 24 * time.Hour
)

func newTask(owner string) *Task {
	return &Task{Owner: owner, TTL: dayTTL, PollInterval: time.Second, Tool: "build", UpstreamID: `"up-1"`, Runner: "r1"}
}

func mustCreate(t *testing.T, s Store, task *Task, opt CreateOptions) *Task {
	t.Helper()
	if err := s.Create(testCtx(t), task, opt); err != nil {
		t.Fatalf("Create(%+v) = %v", task, err)
	}
	return task
}

func mustGet(t *testing.T, s Store, owner, id string) *Task {
	t.Helper()
	got, err := s.Get(testCtx(t), owner, id)
	if err != nil {
		t.Fatalf("Get(%s, %s) = %v", owner, id, err)
	}
	return got
}

// taskCmp compares tasks with times by instant.
var taskCmp = cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })

func testCreateGet(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	in := newTask(ownerA)
	in.StatusMessage = "queued"
	in.Session = sessA
	before := time.Now().Truncate(time.Millisecond)
	mustCreate(t, s, in, CreateOptions{})
	if !validID(in.ID) || len(in.ID) != 32 {
		t.Errorf("Create set ID %q, want 32 hex chars", in.ID)
	}
	if in.Status != Working {
		t.Errorf("Create set Status %q, want working (T-21)", in.Status)
	}
	if !in.CreatedAt.Equal(in.UpdatedAt) {
		t.Errorf("CreatedAt %v != UpdatedAt %v at creation (E-07)", in.CreatedAt, in.UpdatedAt)
	}
	if in.CreatedAt.Before(before) || in.CreatedAt.After(time.Now()) {
		t.Errorf("CreatedAt %v not within the call", in.CreatedAt)
	}
	got := mustGet(t, s, ownerA, in.ID)
	if diff := cmp.Diff(in, got, taskCmp); diff != "" {
		t.Errorf("Get after Create mismatch (-created +got):\n%s", diff)
	}
	if got.ExpiresAt() != got.CreatedAt.Add(dayTTL) {
		t.Errorf("ExpiresAt = %v, want CreatedAt+TTL", got.ExpiresAt())
	}
}

func testCreateValidation(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	tests := []struct {
		name string
		task Task
	}{
		{"no owner", Task{TTL: time.Minute}},
		{"brace owner", Task{Owner: "a}b", TTL: time.Minute}},
		{"no ttl", Task{Owner: ownerA}},
		{"bad id", Task{Owner: ownerA, ID: "x}:y", TTL: time.Minute}},
	}
	for _, tt := range tests {
		if err := s.Create(ctx, &tt.task, CreateOptions{}); err == nil {
			t.Errorf("Create(%s) = nil, want error", tt.name)
		}
	}
	// A duplicate id is refused and the first task is untouched.
	first := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	dup := newTask(ownerA)
	dup.ID, dup.Tool = first.ID, "other"
	if err := s.Create(ctx, dup, CreateOptions{}); err == nil {
		t.Errorf("Create(duplicate id) = nil, want error")
	}
	if got := mustGet(t, s, ownerA, first.ID); got.Tool != "build" {
		t.Errorf("after duplicate Create, Tool = %q, want build", got.Tool)
	}
}

func testUpdate(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	steps := []struct {
		st      Status
		msg     string
		wantSt  Status
		wantMsg string
	}{
		{InputRequired, "need a token", InputRequired, "need a token"},
		{Working, "", Working, "need a token"}, // "" keeps the message
		{"", "compiling", Working, "compiling"},
		{InputRequired, "", InputRequired, "compiling"},
		{Working, "resumed", Working, "resumed"},
	}
	prev := task.UpdatedAt
	for _, st := range steps {
		got, err := s.Update(ctx, ownerA, task.ID, st.st, st.msg)
		if err != nil {
			t.Fatalf("Update(%q, %q) = %v", st.st, st.msg, err)
		}
		if got.Status != st.wantSt || got.StatusMessage != st.wantMsg {
			t.Errorf("Update(%q, %q) = %q/%q, want %q/%q", st.st, st.msg, got.Status, got.StatusMessage, st.wantSt, st.wantMsg)
		}
		if got.UpdatedAt.Before(prev) {
			t.Errorf("UpdatedAt went backwards: %v < %v", got.UpdatedAt, prev)
		}
		prev = got.UpdatedAt
		if diff := cmp.Diff(got, mustGet(t, s, ownerA, task.ID), taskCmp); diff != "" {
			t.Errorf("Get after Update mismatch (-update +get):\n%s", diff)
		}
	}
	for _, bad := range []Status{Completed, Failed, Cancelled, "bogus"} {
		if _, err := s.Update(ctx, ownerA, task.ID, bad, ""); err == nil || errors.Is(err, ErrTerminal) {
			t.Errorf("Update(%q) = %v, want a validation error", bad, err)
		}
	}
}

func testFinishOutcome(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	big := make([]byte, 0, 1<<20+64)
	big = append(big, `{"content":[{"type":"text","text":"`...)
	for len(big) < 1<<20 {
		big = append(big, "0123456789abcdef"...)
	}
	big = append(big, `"}],"isError":false}`...)
	tests := []struct {
		name string
		st   Status
		msg  string
		out  Outcome
	}{
		{"result", Completed, "", Outcome{OutcomeResult, json.RawMessage(`{"content":[],"structuredContent":{"a":1}}`)}},
		{"isError result", Failed, "tool reported an error", Outcome{OutcomeResult, json.RawMessage(`{"content":[],"isError":true}`)}},
		{"rpc error", Failed, "upstream error -32602", Outcome{OutcomeError, json.RawMessage(`{"code":-32602,"message":"bad","data":{"x":[1,2]}}`)}},
		{"internal", Failed, "upstream unreachable", Outcome{Kind: OutcomeInternal}},
		{"1 MiB result", Completed, "", Outcome{OutcomeResult, json.RawMessage(big)}},
	}
	for _, tt := range tests {
		task := mustCreate(t, s, newTask(ownerA), CreateOptions{})
		_, out, err := s.Outcome(ctx, ownerA, task.ID)
		if err != nil || out.Kind != OutcomeNone || out.Raw != nil {
			t.Errorf("%s: Outcome before Finish = %+v, %v; want none", tt.name, out, err)
		}
		got, err := s.Finish(ctx, ownerA, task.ID, tt.st, tt.msg, tt.out)
		if err != nil {
			t.Fatalf("%s: Finish = %v", tt.name, err)
		}
		if got.Status != tt.st || got.StatusMessage != tt.msg {
			t.Errorf("%s: Finish = %q/%q, want %q/%q", tt.name, got.Status, got.StatusMessage, tt.st, tt.msg)
		}
		gt, out, err := s.Outcome(ctx, ownerA, task.ID)
		if err != nil {
			t.Fatalf("%s: Outcome = %v", tt.name, err)
		}
		if diff := cmp.Diff(got, gt, taskCmp); diff != "" {
			t.Errorf("%s: Outcome task mismatch (-finish +outcome):\n%s", tt.name, diff)
		}
		if out.Kind != tt.out.Kind || !bytes.Equal(out.Raw, tt.out.Raw) {
			t.Errorf("%s: Outcome = %s/%d bytes, want %s/%d bytes verbatim", tt.name, out.Kind, len(out.Raw), tt.out.Kind, len(tt.out.Raw))
		}
	}
	task := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	for _, bad := range []struct {
		st  Status
		out Outcome
	}{{Cancelled, Outcome{Kind: OutcomeResult}}, {Working, Outcome{Kind: OutcomeResult}}, {Completed, Outcome{}}} {
		if _, err := s.Finish(ctx, ownerA, task.ID, bad.st, "", bad.out); err == nil || errors.Is(err, ErrTerminal) {
			t.Errorf("Finish(%q, %q) = %v, want a validation error", bad.st, bad.out.Kind, err)
		}
	}
}

func testFinishAfterCancel(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	c, err := s.Cancel(ctx, ownerA, task.ID, "cancelled by client")
	if err != nil || c.Status != Cancelled || c.StatusMessage != "cancelled by client" {
		t.Fatalf("Cancel = %+v, %v; want cancelled (T-58)", c, err)
	}
	_, err = s.Finish(ctx, ownerA, task.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{"late":true}`)})
	if !errors.Is(err, ErrTerminal) {
		t.Fatalf("Finish after Cancel = %v, want ErrTerminal (T-59)", err)
	}
	got, out, err := s.Outcome(ctx, ownerA, task.ID)
	if err != nil || got.Status != Cancelled || out.Kind != OutcomeNone || out.Raw != nil {
		t.Errorf("after late Finish: %q, outcome %+v, %v; want cancelled without outcome", got.Status, out, err)
	}
}

func testTerminalIsFinal(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	finish := map[Status]func(id string) error{
		Completed: func(id string) error {
			_, err := s.Finish(ctx, ownerA, id, Completed, "done", Outcome{OutcomeResult, json.RawMessage(`{}`)})
			return err
		},
		Failed: func(id string) error {
			_, err := s.Finish(ctx, ownerA, id, Failed, "broke", Outcome{OutcomeError, json.RawMessage(`{"code":1,"message":"x"}`)})
			return err
		},
		Cancelled: func(id string) error { _, err := s.Cancel(ctx, ownerA, id, "stop"); return err },
	}
	for st, end := range finish {
		task := mustCreate(t, s, newTask(ownerA), CreateOptions{})
		if err := end(task.ID); err != nil {
			t.Fatalf("to %s: %v", st, err)
		}
		before := mustGet(t, s, ownerA, task.ID)
		_, _, beforeOut := s.Outcome(ctx, ownerA, task.ID)
		ops := map[string]error{}
		_, ops["Cancel"] = s.Cancel(ctx, ownerA, task.ID, "again")
		_, ops["Update"] = s.Update(ctx, ownerA, task.ID, Working, "revive")
		_, ops["Finish"] = s.Finish(ctx, ownerA, task.ID, Completed, "late", Outcome{OutcomeResult, json.RawMessage(`{"late":1}`)})
		for op, err := range ops {
			if !errors.Is(err, ErrTerminal) {
				t.Errorf("%s on %s = %v, want ErrTerminal", op, st, err)
			}
		}
		if diff := cmp.Diff(before, mustGet(t, s, ownerA, task.ID), taskCmp); diff != "" {
			t.Errorf("%s task changed by refused ops (-before +after):\n%s", st, diff)
		}
		if _, _, err := s.Outcome(ctx, ownerA, task.ID); !errors.Is(err, beforeOut) {
			t.Errorf("Outcome error changed: %v", err)
		}
	}
}

func testForeignOwner(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	ops := map[string]error{}
	_, ops["Get"] = s.Get(ctx, ownerB, task.ID)
	_, _, ops["Outcome"] = s.Outcome(ctx, ownerB, task.ID)
	_, ops["Update"] = s.Update(ctx, ownerB, task.ID, InputRequired, "x")
	_, ops["Finish"] = s.Finish(ctx, ownerB, task.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)})
	_, ops["Cancel"] = s.Cancel(ctx, ownerB, task.ID, "")
	_, ops["Renew"] = s.Renew(ctx, ownerB, task.ID, time.Minute)
	for op, err := range ops {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s as foreign owner = %v, want ErrNotFound (T-75)", op, err)
		}
	}
	if l, _, err := s.List(ctx, ownerB, "", 100); err != nil || len(l) != 0 {
		t.Errorf("List(ownerB) = %d tasks, %v; want none", len(l), err)
	}
	if got := mustGet(t, s, ownerA, task.ID); got.Status != Working {
		t.Errorf("owner's task changed to %q by foreign calls", got.Status)
	}
}

func testUnknownID(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	for _, id := range []string{"0123456789abcdef0123456789abcdef", "nope", "", "a}b", strings.Repeat("x", 200)} {
		_, err1 := s.Get(ctx, ownerA, id)
		_, _, err2 := s.Outcome(ctx, ownerA, id)
		_, err3 := s.Cancel(ctx, ownerA, id, "")
		_, err4 := s.Update(ctx, ownerA, id, Working, "")
		_, err5 := s.Renew(ctx, ownerA, id, time.Second)
		for i, err := range []error{err1, err2, err3, err4, err5} {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("op %d on id %q = %v, want ErrNotFound (T-67)", i, id, err)
			}
		}
	}
}

// expire waits until tasks with ttl created before the call are gone: on
// miniredis by FastForward, elsewhere by polling Get (no sleeps).
func expire(t *testing.T, b *backend, s Store, ttl time.Duration, owner, id string) {
	t.Helper()
	if b.fastForward != nil {
		b.fastForward(ttl + time.Millisecond)
		return
	}
	waitFor(t, 5*time.Second, func() bool {
		_, err := s.Get(testCtx(t), owner, id)
		return errors.Is(err, ErrNotFound)
	})
}

// waitFor polls cond with backoff until it holds or the deadline passes.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for d := time.Millisecond; !cond(); d = min(2*d, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(d)
	}
}

func testExpiry(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	ttl := 300 * time.Millisecond
	if b.fastForward != nil {
		ttl = time.Hour
	}
	keep := mustCreate(t, s, newTask(ownerA), CreateOptions{}) // 24h: survives
	working := newTask(ownerA)
	working.TTL = ttl
	mustCreate(t, s, working, CreateOptions{})
	done := newTask(ownerA)
	done.TTL = ttl
	mustCreate(t, s, done, CreateOptions{})
	if _, err := s.Finish(ctx, ownerA, done.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	expire(t, b, s, ttl, ownerA, working.ID)
	expire(t, b, s, 0, ownerA, done.ID)
	for _, id := range []string{working.ID, done.ID} {
		ops := map[string]error{}
		_, ops["Get"] = s.Get(ctx, ownerA, id)
		_, _, ops["Outcome"] = s.Outcome(ctx, ownerA, id)
		_, ops["Update"] = s.Update(ctx, ownerA, id, InputRequired, "")
		_, ops["Finish"] = s.Finish(ctx, ownerA, id, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)})
		_, ops["Cancel"] = s.Cancel(ctx, ownerA, id, "")
		_, ops["Renew"] = s.Renew(ctx, ownerA, id, time.Minute)
		for op, err := range ops {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("%s after TTL = %v, want ErrNotFound (T-30, T-31)", op, err)
			}
		}
	}
	list, _, err := s.List(ctx, ownerA, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != keep.ID {
		t.Errorf("List after expiry = %v, want only %s (E-32)", ids(list), keep.ID)
	}
	mustGet(t, s, ownerA, keep.ID)
	// The expired tasks no longer count against MaxPerOwner.
	if err := s.Create(ctx, newTask(ownerA), CreateOptions{MaxPerOwner: 2}); err != nil {
		t.Errorf("Create after expiry with MaxPerOwner 2 = %v, want ok", err)
	}
}

func ids(ts []Task) []string {
	out := make([]string, len(ts))
	for i := range ts {
		out[i] = ts[i].ID
	}
	return out
}

// listAll pages through owner's tasks with page size n.
func listAll(t *testing.T, s Store, owner string, n int, between func(page int)) ([]string, []int) {
	t.Helper()
	var all []string
	var sizes []int
	cursor := ""
	for page := 0; ; page++ {
		l, next, err := s.List(testCtx(t), owner, cursor, n)
		if err != nil {
			t.Fatalf("List page %d = %v", page, err)
		}
		all = append(all, ids(l)...)
		sizes = append(sizes, len(l))
		if next == "" {
			return all, sizes
		}
		if page > 1000 {
			t.Fatal("List does not terminate")
		}
		cursor = next
		if between != nil {
			between(page)
		}
	}
}

func testListPages(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	var want []string
	for range 25 {
		want = append(want, mustCreate(t, s, newTask(ownerA), CreateOptions{}).ID)
	}
	mustCreate(t, s, newTask(ownerB), CreateOptions{}) // not listed for A
	got, sizes := listAll(t, s, ownerA, 10, nil)
	if diff := cmp.Diff([]int{10, 10, 5}, sizes); diff != "" {
		t.Errorf("page sizes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List order/content vs creation (-want +got):\n%s", diff)
	}
	// Full page followed by nothing: no empty trailing page promised, but
	// no cursor after the last task.
	got, sizes = listAll(t, s, ownerA, 25, nil)
	if len(got) != 25 || len(sizes) != 1 {
		t.Errorf("List(limit 25) pages = %v, want one page of 25", sizes)
	}
}

func testListDuringCreates(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	other := b.open(t, Config{}) // another replica creates meanwhile
	var want []string
	for range 12 {
		want = append(want, mustCreate(t, s, newTask(ownerA), CreateOptions{}).ID)
	}
	got, _ := listAll(t, s, ownerA, 5, func(page int) {
		for range 3 {
			want = append(want, mustCreate(t, other, newTask(ownerA), CreateOptions{}).ID)
		}
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tasks listed while others were created (-want +got), each exactly once (T-55):\n%s", diff)
	}
}

// testListConcurrentCreates creates 120 tasks of one owner 20 at a time
// on another replica (concurrently, so several share a millisecond), pages
// through them while 20 more are created, then pages again with several
// page sizes: a walk during creation lists each task at most once and every
// task created before it exactly once; later walks list every task exactly
// once.
func testListConcurrentCreates(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	other := b.open(t, Config{})
	var created []string
	var mu sync.Mutex
	for range 6 {
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				task := newTask(ownerA)
				if err := other.Create(testCtx(t), task, CreateOptions{}); err != nil {
					t.Errorf("Create = %v", err)
					return
				}
				mu.Lock()
				created = append(created, task.ID)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	// Pages read while another batch of 20 is created: each task at most
	// once, and every task created before the walk began is listed.
	mu.Lock()
	before := append([]string(nil), created...)
	mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				task := newTask(ownerA)
				if err := other.Create(testCtx(t), task, CreateOptions{}); err != nil {
					t.Errorf("Create = %v", err)
					return
				}
				mu.Lock()
				created = append(created, task.ID)
				mu.Unlock()
			})
		}
		wg.Wait()
	}()
	during, _ := listAll(t, s, ownerA, 7, nil)
	<-done
	seenDuring := map[string]int{}
	for _, id := range during {
		seenDuring[id]++
		if seenDuring[id] > 1 {
			t.Errorf("task %s listed twice while tasks were created", id)
		}
	}
	for _, id := range before {
		if seenDuring[id] != 1 {
			t.Errorf("task %s, created before the walk, listed %d times while tasks were created", id, seenDuring[id])
		}
	}
	for _, n := range []int{7, 20, 50} {
		got, _ := listAll(t, s, ownerA, n, nil)
		seen := map[string]int{}
		for _, id := range got {
			seen[id]++
		}
		for _, id := range created {
			if seen[id] != 1 {
				t.Errorf("page size %d: task %s listed %d times, want once", n, id, seen[id])
			}
		}
		if len(got) != len(created) {
			t.Errorf("page size %d: listed %d tasks, want %d", n, len(got), len(created))
		}
	}
}

func testListBadCursor(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	for range 3 {
		mustCreate(t, s, newTask(ownerA), CreateOptions{})
		mustCreate(t, s, newTask(ownerB), CreateOptions{})
	}
	_, cur, err := s.List(ctx, ownerA, "", 1)
	if err != nil || cur == "" {
		t.Fatalf("List = %q, %v; want a cursor", cur, err)
	}
	_, curB, err := s.List(ctx, ownerB, "", 1)
	if err != nil || curB == "" {
		t.Fatalf("List(ownerB) = %q, %v; want a cursor", curB, err)
	}
	otherKey := b.open(t, Config{CursorKey: []byte("another key, also 32 bytes long!")})
	flip := []byte(cur)
	flip[len(flip)/2] ^= 1
	tests := map[string]string{
		"tampered":      string(flip),
		"truncated":     cur[:len(cur)-2],
		"garbage":       "not a cursor!",
		"base64 junk":   "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"huge":          strings.Repeat("A", 10000),
		"foreign owner": curB,
	}
	for name, c := range tests {
		if _, _, err := s.List(ctx, ownerA, c, 10); !errors.Is(err, ErrBadCursor) {
			t.Errorf("List(%s cursor) = %v, want ErrBadCursor (T-56)", name, err)
		}
	}
	if _, _, err := otherKey.List(ctx, ownerA, cur, 10); !errors.Is(err, ErrBadCursor) {
		t.Errorf("List(cursor from a store with another CursorKey) = %v, want ErrBadCursor", err)
	}
	if l, _, err := s.List(ctx, ownerA, cur, 10); err != nil || len(l) != 2 {
		t.Errorf("List(valid cursor) = %d tasks, %v; want 2", len(l), err)
	}
}

func testListLimitClamp(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	for range 3 {
		mustCreate(t, s, newTask(ownerA), CreateOptions{})
	}
	for _, tt := range []struct{ limit, want int }{{0, 1}, {-5, 1}, {2, 2}, {5000, 3}} {
		l, next, err := s.List(ctx, ownerA, "", tt.limit)
		if err != nil || len(l) != tt.want || (tt.want < 3) != (next != "") {
			t.Errorf("List(limit %d) = %d tasks, next %q, %v; want %d", tt.limit, len(l), next, err, tt.want)
		}
	}
}

func testOwnerLimit(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	opt := CreateOptions{MaxPerOwner: 2, Lease: time.Minute}
	t1 := mustCreate(t, s, newTask(ownerA), opt)
	mustCreate(t, s, newTask(ownerA), opt)
	var keysBefore []string
	var leasesBefore int64
	if b.raw != nil {
		keysBefore = scanKeys(t, b.raw, b.prefix)
		leasesBefore, _ = b.raw.ZCard(ctx, b.k.adminIndex()).Result()
	}
	over := newTask(ownerA)
	if err := s.Create(ctx, over, opt); !errors.Is(err, ErrOwnerLimit) {
		t.Fatalf("third Create = %v, want ErrOwnerLimit", err)
	}
	if _, err := s.Get(ctx, ownerA, over.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("refused task is readable: %v", err)
	}
	if l, _, _ := s.List(ctx, ownerA, "", 10); len(l) != 2 {
		t.Errorf("List after refused Create = %d tasks, want 2", len(l))
	}
	if b.raw != nil {
		if diff := cmp.Diff(keysBefore, scanKeys(t, b.raw, b.prefix), cmpopts.SortSlices(strings.Compare)); diff != "" {
			t.Errorf("refused Create changed keys (-before +after):\n%s", diff)
		}
		if n, _ := b.raw.ZCard(ctx, b.k.adminIndex()).Result(); n != leasesBefore {
			t.Errorf("admin index has %d members after refused Create, want %d", n, leasesBefore)
		}
	}
	mustCreate(t, s, newTask(ownerB), opt) // other owners unaffected
	if _, err := s.Update(ctx, ownerA, t1.ID, InputRequired, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, newTask(ownerA), opt); !errors.Is(err, ErrOwnerLimit) {
		t.Errorf("Create with an input_required task live = %v, want ErrOwnerLimit", err)
	}
	if _, err := s.Cancel(ctx, ownerA, t1.ID, ""); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, newTask(ownerA), opt) // a terminal task frees its slot
}

// recv waits for a signal on ch.
func recv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("no wake-up after %s", what)
	}
}

// drain empties a 1-buffered signal channel.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

func testWatch(t *testing.T, b *backend) {
	runner := b.open(t, Config{}) // replica running the task
	waiter := b.open(t, Config{}) // replica serving tasks/result
	ctx := testCtx(t)
	task := mustCreate(t, runner, newTask(ownerA), CreateOptions{})
	other := mustCreate(t, runner, newTask(ownerA), CreateOptions{})

	ch, stop, err := waiter.Watch(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ch2, stop2, err := waiter.Watch(ctx, ownerA, task.ID) // second watcher, same channel
	if err != nil {
		t.Fatal(err)
	}
	chOther, stopOther, err := waiter.Watch(ctx, ownerA, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stopOther()

	if _, err := runner.Update(ctx, ownerA, task.ID, InputRequired, "need input"); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "Update")
	recv(t, ch2, "Update (second watcher)")
	stop2()
	stop2() // idempotent

	if _, err := runner.Update(ctx, ownerA, task.ID, Working, ""); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "Update back to working")
	if _, err := runner.Finish(ctx, ownerA, task.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "Finish")
	if got := mustGet(t, waiter, ownerA, task.ID); got.Status != Completed {
		t.Errorf("after wake-up, status = %q, want completed", got.Status)
	}

	if _, err := runner.Cancel(ctx, ownerA, other.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	recv(t, chOther, "Cancel")

	// A refused change publishes nothing.
	drain(ch)
	if _, err := runner.Cancel(ctx, ownerA, task.ID, ""); !errors.Is(err, ErrTerminal) {
		t.Fatal(err)
	}
	if _, err := waiter.Get(ctx, ownerA, task.ID); err != nil { // a round trip for the publish to arrive, if any
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Errorf("wake-up after a refused Cancel")
	default:
	}

	// Re-watching after every watcher left subscribes again.
	stopOther()
	third := mustCreate(t, runner, newTask(ownerA), CreateOptions{})
	ch3, stop3, err := waiter.Watch(ctx, ownerA, third.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	if _, err := runner.Cancel(ctx, ownerA, third.ID, ""); err != nil {
		t.Fatal(err)
	}
	recv(t, ch3, "Cancel after resubscribe")
}

func testRecover(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	dead := mustCreate(t, s, newTask(ownerA), CreateOptions{Lease: time.Second})
	alive := mustCreate(t, s, newTask(ownerA), CreateOptions{Lease: time.Second})
	done := mustCreate(t, s, newTask(ownerB), CreateOptions{Lease: time.Second})
	if st, err := s.Renew(ctx, ownerA, alive.ID, 2*time.Hour); err != nil || st != Working {
		t.Fatalf("Renew = %q, %v; want working", st, err)
	}
	if _, err := s.Finish(ctx, ownerB, done.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// Nothing has expired yet.
	if got, err := s.Recover(ctx, 0, "lost"); err != nil || len(got) != 0 {
		t.Fatalf("Recover now = %v, %v; want none", ids(got), err)
	}
	// An hour later (another replica's clock), with 10 min skew slack.
	later := b.open(t, Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	got, err := later.Recover(ctx, 10*time.Minute, "runner lost (lease expired)")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != dead.ID || got[0].Status != Failed || got[0].StatusMessage != "runner lost (lease expired)" {
		t.Fatalf("Recover = %+v, want only %s failed with the message", got, dead.ID)
	}
	task, out, err := s.Outcome(ctx, ownerA, dead.ID)
	if err != nil || task.Status != Failed || out.Kind != OutcomeInternal {
		t.Errorf("recovered task = %+v %+v %v; want failed/internal", task, out, err)
	}
	if g := mustGet(t, s, ownerA, alive.ID); g.Status != Working {
		t.Errorf("renewed task status = %q, want working", g.Status)
	}
	if got, err := later.Recover(ctx, 10*time.Minute, "again"); err != nil || len(got) != 0 {
		t.Errorf("second Recover = %v, %v; want none (idempotent)", ids(got), err)
	}
	// The recovered task counts as failed (each store writes its own
	// counter changes when asked).
	for _, a := range []Store{s, later} {
		st, err := a.(Admin).AdminStats(ctx)
		if want := map[Status]int{Working: 1, Completed: 1, Failed: 1}; a == later && (err != nil || !maps.Equal(st.ByStatus, want)) {
			t.Errorf("AdminStats after Recover = %v, %v; want %v", st.ByStatus, err, want)
		}
	}
	// The runner's entry moved to the renewed task's lease (so the next
	// Recover does not look at its tasks again before that).
	if b.raw != nil {
		score, err := b.raw.ZScore(ctx, b.k.runners(), "r1").Result()
		if err != nil {
			t.Fatal(err)
		}
		if min := time.Now().Add(time.Hour).UnixMilli(); int64(score) < min {
			t.Errorf("runner entry %v, want past %v (the renewed lease)", int64(score), min)
		}
	}
	// A much later Recover fails the renewed one too; a late Finish is refused.
	muchLater := b.open(t, Config{Now: func() time.Time { return time.Now().Add(3 * time.Hour) }})
	if got, err := muchLater.Recover(ctx, 0, "lost"); err != nil || len(got) != 1 || got[0].ID != alive.ID {
		t.Errorf("Recover +3h = %v, %v; want %s", ids(got), err, alive.ID)
	}
	if _, err := s.Finish(ctx, ownerA, alive.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)}); !errors.Is(err, ErrTerminal) {
		t.Errorf("Finish after Recover = %v, want ErrTerminal", err)
	}
}

func testRecoverConcurrent(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	const n = 30
	want := map[string]bool{}
	for range n {
		want[mustCreate(t, s, newTask(ownerA), CreateOptions{Lease: time.Second}).ID] = true
	}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		r := b.open(t, Config{Now: later})
		wg.Go(func() {
			got, err := r.Recover(testCtx(t), 0, "lost")
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, task := range got {
				seen[task.ID]++
			}
		})
	}
	wg.Wait()
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("task %s returned by %d Recovers, want exactly 1", id, seen[id])
		}
	}
	if len(seen) != n {
		t.Errorf("Recovers returned %d tasks, want %d", len(seen), n)
	}
}

func testRenewSeesCancel(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	if _, err := s.Update(ctx, ownerA, task.ID, InputRequired, ""); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Renew(ctx, ownerA, task.ID, time.Minute); err != nil || st != InputRequired {
		t.Errorf("Renew = %q, %v; want input_required", st, err)
	}
	if _, err := s.Cancel(ctx, ownerA, task.ID, ""); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Renew(ctx, ownerA, task.ID, time.Minute); err != nil || st != Cancelled {
		t.Errorf("Renew after Cancel = %q, %v; want cancelled", st, err)
	}
}

func testFinishCancelRace(t *testing.T, b *backend) {
	a := b.open(t, Config{}) // runner replica
	c := b.open(t, Config{}) // replica handling tasks/cancel
	ctx := testCtx(t)
	wins := map[string]int{}
	for i := range 100 {
		task := mustCreate(t, a, newTask(ownerA), CreateOptions{})
		var finErr, canErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			_, finErr = a.Finish(ctx, ownerA, task.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{"n":1}`)})
		})
		wg.Go(func() { _, canErr = c.Cancel(ctx, ownerA, task.ID, "") })
		wg.Wait()
		got, out, err := a.Outcome(ctx, ownerA, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case finErr == nil && errors.Is(canErr, ErrTerminal):
			wins["finish"]++
			if got.Status != Completed || out.Kind != OutcomeResult {
				t.Errorf("iteration %d: Finish won but task is %q with outcome %q", i, got.Status, out.Kind)
			}
		case canErr == nil && errors.Is(finErr, ErrTerminal):
			wins["cancel"]++
			if got.Status != Cancelled || out.Kind != OutcomeNone || out.Raw != nil {
				t.Errorf("iteration %d: Cancel won but task is %q with outcome %q (T-59)", i, got.Status, out.Kind)
			}
		default:
			t.Errorf("iteration %d: Finish = %v, Cancel = %v; want exactly one to win", i, finErr, canErr)
		}
	}
	t.Logf("wins: %v", wins)
}

func testConcurrentCreates(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	const n = 1000
	idsCh := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			task := newTask(fmt.Sprintf("owner-%d", i%7))
			if err := s.Create(testCtx(t), task, CreateOptions{MaxPerOwner: n}); err != nil {
				t.Errorf("Create %d = %v", i, err)
				return
			}
			idsCh <- task.ID
		})
	}
	wg.Wait()
	close(idsCh)
	seen := map[string]bool{}
	for id := range idsCh {
		if seen[id] {
			t.Errorf("duplicate id %s (E-14)", id)
		}
		seen[id] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct ids, want %d", len(seen), n)
	}
	total := 0
	for o := range 7 {
		all, _ := listAll(t, s, fmt.Sprintf("owner-%d", o), 1000, nil)
		total += len(all)
	}
	if total != n {
		t.Errorf("listed %d tasks, want %d", total, n)
	}
}

// checkTTLs asserts that every key under the prefix expires (nothing leaks).
// The native store has no keys; TestEmbeddedReclaims covers it.
func checkTTLs(t *testing.T, b *backend, after string) {
	t.Helper()
	if b.raw == nil {
		return
	}
	ctx := testCtx(t)
	keys := scanKeys(t, b.raw, b.prefix)
	if len(keys) == 0 {
		t.Errorf("after %s: no keys at all", after)
	}
	for _, k := range keys {
		d, err := b.raw.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d <= 0 {
			t.Errorf("after %s: key %s has PTTL %v, want > 0", after, k, d)
		}
	}
}

func testNothingLeaks(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	steps := []struct {
		name string
		fn   func() error
	}{}
	var t1, t2, t3 *Task
	add := func(name string, fn func() error) {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{name, fn})
	}
	add("Create", func() error {
		t1, t2, t3 = newTask(ownerA), newTask(ownerA), newTask(ownerB)
		t3.TTL = 2 * time.Hour
		for _, x := range []*Task{t1, t2, t3} {
			if err := s.Create(ctx, x, CreateOptions{MaxPerOwner: 5}); err != nil {
				return err
			}
		}
		return nil
	})
	add("Update", func() error { _, err := s.Update(ctx, ownerA, t1.ID, InputRequired, "x"); return err })
	add("AddInputRequest", func() error {
		for _, x := range []*Task{t1, t3} {
			if err := s.AddInputRequest(ctx, x.Owner, x.ID, "in-1", []byte(`{"method":"roots/list"}`)); err != nil {
				return err
			}
		}
		return nil
	})
	add("AnswerInputs", func() error {
		_, _, err := s.AnswerInputs(ctx, ownerA, t1.ID, []InputAnswer{{"in-1", []byte("{}")}})
		return err
	})
	add("Renew", func() error { _, err := s.Renew(ctx, ownerA, t1.ID, time.Hour); return err })
	add("Finish", func() error {
		_, err := s.Finish(ctx, ownerA, t1.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)})
		return err
	})
	add("Cancel", func() error { _, err := s.Cancel(ctx, ownerA, t2.ID, ""); return err })
	add("List", func() error { _, _, err := s.List(ctx, ownerA, "", 10); return err })
	add("Recover", func() error {
		later := b.open(t, Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
		_, err := later.Recover(ctx, 0, "lost")
		return err
	})
	add("SetSessionVersion", func() error { return s.SetSessionVersion(ctx, "sess-1", "2025-11-25", 0) })
	add("Watch", func() error {
		_, stop, err := s.Watch(ctx, ownerA, t1.ID)
		if err == nil {
			stop()
		}
		return err
	})
	for _, st := range steps {
		if err := st.fn(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		checkTTLs(t, b, st.name)
	}
	if b.raw == nil {
		return
	}
	// Keys never outlive the last task by more than indexSlack (+ keepStep).
	ttlMax := dayTTL + indexSlack + keepStep + time.Second
	for _, k := range scanKeys(t, b.raw, b.prefix) {
		if d := b.raw.PTTL(ctx, k).Val(); d > max(ttlMax, DefaultSessionTTL) {
			t.Errorf("key %s PTTL %v exceeds the longest task TTL + slack", k, d)
		}
	}
	got := slices.Sorted(slices.Values(scanKeys(t, b.raw, b.prefix)))
	if len(got) == 0 {
		t.Fatal("no keys")
	}
	for _, k := range got {
		if strings.Contains(k, "sess-1") {
			t.Errorf("raw session id in key %s", k)
		}
	}
}

func testSessionVersion(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	other := b.open(t, Config{})
	ctx := testCtx(t)
	if v, err := s.SessionVersion(ctx, "sess"); err != nil || v != "" {
		t.Errorf("SessionVersion(unknown) = %q, %v; want \"\"", v, err)
	}
	if err := s.SetSessionVersion(ctx, "sess", "2025-06-18", time.Hour); err != nil {
		t.Fatal(err)
	}
	if v, err := other.SessionVersion(ctx, "sess"); err != nil || v != "2025-06-18" {
		t.Errorf("SessionVersion on another replica = %q, %v; want 2025-06-18", v, err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping = %v", err)
	}
	if b.fastForward != nil {
		b.fastForward(time.Hour)
		if v, err := s.SessionVersion(ctx, "sess"); err != nil || v != "" {
			t.Errorf("SessionVersion after TTL = %q, %v; want \"\"", v, err)
		}
	}
}

// testWatchKinds: a runner watching only terminal events and answers is
// not woken by its own updates or queued messages, but is by a cancel from
// another replica and by an answer.
func testWatchKinds(t *testing.T, b *backend) {
	runner := b.open(t, Config{})
	other := b.open(t, Config{})
	ctx := testCtx(t)
	task := newTask(ownerA)
	task.Session = "sess1"
	task = mustCreate(t, runner, task, CreateOptions{})
	ch, stop, err := runner.WatchKinds(ctx, ownerA, task.ID, EventTerminal|EventAnswer)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	all, stopAll, err := runner.Watch(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stopAll()
	if _, err := runner.Update(ctx, ownerA, task.ID, "", "progress 1 of 3"); err != nil {
		t.Fatal(err)
	}
	if _, err := runner.Enqueue(ctx, ownerA, task.ID, KindProgress, []byte(`{"jsonrpc":"2.0","method":"notifications/progress"}`), 10); err != nil {
		t.Fatal(err)
	}
	recv(t, all, "Update/Enqueue on the unfiltered watcher")
	// Once the unfiltered watcher saw both, the filtered one must have
	// had its chance: the fan-out delivers in publish order.
	drain(all)
	if _, err := runner.Enqueue(ctx, ownerA, task.ID, KindProgress, []byte(`{"jsonrpc":"2.0","method":"notifications/progress"}`), 10); err != nil {
		t.Fatal(err)
	}
	recv(t, all, "second Enqueue")
	select {
	case <-ch:
		t.Fatal("the filtered watcher was woken by an update or a queued message")
	default:
	}
	if err := runner.AddPending(ctx, ownerA, "sess1", `"q1"`, task.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Answer(ctx, ownerA, "sess1", `"q1"`, []byte(`{"jsonrpc":"2.0","id":"q1","result":{}}`)); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "Answer")
	if _, err := other.Cancel(ctx, ownerA, task.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "Cancel from another replica")
}

// testWatchFunc: WatchFunc calls its function for the kinds it watches
// (a cancel from another replica, an answer), not for the others, and no
// more once stopped.
func testWatchFunc(t *testing.T, b *backend) {
	runner := b.open(t, Config{})
	other := b.open(t, Config{})
	ctx := testCtx(t)
	task := newTask(ownerA)
	task.Session = "sess1"
	task = mustCreate(t, runner, task, CreateOptions{})
	ch := make(chan struct{}, 1)
	stop, err := runner.WatchFunc(ctx, ownerA, task.ID, EventTerminal|EventAnswer, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	all, stopAll, err := runner.Watch(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stopAll()
	if _, err := runner.Update(ctx, ownerA, task.ID, "", "progress 1 of 3"); err != nil {
		t.Fatal(err)
	}
	recv(t, all, "Update on the unfiltered watcher")
	select {
	case <-ch:
		t.Fatal("the function watching terminal events and answers was called for an update")
	default:
	}
	if err := runner.AddPending(ctx, ownerA, "sess1", `"q1"`, task.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Answer(ctx, ownerA, "sess1", `"q1"`, []byte(`{"jsonrpc":"2.0","id":"q1","result":{}}`)); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "Answer")
	stop()
	stop() // idempotent
	if _, err := other.Cancel(ctx, ownerA, task.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	recv(t, all, "Cancel on the unfiltered watcher")
	select {
	case <-ch:
		t.Fatal("the function was called after stop")
	default:
	}
}
