package taskstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// inputKeys lists the keys of rs in order.
func inputKeys(rs []InputRequest) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Key
	}
	return out
}

// testInputRequests: the open input requests a runner records are read
// and answered through another replica; an answered key is gone at once,
// its answer reaches the runner's inbox with a wake-up, and the requests go
// with the task's end.
func testInputRequests(t *testing.T, b *backend) {
	runner := b.open(t, Config{})
	other := b.open(t, Config{}) // replica serving tasks/get and tasks/update
	ctx := testCtx(t)
	task := mustCreate(t, runner, newTask(ownerA), CreateOptions{})
	watch, stop, err := runner.WatchKinds(ctx, ownerA, task.ID, EventAnswer)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if got, err := other.InputRequests(ctx, ownerA, task.ID); err != nil || got != nil {
		t.Fatalf("InputRequests before any = %v, %v; want nil, nil", got, err)
	}
	reqs := map[string]string{
		"in-1":  `{"method":"elicitation/create","params":{"message":"name?"}}`,
		"in-2":  `{"method":"roots/list","params":{}}`,
		"in-10": `{"method":"sampling/createMessage","params":{"maxTokens":5}}`,
	}
	updates, stopUpdates, err := other.WatchKinds(ctx, ownerA, task.ID, EventUpdate)
	if err != nil {
		t.Fatal(err)
	}
	defer stopUpdates()
	for _, k := range []string{"in-10", "in-1", "in-2"} {
		drain(updates)
		if err := runner.AddInputRequest(ctx, ownerA, task.ID, k, []byte(reqs[k])); err != nil {
			t.Fatalf("AddInputRequest(%s) = %v", k, err)
		}
		recv(t, updates, "AddInputRequest("+k+")")
	}
	got, err := other.InputRequests(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"in-1", "in-2", "in-10"}, inputKeys(got)); diff != "" {
		t.Errorf("InputRequests keys (-want +got):\n%s", diff)
	}
	for _, r := range got {
		if string(r.Request) != reqs[r.Key] {
			t.Errorf("request %s = %s, want %s", r.Key, r.Request, reqs[r.Key])
		}
	}
	if got, err := other.InputRequests(ctx, ownerB, task.ID); err != nil || got != nil {
		t.Errorf("InputRequests(foreign owner) = %v, %v; want nil, nil", got, err)
	}
	if _, _, err := other.AnswerInputs(ctx, ownerB, task.ID, []InputAnswer{{"in-1", []byte("x")}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("AnswerInputs(foreign owner) = %v, want ErrNotFound", err)
	}
	if err := runner.AddInputRequest(ctx, ownerA, "nosuchtask", "in-1", []byte("{}")); !errors.Is(err, ErrNotFound) {
		t.Errorf("AddInputRequest(unknown task) = %v, want ErrNotFound", err)
	}
	drain(watch)

	// An unknown key and a repeated one are ignored; the answered key is
	// gone for any reader right after.
	taken, open, err := other.AnswerInputs(ctx, ownerA, task.ID, []InputAnswer{
		{"in-2", []byte(`a2`)}, {"in-7", []byte(`unknown`)}, {"in-2", []byte(`again`)},
	})
	if err != nil || open != 2 || !cmp.Equal(taken, []string{"in-2"}) {
		t.Fatalf("AnswerInputs = %q, %d, %v; want [in-2], 2, nil", taken, open, err)
	}
	recv(t, watch, "AnswerInputs")
	for name, s := range map[string]Store{"runner": runner, "other": other} {
		got, err := s.InputRequests(ctx, ownerA, task.ID)
		if err != nil || !cmp.Equal(inputKeys(got), []string{"in-1", "in-10"}) {
			t.Errorf("InputRequests via %s after answer = %q, %v; want [in-1 in-10]", name, inputKeys(got), err)
		}
	}
	if taken, open, err := other.AnswerInputs(ctx, ownerA, task.ID, []InputAnswer{{"in-2", []byte("late")}}); err != nil || taken != nil || open != 2 {
		t.Errorf("AnswerInputs(answered key) = %q, %d, %v; want nothing taken, 2 open", taken, open, err)
	}
	drain(watch)
	taken, open, err = runner.AnswerInputs(ctx, ownerA, task.ID, []InputAnswer{{"in-10", []byte(`a10`)}, {"in-1", []byte(`a1`)}})
	if err != nil || open != 0 || !cmp.Equal(taken, []string{"in-10", "in-1"}) {
		t.Fatalf("AnswerInputs(rest) = %q, %d, %v; want [in-10 in-1], 0, nil", taken, open, err)
	}
	recv(t, watch, "AnswerInputs(rest)")
	inbox, err := runner.TakeAnswers(ctx, ownerA, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a2", "a10", "a1"}, strs(inbox)); diff != "" {
		t.Errorf("TakeAnswers (-want +got):\n%s", diff)
	}
	if got, err := other.InputRequests(ctx, ownerA, task.ID); err != nil || got != nil {
		t.Errorf("InputRequests when all answered = %v, %v; want nil, nil", got, err)
	}

	// The requests go with the task's end.
	if err := runner.AddInputRequest(ctx, ownerA, task.ID, "in-11", []byte(`{"method":"roots/list"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := runner.Finish(ctx, ownerA, task.ID, Completed, "", Outcome{OutcomeResult, []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if got, err := other.InputRequests(ctx, ownerA, task.ID); err != nil || got != nil {
		t.Errorf("InputRequests after Finish = %v, %v; want nil, nil", got, err)
	}
	if _, _, err := other.AnswerInputs(ctx, ownerA, task.ID, []InputAnswer{{"in-11", []byte("x")}}); !errors.Is(err, ErrTerminal) {
		t.Errorf("AnswerInputs after Finish = %v, want ErrTerminal", err)
	}
	if err := runner.AddInputRequest(ctx, ownerA, task.ID, "in-12", []byte("{}")); !errors.Is(err, ErrTerminal) {
		t.Errorf("AddInputRequest after Finish = %v, want ErrTerminal", err)
	}
	if b.raw != nil {
		if n := b.raw.Exists(ctx, b.k.inputs(ownerA, task.ID)).Val(); n != 0 {
			t.Errorf("input request hash still exists after Finish")
		}
	}

	// Cancel and Recover drop them too.
	for _, end := range []string{"cancel", "recover"} {
		tk := newTask(ownerA)
		tk.TTL = time.Hour
		mustCreate(t, runner, tk, CreateOptions{Lease: time.Second})
		if err := runner.AddInputRequest(ctx, ownerA, tk.ID, "in-1", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		switch end {
		case "cancel":
			if _, err := other.Cancel(ctx, ownerA, tk.ID, ""); err != nil {
				t.Fatal(err)
			}
		case "recover":
			later := b.open(t, Config{Now: func() time.Time { return time.Now().Add(time.Minute) }})
			if _, err := later.Recover(ctx, 0, "lost"); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := other.InputRequests(ctx, ownerA, tk.ID); err != nil || got != nil {
			t.Errorf("InputRequests after %s = %v, %v; want nil, nil", end, got, err)
		}
		if b.raw != nil && b.raw.Exists(ctx, b.k.inputs(ownerA, tk.ID)).Val() != 0 {
			t.Errorf("input request hash still exists after %s", end)
		}
	}
}

// testInputAnswerRace: replicas answering the same keys at once take each
// key exactly once.
func testInputAnswerRace(t *testing.T, b *backend) {
	runner := b.open(t, Config{})
	ctx := testCtx(t)
	task := mustCreate(t, runner, newTask(ownerA), CreateOptions{})
	const n = 8
	var all []InputAnswer
	for i := range n {
		k := fmt.Sprintf("in-%d", i+1)
		if err := runner.AddInputRequest(ctx, ownerA, task.ID, k, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		all = append(all, InputAnswer{k, []byte(k)})
	}
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		s := b.open(t, Config{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			taken, _, err := s.AnswerInputs(context.WithoutCancel(ctx), ownerA, task.ID, all)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, k := range taken {
				count[k]++
			}
		}()
	}
	wg.Wait()
	for _, a := range all {
		if count[a.Key] != 1 {
			t.Errorf("key %s taken %d times, want 1", a.Key, count[a.Key])
		}
	}
	inbox, err := runner.TakeAnswers(ctx, ownerA, task.ID)
	if err != nil || len(inbox) != n {
		t.Errorf("TakeAnswers = %d answers, %v; want %d", len(inbox), err, n)
	}
}
