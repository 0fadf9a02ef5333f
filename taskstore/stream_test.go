package taskstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Task stream tests, part of runSuite (every backend). Spec IDs: H-11
// single delivery, E-37 FIFO, T-50 nothing after terminal, issue-4 queue
// bound.

const (
	sessA = "sess-a-0123456789abcdef"
	sessB = "sess-b-0123456789abcdef"
)

func newSessionTask(owner, session string) *Task {
	t := newTask(owner)
	t.Session = session
	return t
}

func mustEnqueue(t *testing.T, s Store, owner, id string, kind MessageKind, msg string, max int) int {
	t.Helper()
	n, err := s.Enqueue(testCtx(t), owner, id, kind, []byte(msg), max)
	if err != nil {
		t.Fatalf("Enqueue(%s, %q) = %v", id, msg, err)
	}
	return n
}

func mustDrain(t *testing.T, s Store, owner, id string) []string {
	t.Helper()
	msgs, err := s.Drain(testCtx(t), owner, id)
	if err != nil {
		t.Fatalf("Drain(%s) = %v", id, err)
	}
	return msgStrs(msgs)
}

// msgStrs is the Data of each message.
func msgStrs(ms []Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Data)
	}
	return out
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// watchSession subscribes on s and stops in t.Cleanup.
func watchSession(t *testing.T, s Store, owner, session string) <-chan SessionEvent {
	t.Helper()
	ch, stop, err := s.WatchSession(testCtx(t), owner, session)
	if err != nil {
		t.Fatalf("WatchSession(%s) = %v", session, err)
	}
	t.Cleanup(stop)
	return ch
}

// nextEvent waits for the next session event and compares it with want.
func nextEvent(t *testing.T, ch <-chan SessionEvent, want SessionEvent, after string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Errorf("after %s: session event {%c %s}, want {%c %s}", after, got.Kind, got.TaskID, want.Kind, want.TaskID)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("after %s: no session event, want {%c %s}", after, want.Kind, want.TaskID)
	}
}

func testStreamFIFO(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newSessionTask(ownerA, sessA), CreateOptions{})
	if got := mustDrain(t, s, ownerA, task.ID); len(got) != 0 {
		t.Fatalf("Drain of a new task = %q, want nothing", got)
	}
	kinds := []MessageKind{KindProgress, KindRequest, KindNotification}
	var want []string
	for i := range 20 {
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","method":"m","params":{"n":%d}}`, i)
		mustEnqueue(t, s, ownerA, task.ID, kinds[i%3], msg, 0)
		want = append(want, msg)
	}
	want = append(want, "", "\x00binary\xff") // bytes are kept verbatim
	mustEnqueue(t, s, ownerA, task.ID, KindNotification, "", 0)
	mustEnqueue(t, s, ownerA, task.ID, KindRequest, "\x00binary\xff", 0)
	if diff := cmp.Diff(want, mustDrain(t, s, ownerA, task.ID)); diff != "" {
		t.Errorf("Drain order (E-37) (-want +got):\n%s", diff)
	}
	if got := mustDrain(t, s, ownerA, task.ID); len(got) != 0 {
		t.Errorf("second Drain = %q, want nothing (H-11)", got)
	}
	// Requeue puts undelivered messages back at the head, in order.
	mustEnqueue(t, s, ownerA, task.ID, KindProgress, "c", 0)
	if err := s.Requeue(ctx, ownerA, task.ID, []Message{{KindProgress, []byte("a")}, {KindRequest, []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, s, ownerA, task.ID, KindProgress, "d", 0)
	if diff := cmp.Diff([]string{"a", "b", "c", "d"}, mustDrain(t, s, ownerA, task.ID)); diff != "" {
		t.Errorf("Drain after Requeue (-want +got):\n%s", diff)
	}
	if err := s.Requeue(ctx, ownerA, task.ID, nil); err != nil {
		t.Errorf("Requeue(nil) = %v", err)
	}
	// Another replica drains what this one queued.
	mustEnqueue(t, s, ownerA, task.ID, KindRequest, "x", 0)
	if diff := cmp.Diff([]string{"x"}, mustDrain(t, b.open(t, Config{}), ownerA, task.ID)); diff != "" {
		t.Errorf("Drain on another replica (-want +got):\n%s", diff)
	}
	if _, err := s.Enqueue(ctx, ownerA, task.ID, 'x', []byte("bad kind"), 0); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Enqueue(kind 'x') = %v, want a validation error", err)
	}
}

