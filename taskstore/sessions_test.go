package taskstore

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Session records, run by runSuite on every backend.

// testSessionBinding: a binding is seen by every replica, cannot be taken
// over by another credential, and expires after its ttl.
func testSessionBinding(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	other := b.open(t, Config{})
	ctx := testCtx(t)
	if _, err := s.Session(ctx, sessA); !errors.Is(err, ErrNotFound) {
		t.Errorf("Session(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.Session(ctx, "bad key!"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Session(invalid key) = %v, want ErrNotFound", err)
	}
	if err := s.BindSession(ctx, "bad key!", "cred", time.Hour); err == nil {
		t.Errorf("BindSession(invalid key) succeeded")
	}
	if err := s.BindSession(ctx, sessA, "cred-a", time.Hour); err != nil {
		t.Fatal(err)
	}
	rec, err := other.Session(ctx, sessA)
	if err != nil || rec.Credential != "cred-a" || rec.Closing || len(rec.Tasks) != 0 {
		t.Errorf("Session on another replica = %+v, %v; want bound to cred-a", rec, err)
	}
	if err := other.BindSession(ctx, sessA, "cred-b", time.Hour); !errors.Is(err, ErrSessionBound) {
		t.Errorf("BindSession(another credential) = %v, want ErrSessionBound", err)
	}
	if rec, _ := s.Session(ctx, sessA); rec.Credential != "cred-a" {
		t.Errorf("after a refused rebind the credential is %q, want cred-a", rec.Credential)
	}
	if err := other.BindSession(ctx, sessA, "cred-a", 2*time.Hour); err != nil {
		t.Errorf("BindSession(same credential) = %v, want nil", err)
	}
	if b.raw != nil {
		if pttl := b.raw.PTTL(ctx, b.k.sessionRecord(sessA)).Val(); pttl <= time.Hour || pttl > 2*time.Hour+time.Second {
			t.Errorf("record PTTL %v after rebinding for 2h, want in (1h, 2h]", pttl)
		}
	}
	if b.fastForward != nil {
		b.fastForward(2*time.Hour + time.Millisecond)
		if _, err := s.Session(ctx, sessA); !errors.Is(err, ErrNotFound) {
			t.Errorf("Session after the binding's ttl = %v, want ErrNotFound", err)
		}
	}
}

