package taskstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// bigResult returns a tools/call result of about n bytes.
func bigResult(n int) json.RawMessage {
	b := make([]byte, 0, n+64)
	b = append(b, `{"content":[{"type":"text","text":"`...)
	for len(b) < n {
		b = append(b, "0123456789abcdef"...)
	}
	return append(b, `"}]}`...)
}

// A large outcome is stored and read back verbatim; on Redis it lives in
// its own key expiring with the task (not in the hash a batched read
// returns), a late large Finish leaves nothing behind, and the outcome
// goes when the task expires.
func testSpilledOutcome(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	big := bigResult(spillMin + 10)
	task := newTask(ownerA)
	task.TTL = time.Hour
	mustCreate(t, s, task, CreateOptions{})
	if _, err := s.Finish(ctx, ownerA, task.ID, Completed, "", Outcome{OutcomeResult, big}); err != nil {
		t.Fatalf("Finish with %d bytes: %v", len(big), err)
	}
	other := b.open(t, Config{}) // another replica reads it
	_, out, err := other.Outcome(ctx, ownerA, task.ID)
	if err != nil || out.Kind != OutcomeResult || !bytes.Equal(out.Raw, big) {
		t.Fatalf("Outcome = %s/%d bytes, %v; want result/%d bytes verbatim", out.Kind, len(out.Raw), err, len(big))
	}
	if b.raw != nil {
		if v := b.raw.HGet(ctx, b.k.task(ownerA, task.ID), fOut).Val(); v != spilledRaw {
			t.Errorf("task hash holds %d bytes of outcome, want the spilled marker", len(v))
		}
		d := b.raw.PTTL(ctx, b.k.spilled(ownerA, task.ID)).Val()
		if want := b.raw.PTTL(ctx, b.k.task(ownerA, task.ID)).Val(); d <= 0 || d > want+time.Second || d < want-time.Minute {
			t.Errorf("spilled outcome PTTL %v, task PTTL %v; want the same expiry", d, want)
		}
	}

	late := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	if _, err := s.Cancel(ctx, ownerA, late.ID, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, ownerA, late.ID, Completed, "", Outcome{OutcomeResult, big}); !errors.Is(err, ErrTerminal) {
		t.Errorf("large Finish after Cancel = %v, want ErrTerminal", err)
	}
	if b.raw != nil && b.raw.Exists(ctx, b.k.spilled(ownerA, late.ID)).Val() != 0 {
		t.Error("a refused large Finish left its outcome key")
	}

	short := newTask(ownerA)
	short.TTL = 200 * time.Millisecond
	mustCreate(t, s, short, CreateOptions{})
	if _, err := s.Finish(ctx, ownerA, short.ID, Completed, "", Outcome{OutcomeResult, big}); err != nil {
		t.Fatal(err)
	}
	expire(t, b, s, short.TTL, ownerA, short.ID)
	if _, _, err := s.Outcome(ctx, ownerA, short.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Outcome after expiry = %v, want ErrNotFound", err)
	}
	if b.raw != nil {
		waitFor(t, 5*time.Second, func() bool { return b.raw.Exists(ctx, b.k.spilled(ownerA, short.ID)).Val() == 0 })
	}
}