func testStreamConcurrentDrain(t *testing.T, b *backend) {
	const n = 500
	s := b.open(t, Config{})
	task := mustCreate(t, s, newSessionTask(ownerA, sessA), CreateOptions{})
	var (
		wg      sync.WaitGroup
		done    = make(chan struct{})
		batches [2][][]string
	)
	for g := range batches {
		d := b.open(t, Config{}) // each drainer is another replica
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				msgs, err := d.Drain(testCtx(t), ownerA, task.ID)
				if err != nil {
					t.Error(err)
					return
				}
				if len(msgs) > 0 {
					batches[g] = append(batches[g], msgStrs(msgs))
				}
			}
		})
	}
	for i := range n {
		mustEnqueue(t, s, ownerA, task.ID, KindRequest, strconv.Itoa(i), 0)
	}
	close(done)
	wg.Wait()
	rest := mustDrain(t, s, ownerA, task.ID)
	seen := make(map[int]int, n)
	// ordered checks that msgs are increasing; count says whether to count them.
	ordered := func(who string, msgs []string, count bool) {
		prev := -1
		for _, m := range msgs {
			i, err := strconv.Atoi(m)
			if err != nil {
				t.Fatalf("%s drained %q", who, m)
			}
			if i <= prev {
				t.Errorf("%s drained %d after %d (E-37)", who, i, prev)
			}
			prev = i
			if count {
				seen[i]++
			}
		}
	}
	for g, bs := range batches {
		var all []string
		for _, b := range bs {
			ordered(fmt.Sprintf("drainer %d, one Drain,", g), b, false)
			all = append(all, b...)
		}
		ordered(fmt.Sprintf("drainer %d, successive Drains,", g), all, true)
	}
	ordered("final Drain", rest, true)
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("message %d drained %d times, want exactly once (H-11)", i, seen[i])
		}
	}
	t.Logf("batches: %d + %d, final %d", len(batches[0]), len(batches[1]), len(rest))
}