// testSessionLifetime: a session ended while calls run on it is closing
// until the last of them ends, which alone reports closeNow; no call starts
// on a closing session; calls past their deadline do not hold it open.
func testSessionLifetime(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	other := b.open(t, Config{})
	ctx := testCtx(t)
	until := time.Now().Add(time.Hour)
	if err := s.BindSession(ctx, sessA, "cred", time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2"} {
		if err := s.StartSessionTask(ctx, sessA, id, until); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := other.Session(ctx, sessA)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(SessionRecord{Credential: "cred", Tasks: []string{"t1", "t2"}}, rec, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Session with two calls (-want +got):\n%s", diff)
	}
	deferred, err := other.CloseSession(ctx, sessA)
	if err != nil || !deferred {
		t.Fatalf("CloseSession with running calls = %v, %v; want deferred", deferred, err)
	}
	if rec, _ := s.Session(ctx, sessA); !rec.Closing || rec.Credential != "cred" {
		t.Errorf("Session after a deferred close = %+v, want closing and still bound", rec)
	}
	if err := s.StartSessionTask(ctx, sessA, "t3", until); !errors.Is(err, ErrSessionClosing) {
		t.Errorf("StartSessionTask on a closing session = %v, want ErrSessionClosing", err)
	}
	if now, err := s.EndSessionTask(ctx, sessA, "t1"); err != nil || now {
		t.Errorf("EndSessionTask(t1) = %v, %v; want false (t2 still runs)", now, err)
	}
	if now, err := other.EndSessionTask(ctx, sessA, "t2"); err != nil || !now {
		t.Errorf("EndSessionTask(last call) = %v, %v; want true", now, err)
	}
	if _, err := s.Session(ctx, sessA); !errors.Is(err, ErrNotFound) {
		t.Errorf("Session after its upstream end = %v, want ErrNotFound", err)
	}
	if now, err := s.EndSessionTask(ctx, sessA, "t2"); err != nil || now {
		t.Errorf("EndSessionTask again = %v, %v; want false", now, err)
	}

	// No calls: the close is not deferred, and the record goes.
	if err := s.BindSession(ctx, sessB, "cred", time.Hour); err != nil {
		t.Fatal(err)
	}
	if deferred, err := s.CloseSession(ctx, sessB); err != nil || deferred {
		t.Errorf("CloseSession without calls = %v, %v; want not deferred", deferred, err)
	}
	if _, err := s.Session(ctx, sessB); !errors.Is(err, ErrNotFound) {
		t.Errorf("Session after an immediate close = %v, want ErrNotFound", err)
	}
	if deferred, err := s.CloseSession(ctx, "unknown-session"); err != nil || deferred {
		t.Errorf("CloseSession(unknown) = %v, %v; want not deferred", deferred, err)
	}

	// A call on an unbound session is tracked too; one past its deadline
	// (its runner vanished) is not counted.
	const sessC = "sess-c-0123456789abcdef"
	if err := s.StartSessionTask(ctx, sessC, "gone", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	later := b.open(t, Config{Now: func() time.Time { return time.Now().Add(2 * time.Minute) }})
	if rec, err := later.Session(ctx, sessC); err != nil || len(rec.Tasks) != 0 || rec.Credential != "" {
		t.Errorf("Session after the call's deadline = %+v, %v; want no calls, unbound", rec, err)
	}
	if deferred, err := later.CloseSession(ctx, sessC); err != nil || deferred {
		t.Errorf("CloseSession with only an overdue call = %v, %v; want not deferred", deferred, err)
	}
	if b.raw != nil {
		if n := b.raw.Exists(ctx, b.k.sessionRecord(sessC)).Val(); n != 0 {
			t.Errorf("record of a closed session still exists")
		}
	} else if _, err := s.Session(ctx, sessC); !errors.Is(err, ErrNotFound) {
		t.Errorf("Session of a closed session = %v, want ErrNotFound", err)
	}
}

// testSessionLastCallRace: of concurrent EndSessionTasks of a closing
// session's last calls, on several replicas, exactly one reports closeNow.
func testSessionLastCallRace(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	until := time.Now().Add(time.Hour)
	ids := []string{"c1", "c2", "c3", "c4", "c5", "c6"}
	for _, id := range ids {
		if err := s.StartSessionTask(ctx, sessA, id, until); err != nil {
			t.Fatal(err)
		}
	}
	if deferred, err := s.CloseSession(ctx, sessA); err != nil || !deferred {
		t.Fatalf("CloseSession = %v, %v; want deferred", deferred, err)
	}
	var closes atomic.Int32
	var wg sync.WaitGroup
	for _, id := range ids {
		r := b.open(t, Config{})
		wg.Go(func() {
			now, err := r.EndSessionTask(testCtx(t), sessA, id)
			if err != nil {
				t.Error(err)
			}
			if now {
				closes.Add(1)
			}
		})
	}
	wg.Wait()
	if n := closes.Load(); n != 1 {
		t.Errorf("%d EndSessionTasks reported closeNow, want exactly 1", n)
	}
}

// testPendingTask: a pending request is visible until it is answered.
func testPendingTask(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	other := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, s, newSessionTask(ownerA, sessA), CreateOptions{})
	if _, err := s.PendingTask(ctx, ownerA, sessA, `"q1"`); !errors.Is(err, ErrNotFound) {
		t.Errorf("PendingTask(not pending) = %v, want ErrNotFound", err)
	}
	if err := s.AddPending(ctx, ownerA, sessA, `"q1"`, task.ID); err != nil {
		t.Fatal(err)
	}
	if id, err := other.PendingTask(ctx, ownerA, sessA, `"q1"`); err != nil || id != task.ID {
		t.Errorf("PendingTask on another replica = %q, %v; want %q", id, err, task.ID)
	}
	if _, err := other.PendingTask(ctx, ownerB, sessA, `"q1"`); !errors.Is(err, ErrNotFound) {
		t.Errorf("PendingTask(foreign owner) = %v, want ErrNotFound", err)
	}
	if _, err := other.Answer(ctx, ownerA, sessA, `"q1"`, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PendingTask(ctx, ownerA, sessA, `"q1"`); !errors.Is(err, ErrNotFound) {
		t.Errorf("PendingTask after the answer = %v, want ErrNotFound", err)
	}
}

// BenchmarkSessionTask: the two session-record round trips a task call on
// a session adds (StartSessionTask at creation, EndSessionTask at its end),
// with 8 other calls running on the session.
func BenchmarkSessionTask(b *testing.B) {
	benchBackends(b, func(b *testing.B, s Store) {
		ctx := testCtx(b)
		until := time.Now().Add(time.Hour)
		for _, id := range []string{"o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8"} {
			if err := s.StartSessionTask(ctx, sessA, id, until); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := s.StartSessionTask(ctx, sessA, "t1", until); err != nil {
				b.Fatal(err)
			}
			if _, err := s.EndSessionTask(ctx, sessA, "t1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSessionLookup: a replica's first look at a session it has not
// seen (the owner check reads the record once, then caches it).
func BenchmarkSessionLookup(b *testing.B) {
	benchBackends(b, func(b *testing.B, s Store) {
		ctx := testCtx(b)
		if err := s.BindSession(ctx, sessA, "cred", time.Hour); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Session(ctx, sessA); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestSessionTaskDelay: with Config.SessionTaskDelay a call that ends
// within the delay never reaches Redis; a longer one is recorded after the
// delay, and the store's own CloseSession records its pending calls first.
func TestSessionTaskDelay(t *testing.T) {
	b := miniBackend(t)
	s := b.open(t, Config{SessionTaskDelay: 50 * time.Millisecond})
	other := b.open(t, Config{})
	ctx := testCtx(t)
	until := time.Now().Add(time.Hour)
	const id1, id2, id3 = "call1", "call2", "call3"
	if err := s.StartSessionTask(ctx, sessA, id1, until); err != nil {
		t.Fatal(err)
	}
	if closeNow, err := s.EndSessionTask(ctx, sessA, id1); err != nil || closeNow {
		t.Fatalf("EndSessionTask = %v, %v; want false", closeNow, err)
	}
	if n := b.raw.Exists(ctx, b.k.sessionRecord(sessA)).Val(); n != 0 {
		t.Fatalf("a call that ended within the delay left a session record")
	}
	// A call that outlives the delay is recorded: another replica sees it.
	if err := s.StartSessionTask(ctx, sessA, id2, until); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		rec, err := other.Session(ctx, sessA)
		return err == nil && len(rec.Tasks) == 1 && rec.Tasks[0] == id2
	})
	if deferred, err := other.CloseSession(ctx, sessA); err != nil || !deferred {
		t.Fatalf("CloseSession on another replica = %v, %v; want deferred", deferred, err)
	}
	if closeNow, err := s.EndSessionTask(ctx, sessA, id2); err != nil || !closeNow {
		t.Fatalf("EndSessionTask of the last call = %v, %v; want closeNow", closeNow, err)
	}
	// The store's own CloseSession records its pending call first.
	if err := s.StartSessionTask(ctx, sessB, id3, until); err != nil {
		t.Fatal(err)
	}
	if deferred, err := s.CloseSession(ctx, sessB); err != nil || !deferred {
		t.Fatalf("CloseSession with a pending call = %v, %v; want deferred", deferred, err)
	}
	if closeNow, err := s.EndSessionTask(ctx, sessB, id3); err != nil || !closeNow {
		t.Fatalf("EndSessionTask after CloseSession = %v, %v; want closeNow", closeNow, err)
	}
	// A call whose task asks its client something is recorded at once:
	// its session's end must wait for it on every replica.
	slow := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	const sessC = "sess-c"
	if err := s.StartSessionTask(ctx, sessC, slow.ID, until); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, ownerA, slow.ID, InputRequired, "asks"); err != nil {
		t.Fatal(err)
	}
	if deferred, err := other.CloseSession(ctx, sessC); err != nil || !deferred {
		t.Fatalf("CloseSession on another replica after input_required = %v, %v; want deferred", deferred, err)
	}
	if closeNow, err := s.EndSessionTask(ctx, sessC, slow.ID); err != nil || !closeNow {
		t.Fatalf("EndSessionTask = %v, %v; want closeNow", closeNow, err)
	}
}
