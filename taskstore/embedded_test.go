package taskstore

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedReclaims is the native store's "nothing leaks": once every
// task and session record has expired, the janitor has removed all of
// their state (tasks, indexes, live sets, leases, queues, inboxes, pending
// requests, session queued sets, owners, session records).
func TestEmbeddedReclaims(t *testing.T) {
	e := newNative(t, Config{})
	ctx := context.Background()
	const ttl = 50 * time.Millisecond
	for i := range 40 {
		owner := ownerA
		if i%2 == 1 {
			owner = ownerB
		}
		task := newSessionTask(owner, sessA)
		task.TTL = ttl
		if err := e.Create(ctx, task, CreateOptions{MaxPerOwner: 100}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Enqueue(ctx, owner, task.ID, KindNotification, []byte("n"), 0); err != nil {
			t.Fatal(err)
		}
		if err := e.AddPending(ctx, owner, sessA, "1", task.ID); err != nil {
			t.Fatal(err)
		}
		if err := e.AddPending(ctx, owner, sessA, task.ID, task.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Answer(ctx, owner, sessA, task.ID, []byte("a")); err != nil {
			t.Fatal(err)
		}
		if err := e.SetListening(ctx, owner, task.ID, time.Minute); err != nil {
			t.Fatal(err)
		}
		switch i % 4 {
		case 0:
			if _, err := e.Finish(ctx, owner, task.ID, Completed, "", benchOutcome); err != nil {
				t.Fatal(err)
			}
		case 1:
			if _, err := e.Cancel(ctx, owner, task.ID, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.SetSessionVersion(ctx, "s", "v", ttl); err != nil {
		t.Fatal(err)
	}
	if err := e.BindSession(ctx, sessA, "cred", ttl); err != nil {
		t.Fatal(err)
	}
	empty := func() bool {
		for i := range e.d.shards {
			sh := &e.d.shards[i]
			sh.mu.Lock()
			n := len(sh.owners) + len(sh.exp) + len(sh.leases) + len(sh.sess) + len(sh.srec)
			sh.mu.Unlock()
			if n != 0 {
				return false
			}
		}
		return true
	}
	if empty() {
		t.Fatal("store empty before anything expired")
	}
	waitFor(t, 10*time.Second, empty)
}

// TestEmbeddedClose: Close signals watchers once and every operation then
// fails with ErrUnavailable.
func TestEmbeddedClose(t *testing.T) {
	e, closer, err := NewEmbedded(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	task := newSessionTask(ownerA, sessA)
	if err := e.Create(ctx, task, CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ch, stop, err := e.Watch(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	events, stopS, err := e.WatchSession(ctx, ownerA, sessA)
	if err != nil {
		t.Fatal(err)
	}
	defer stopS()
	closer()
	closer() // idempotent
	recv(t, ch, "Close")
	if ev := <-events; ev.Kind != SessionRescan {
		t.Errorf("session event at Close = %c, want r", ev.Kind)
	}
	errs := map[string]error{}
	errs["Ping"] = e.Ping(ctx)
	errs["Create"] = e.Create(ctx, newTask(ownerA), CreateOptions{})
	_, errs["Get"] = e.Get(ctx, ownerA, task.ID)
	_, _, errs["Watch"] = e.Watch(ctx, ownerA, task.ID)
	_, errs["Recover"] = e.Recover(ctx, 0, "")
	for op, err := range errs {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s after Close = %v, want ErrUnavailable", op, err)
		}
	}
}

// TestEmbeddedFinishKeepsOutcome: Finish stores the caller's outcome bytes
// themselves (the caller hands them over, Store.Finish), not a copy made
// under the shard's lock: recording a 4 MiB result allocates a few
// hundred bytes, and Outcome returns those very bytes.
func TestEmbeddedFinishKeepsOutcome(t *testing.T) {
	e := newNative(t, Config{})
	ctx := context.Background()
	raw := []byte(`{"content":[{"type":"text","text":"` + strings.Repeat("x", 4<<20) + `"}]}`)
	task := newSessionTask(ownerA, sessA)
	if err := e.Create(ctx, task, CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	{
		if _, err := e.Finish(ctx, ownerA, task.ID, Completed, "", Outcome{Kind: OutcomeResult, Raw: raw}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if allocs := after.TotalAlloc - before.TotalAlloc; allocs > 64<<10 {
		t.Errorf("Finish of a %d-byte outcome allocated %d bytes; want it to keep the bytes, not copy them", len(raw), allocs)
	}
	_, out, err := e.Outcome(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Raw) != len(raw) || &out.Raw[0] != &raw[0] {
		t.Errorf("Outcome returned %d bytes at %p; want the %d bytes Finish was given, at %p", len(out.Raw), &out.Raw[0], len(raw), &raw[0])
	}
}