func testStreamBound(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	task := mustCreate(t, s, newSessionTask(ownerA, sessA), CreateOptions{})
	steps := []struct {
		kind    MessageKind
		msg     string
		dropped int
	}{
		{KindProgress, "p1", 0}, {KindProgress, "p2", 0}, {KindProgress, "p3", 0}, {KindProgress, "p4", 0},
		{KindRequest, "r1", 0},
		{KindNotification, "n1", 1}, // drops p1
		{KindProgress, "p5", 1}, {KindProgress, "p6", 1}, {KindProgress, "p7", 1},
		{KindRequest, "r2", 1},
		{KindNotification, "n2", 1},
		{KindProgress, "p8", 1}, {KindProgress, "p9", 1}, {KindProgress, "p10", 1}, // the newest progress goes too
		{KindRequest, "r3", 1}, // drops p10, the last progress
	}
	total := 0
	for _, st := range steps {
		got := mustEnqueue(t, s, ownerA, task.ID, st.kind, st.msg, 5)
		if got != st.dropped {
			t.Errorf("Enqueue(%s, max 5) dropped %d, want %d (issue-4)", st.msg, got, st.dropped)
		}
		total += got
	}
	if total != 10 {
		t.Errorf("dropped %d in all, want all 10 progress messages", total)
	}
	// Progress is gone; now notifications go, oldest first; requests never.
	for _, st := range []struct {
		msg     string
		dropped int
	}{{"r4", 1}, {"r5", 1}, {"r6", 0}} {
		if got := mustEnqueue(t, s, ownerA, task.ID, KindRequest, st.msg, 5); got != st.dropped {
			t.Errorf("Enqueue(%s, max 5) dropped %d, want %d", st.msg, got, st.dropped)
		}
	}
	want := []string{"r1", "r2", "r3", "r4", "r5", "r6"} // over max: requests are never dropped
	if diff := cmp.Diff(want, mustDrain(t, s, ownerA, task.ID)); diff != "" {
		t.Errorf("queue after the bound (-want +got):\n%s", diff)
	}
	// A mixed queue: the oldest progress goes before any notification.
	for _, m := range []string{"n1", "p1", "n2", "p2"} {
		kind := KindNotification
		if m[0] == 'p' {
			kind = KindProgress
		}
		mustEnqueue(t, s, ownerA, task.ID, kind, m, 0)
	}
	if got := mustEnqueue(t, s, ownerA, task.ID, KindNotification, "n3", 2); got != 3 {
		t.Errorf("Enqueue(max 2) on 5 messages dropped %d, want 3", got)
	}
	if diff := cmp.Diff([]string{"n2", "n3"}, mustDrain(t, s, ownerA, task.ID)); diff != "" {
		t.Errorf("queue after trimming to 2 (-want +got):\n%s", diff)
	}
	// Drain returns each message's kind, and requeued messages keep it.
	requeued := []string{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`,
		`{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`,
	}
	for i, k := range []MessageKind{KindProgress, KindRequest, KindNotification} {
		mustEnqueue(t, s, ownerA, task.ID, k, requeued[i], 0)
	}
	drained, err := s.Drain(testCtx(t), ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantMsgs := []Message{{KindProgress, []byte(requeued[0])}, {KindRequest, []byte(requeued[1])}, {KindNotification, []byte(requeued[2])}}
	if diff := cmp.Diff(wantMsgs, drained); diff != "" {
		t.Errorf("Drain with kinds (-want +got):\n%s", diff)
	}
	if err := s.Requeue(testCtx(t), ownerA, task.ID, drained); err != nil {
		t.Fatal(err)
	}
	if err := s.Requeue(testCtx(t), ownerA, task.ID, []Message{{'x', []byte("bad kind")}}); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Requeue(kind 'x') = %v, want a validation error", err)
	}
	if got := mustEnqueue(t, s, ownerA, task.ID, KindRequest, "r", 2); got != 2 {
		t.Errorf("Enqueue(max 2) after Requeue dropped %d, want 2 (progress, then the notification)", got)
	}
	if diff := cmp.Diff([]string{requeued[1], "r"}, mustDrain(t, s, ownerA, task.ID)); diff != "" {
		t.Errorf("queue after trimming requeued messages (-want +got):\n%s", diff)
	}
}

func testStreamTerminal(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	result := Outcome{OutcomeResult, json.RawMessage(`{}`)}
	ends := map[string]func(id string) error{
		"Finish": func(id string) error { _, err := s.Finish(ctx, ownerA, id, Completed, "", result); return err },
		"Cancel": func(id string) error { _, err := s.Cancel(ctx, ownerA, id, "stop"); return err },
		"Recover": func(id string) error {
			later := b.open(t, Config{Now: func() time.Time { return time.Now().Add(time.Hour) }})
			got, err := later.Recover(ctx, 0, "lost")
			if err == nil && (len(got) != 1 || got[0].ID != id) {
				err = fmt.Errorf("recovered %v, want %s", ids(got), id)
			}
			return err
		},
	}
	for name, end := range ends {
		task := mustCreate(t, s, newSessionTask(ownerA, sessA), CreateOptions{Lease: time.Second})
		mustEnqueue(t, s, ownerA, task.ID, KindRequest, "req", 0)
		if err := s.AddPending(ctx, ownerA, sessA, "1", task.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.AddPending(ctx, ownerA, sessA, "2", task.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Answer(ctx, ownerA, sessA, "1", []byte("answer")); err != nil {
			t.Fatal(err)
		}
		if err := s.SetListening(ctx, ownerA, task.ID, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := end(task.ID); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b.raw != nil {
			for _, k := range []string{b.k.queue(ownerA, task.ID), b.k.inbox(ownerA, task.ID), b.k.listening(ownerA, task.ID)} {
				if n := b.raw.Exists(ctx, k).Val(); n != 0 {
					t.Errorf("after %s: key %s still exists", name, k)
				}
			}
		}
		if b.listening(ownerA, task.ID) {
			t.Errorf("after %s: the listening mark is still set", name)
		}
		if got := mustDrain(t, s, ownerA, task.ID); len(got) != 0 {
			t.Errorf("Drain after %s = %q, want nothing (T-50)", name, got)
		}
		if got, err := s.TakeAnswers(ctx, ownerA, task.ID); err != nil || len(got) != 0 {
			t.Errorf("TakeAnswers after %s = %q, %v; want nothing", name, strs(got), err)
		}
		if got, err := s.QueuedTasks(ctx, ownerA, sessA); err != nil || len(got) != 0 {
			t.Errorf("QueuedTasks after %s = %v, %v; want none", name, got, err)
		}
		errs := map[string]error{}
		_, errs["Enqueue"] = s.Enqueue(ctx, ownerA, task.ID, KindProgress, []byte("late"), 0)
		errs["Requeue"] = s.Requeue(ctx, ownerA, task.ID, []Message{{KindRequest, []byte("late")}})
		errs["AddPending"] = s.AddPending(ctx, ownerA, sessA, "3", task.ID)
		for op, err := range errs {
			if !errors.Is(err, ErrTerminal) {
				t.Errorf("%s after %s = %v, want ErrTerminal (T-50)", op, name, err)
			}
		}
		if got := mustDrain(t, s, ownerA, task.ID); len(got) != 0 {
			t.Errorf("Drain after refused Enqueue = %q, want nothing (T-50)", got)
		}
		// A late answer to a request still pending is accepted and dropped.
		if id, err := s.Answer(ctx, ownerA, sessA, "2", []byte("late answer")); err != nil || id != task.ID {
			t.Errorf("late Answer after %s = %q, %v; want %s", name, id, err, task.ID)
		}
		if got, err := s.TakeAnswers(ctx, ownerA, task.ID); err != nil || len(got) != 0 {
			t.Errorf("TakeAnswers after a late Answer = %q, %v; want nothing", strs(got), err)
		}
		// Clearing the mark of a terminal task announces nothing and works.
		if err := s.SetListening(ctx, ownerA, task.ID, 0); err != nil {
			t.Errorf("SetListening(0) after %s = %v", name, err)
		}
	}
}

func testStreamUnknown(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newSessionTask(ownerA, sessA), CreateOptions{})
	for _, c := range []struct{ owner, id string }{
		{ownerB, task.ID}, // foreign owner (T-75)
		{ownerA, "0123456789abcdef0123456789abcdef"},
		{ownerA, "a}b"},
		{"", task.ID},
	} {
		errs := map[string]error{}
		_, errs["Enqueue"] = s.Enqueue(ctx, c.owner, c.id, KindProgress, []byte("x"), 0)
		errs["Requeue"] = s.Requeue(ctx, c.owner, c.id, []Message{{KindRequest, []byte("x")}})
		errs["SetListening"] = s.SetListening(ctx, c.owner, c.id, time.Minute)
		errs["AddPending"] = s.AddPending(ctx, c.owner, sessA, "1", c.id)
		for op, err := range errs {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("%s(%q, %q) = %v, want ErrNotFound", op, c.owner, c.id, err)
			}
		}
	}
	if got := mustDrain(t, s, ownerA, task.ID); len(got) != 0 {
		t.Errorf("foreign Enqueue reached the owner's queue: %q", got)
	}
	if got, err := s.QueuedTasks(ctx, ownerB, sessA); err != nil || len(got) != 0 {
		t.Errorf("QueuedTasks(ownerB) = %v, %v; want none", got, err)
	}
	for _, bad := range []string{"", "a:b", "x}y"} {
		if _, _, err := s.WatchSession(ctx, ownerA, bad); err == nil {
			t.Errorf("WatchSession(session %q) = nil error, want invalid", bad)
		}
	}
	if err := s.AddPending(ctx, ownerA, "a:b", "1", task.ID); err == nil {
		t.Errorf("AddPending(session a:b) = nil, want invalid")
	}
	if err := s.Create(ctx, newSessionTask(ownerA, "not a digest!"), CreateOptions{}); err == nil {
		t.Errorf("Create(session %q) = nil, want invalid", "not a digest!")
	}
}

func testStreamRouting(t *testing.T, b *backend) {
	runner := b.open(t, Config{})  // replica running the task
	getter := b.open(t, Config{})  // replica holding the session's GET stream
	results := b.open(t, Config{}) // replica holding the tasks/result stream
	ctx := testCtx(t)
	task := mustCreate(t, runner, newSessionTask(ownerA, sessA), CreateOptions{})
	other := mustCreate(t, runner, newSessionTask(ownerA, sessB), CreateOptions{})
	bare := mustCreate(t, runner, newTask(ownerA), CreateOptions{}) // no session
	events := watchSession(t, getter, ownerA, sessA)
	eventsB := watchSession(t, getter, ownerA, sessB)
	watch, stop, err := results.Watch(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	// No listener: the session's stream is told, and Watch is signalled.
	mustEnqueue(t, runner, ownerA, task.ID, KindProgress, "m1", 0)
	nextEvent(t, events, SessionEvent{'q', task.ID}, "Enqueue without a listener")
	recv(t, watch, "Enqueue")
	if got, err := getter.QueuedTasks(ctx, ownerA, sessA); err != nil || !cmp.Equal(got, []string{task.ID}) {
		t.Errorf("QueuedTasks = %v, %v; want [%s]", got, err, task.ID)
	}
	if diff := cmp.Diff([]string{"m1"}, mustDrain(t, getter, ownerA, task.ID)); diff != "" {
		t.Errorf("GET stream drain (-want +got):\n%s", diff)
	}
	if got, err := getter.QueuedTasks(ctx, ownerA, sessA); err != nil || len(got) != 0 {
		t.Errorf("QueuedTasks after Drain = %v, %v; want none", got, err)
	}

	// With a listener only Watch is signalled: the next session event is
	// the status change, not a 'q'.
	if err := results.SetListening(ctx, ownerA, task.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	drain(watch)
	mustEnqueue(t, runner, ownerA, task.ID, KindRequest, "m2", 0)
	recv(t, watch, "Enqueue with a listener")
	if _, err := runner.Update(ctx, ownerA, task.ID, InputRequired, "need input"); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, SessionEvent{'s', task.ID}, "Enqueue with a listener, then Update")
	if got, err := getter.QueuedTasks(ctx, ownerA, sessA); err != nil || len(got) != 0 {
		t.Errorf("QueuedTasks with a listener = %v, %v; want none", got, err)
	}
	if diff := cmp.Diff([]string{"m2"}, mustDrain(t, results, ownerA, task.ID)); diff != "" {
		t.Errorf("tasks/result drain (-want +got):\n%s", diff)
	}

	// The stream fails to write m3: it requeues it and leaves; clearing the
	// mark hands the message to the session.
	mustEnqueue(t, runner, ownerA, task.ID, KindRequest, "m3", 0)
	undelivered, err := results.Drain(ctx, ownerA, task.ID)
	if err != nil || !cmp.Equal(msgStrs(undelivered), []string{"m3"}) {
		t.Fatalf("drain = %q, %v; want [m3]", msgStrs(undelivered), err)
	}
	if err := results.Requeue(ctx, ownerA, task.ID, undelivered); err != nil {
		t.Fatal(err)
	}
	if err := results.SetListening(ctx, ownerA, task.ID, 0); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, SessionEvent{'q', task.ID}, "SetListening(0) with a message left")
	if diff := cmp.Diff([]string{"m3"}, mustDrain(t, getter, ownerA, task.ID)); diff != "" {
		t.Errorf("GET stream drain after the listener left (-want +got):\n%s", diff)
	}
	// Requeue without a listener announces too.
	if err := getter.Requeue(ctx, ownerA, task.ID, undelivered); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, SessionEvent{'q', task.ID}, "Requeue without a listener")
	mustDrain(t, getter, ownerA, task.ID)

	// The mark expires after its ttl (here: at once, by the clock).
	short := 200 * time.Millisecond
	if err := results.SetListening(ctx, ownerA, task.ID, short); err != nil {
		t.Fatal(err)
	}
	if b.fastForward != nil {
		b.fastForward(short)
	} else {
		waitFor(t, 5*time.Second, func() bool { return !b.listening(ownerA, task.ID) })
	}
	mustEnqueue(t, runner, ownerA, task.ID, KindRequest, "m4", 0)
	nextEvent(t, events, SessionEvent{'q', task.ID}, "Enqueue after the mark expired")

	// Status changes reach the session: Update and Cancel; sessions are
	// separate; a task without a session publishes on no session channel.
	if _, err := runner.Update(ctx, ownerA, bare.ID, InputRequired, ""); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, runner, ownerA, bare.ID, KindProgress, "b", 0)
	if _, err := runner.Update(ctx, ownerA, other.ID, InputRequired, ""); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, eventsB, SessionEvent{'s', other.ID}, "Update of the other session's task")
	if _, err := runner.Cancel(ctx, ownerA, task.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, SessionEvent{'s', task.ID}, "Cancel")
	if _, err := runner.Finish(ctx, ownerA, other.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, eventsB, SessionEvent{'s', other.ID}, "Finish")
	// A refused change publishes nothing; the next event is the next change.
	if _, err := runner.Cancel(ctx, ownerA, task.ID, ""); !errors.Is(err, ErrTerminal) {
		t.Fatal(err)
	}
	third := mustCreate(t, runner, newSessionTask(ownerA, sessA), CreateOptions{})
	if _, err := runner.Update(ctx, ownerA, third.ID, "", "progress 1/3"); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, SessionEvent{'s', third.ID}, "a refused Cancel, then a message change")
	select {
	case ev := <-events:
		t.Errorf("unexpected session event {%c %s}", ev.Kind, ev.TaskID)
	default:
	}
}

func testPendingAnswer(t *testing.T, b *backend) {
	runner := b.open(t, Config{})
	poster := b.open(t, Config{}) // replica receiving the client's POST
	ctx := testCtx(t)
	task := mustCreate(t, runner, newSessionTask(ownerA, sessA), CreateOptions{})
	watch, stop, err := runner.Watch(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	reqIDs := []string{`1`, `"elicit-1"`, `"with spaces and {braces}: \u00e9"`}
	for _, id := range reqIDs {
		if err := runner.AddPending(ctx, ownerA, sessA, id, task.ID); err != nil {
			t.Fatalf("AddPending(%s) = %v", id, err)
		}
	}
	if err := runner.AddPending(ctx, ownerA, "", `9`, task.ID); err != nil { // a client without a session
		t.Fatalf("AddPending(no session) = %v", err)
	}
	errs := map[string]error{}
	_, errs["unknown id"] = poster.Answer(ctx, ownerA, sessA, `2`, []byte("x"))
	_, errs["other session"] = poster.Answer(ctx, ownerA, sessB, `1`, []byte("x"))
	_, errs["no session"] = poster.Answer(ctx, ownerA, "", `1`, []byte("x"))
	_, errs["foreign owner"] = poster.Answer(ctx, ownerB, sessA, `1`, []byte("x"))
	_, errs["id text differs"] = poster.Answer(ctx, ownerA, sessA, `"1"`, []byte("x"))
	_, errs["bad session"] = poster.Answer(ctx, ownerA, "a:b", `1`, []byte("x"))
	for name, err := range errs {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Answer(%s) = %v, want ErrNotFound", name, err)
		}
	}
	drain(watch)
	var want []string
	for i, id := range reqIDs {
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"n":%d}}`, id, i)
		got, err := poster.Answer(ctx, ownerA, sessA, id, []byte(msg))
		if err != nil || got != task.ID {
			t.Fatalf("Answer(%s) = %q, %v; want %s", id, got, err, task.ID)
		}
		want = append(want, msg)
	}
	if got, err := poster.Answer(ctx, ownerA, "", `9`, []byte("no session")); err != nil || got != task.ID {
		t.Errorf("Answer(no session) = %q, %v; want %s", got, err, task.ID)
	}
	want = append(want, "no session")
	recv(t, watch, "Answer")
	if _, err := poster.Answer(ctx, ownerA, sessA, reqIDs[0], []byte("again")); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Answer = %v, want ErrNotFound", err)
	}
	got, err := runner.TakeAnswers(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, strs(got)); diff != "" {
		t.Errorf("TakeAnswers (-want +got):\n%s", diff)
	}
	if got, err := runner.TakeAnswers(ctx, ownerA, task.ID); err != nil || len(got) != 0 {
		t.Errorf("second TakeAnswers = %q, %v; want nothing", strs(got), err)
	}
	if got, err := runner.TakeAnswers(ctx, ownerB, task.ID); err != nil || len(got) != 0 {
		t.Errorf("TakeAnswers(foreign owner) = %q, %v; want nothing", strs(got), err)
	}
	// Concurrent answers to one request: exactly one wins.
	if err := runner.AddPending(ctx, ownerA, sessA, `42`, task.ID); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 8 {
		p := b.open(t, Config{})
		wg.Go(func() {
			_, err := p.Answer(testCtx(t), ownerA, sessA, `42`, []byte("race"))
			switch {
			case err == nil:
				mu.Lock()
				wins++
				mu.Unlock()
			case !errors.Is(err, ErrNotFound):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d concurrent Answers won, want 1", wins)
	}
	if got, _ := runner.TakeAnswers(ctx, ownerA, task.ID); len(got) != 1 {
		t.Errorf("inbox after concurrent Answers has %d answers, want 1", len(got))
	}
}

// testStreamKeysExpire: every key the stream operations write expires, no
// later than the task (queue, inbox, mark, pending) or a minute after it
// (the session's queued set), and is gone after it.
func testStreamKeysExpire(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	ttl := time.Hour
	if b.fastForward == nil {
		ttl = time.Second
	}
	task := newSessionTask(ownerA, sessA)
	task.TTL = ttl
	mustCreate(t, s, task, CreateOptions{})
	mustEnqueue(t, s, ownerA, task.ID, KindProgress, "m", 0)
	if err := s.AddPending(ctx, ownerA, sessA, "1", task.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPending(ctx, ownerA, sessA, "2", task.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Answer(ctx, ownerA, sessA, "1", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetListening(ctx, ownerA, task.ID, 10*ttl); err != nil { // capped at the task's expiry
		t.Fatal(err)
	}
	if b.raw != nil {
		want := map[string]time.Duration{
			b.k.task(ownerA, task.ID):       ttl,
			b.k.queue(ownerA, task.ID):      ttl,
			b.k.inbox(ownerA, task.ID):      ttl,
			b.k.listening(ownerA, task.ID):  ttl,
			b.k.pending(ownerA, sessA, "2"): ttl,
			b.k.sessQueued(ownerA, sessA):   ttl + indexSlack + keepStep,
			b.k.index(ownerA):               ttl + indexSlack + keepStep,
			b.k.runners():                   DefaultLease + indexSlack + keepStep,
			b.k.adminIndex():                ttl + indexSlack + keepStep,
			b.k.taskOwner(task.ID):          ttl,
		}
		got := map[string]time.Duration{}
		for _, k := range scanKeys(t, b.raw, b.prefix) {
			d, err := b.raw.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			got[k] = d
			max, ok := want[k]
			switch {
			case !ok:
				t.Errorf("unexpected key %s", k)
			case d <= 0 || d > max:
				t.Errorf("key %s has PTTL %v, want in (0, %v]", k, d, max)
			}
		}
		for k := range want {
			if _, ok := got[k]; !ok {
				t.Errorf("key %s missing", k)
			}
		}
	}
	if !b.listening(ownerA, task.ID) {
		t.Errorf("mark not set after SetListening")
	}
	if err := s.SetListening(ctx, ownerA, task.ID, 0); err != nil {
		t.Fatal(err)
	}
	if b.listening(ownerA, task.ID) {
		t.Errorf("mark still set after SetListening(0)")
	}
	switch {
	case b.fastForward != nil:
		b.fastForward(ttl + indexSlack + keepStep + time.Millisecond)
	case b.raw != nil:
		waitFor(t, 5*time.Second, func() bool { return b.raw.Exists(ctx, b.k.queue(ownerA, task.ID)).Val() == 0 })
	default:
		expire(t, b, s, ttl, ownerA, task.ID)
	}
	errs := map[string]error{}
	_, errs["Enqueue"] = s.Enqueue(ctx, ownerA, task.ID, KindRequest, []byte("x"), 0)
	_, errs["Answer"] = s.Answer(ctx, ownerA, sessA, "2", []byte("x"))
	errs["SetListening"] = s.SetListening(ctx, ownerA, task.ID, time.Minute)
	for op, err := range errs {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s after the task expired = %v, want ErrNotFound", op, err)
		}
	}
	if got, err := s.QueuedTasks(ctx, ownerA, sessA); err != nil || len(got) != 0 {
		t.Errorf("QueuedTasks after expiry = %v, %v; want none", got, err)
	}
}

// testFinishKeepsNotifications: messages queued before Finish stay
// deliverable (they precede the result, E-38, E-39); queued requests are
// dropped; nothing can be queued after the end (T-50).
func testFinishKeepsNotifications(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newSessionTask(ownerA, sessA), CreateOptions{})
	mustEnqueue(t, s, ownerA, task.ID, KindProgress, "p1", 0)
	mustEnqueue(t, s, ownerA, task.ID, KindRequest, "req", 0)
	mustEnqueue(t, s, ownerA, task.ID, KindNotification, "log", 0)
	if _, err := s.Finish(ctx, ownerA, task.ID, Completed, "", Outcome{OutcomeResult, json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, ownerA, task.ID, KindProgress, []byte("late"), 0); !errors.Is(err, ErrTerminal) {
		t.Errorf("Enqueue after Finish = %v, want ErrTerminal", err)
	}
	if ids, err := s.QueuedTasks(ctx, ownerA, sessA); err != nil || len(ids) != 1 || ids[0] != task.ID {
		t.Errorf("QueuedTasks after Finish = %v, %v; want the task (its notifications wait)", ids, err)
	}
	if b.raw != nil {
		if pttl := b.raw.PTTL(ctx, b.k.queue(ownerA, task.ID)).Val(); pttl <= 0 {
			t.Errorf("kept queue PTTL = %v, want a TTL", pttl)
		}
	}
	got := mustDrain(t, s, ownerA, task.ID)
	if len(got) != 2 || string(got[0]) != "p1" || string(got[1]) != "log" {
		t.Errorf("Drain after Finish = %q, want [p1 log]", got)
	}
}
