package taskstore

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"
)

// keyGated is the rule KeyGate implements: the Store methods that create
// or find tasks and session records by their owner or session key.
var keyGated = []string{
	"BindSession", "Cancel", "CloseSession", "Create", "Get", "List", "Outcome",
	"Session", "SessionVersion", "SetSessionVersion", "StartSessionTask",
}

// unreachableStore is a Store whose every method but Ping panics: a call
// that reaches it is one the gate let through.
type unreachableStore struct{ Store }

func (unreachableStore) Ping(context.Context) error { return nil }

// Every Store method is either held back by a closed KeyGate (exactly the
// ones in keyGated, which answer ErrOwnerKeyNotLoaded without reaching the
// store) or passed through; a method added to Store falls into one of the
// two, and this test says which.
func TestKeyGateMethods(t *testing.T) {
	gate := NewKeyGate(unreachableStore{})
	v := reflect.ValueOf(gate)
	ctx := reflect.ValueOf(context.Background())
	st := reflect.TypeFor[Store]()
	var held []string
	for i := range st.NumMethod() {
		name := st.Method(i).Name
		if name == "Ping" {
			continue
		}
		m := v.MethodByName(name)
		args := make([]reflect.Value, m.Type().NumIn())
		for j := range args {
			if in := m.Type().In(j); in == reflect.TypeFor[context.Context]() {
				args[j] = ctx
			} else {
				args[j] = reflect.Zero(in)
			}
		}
		reached := func() (reached bool) {
			defer func() {
				if recover() != nil {
					reached = true
				}
			}()
			out := m.Call(args)
			err, _ := out[len(out)-1].Interface().(error)
			if !errors.Is(err, ErrOwnerKeyNotLoaded) || !errors.Is(err, ErrUnavailable) {
				t.Errorf("%s on a closed gate returned %v without reaching the store; want ErrOwnerKeyNotLoaded", name, err)
			}
			return false
		}()
		if !reached {
			held = append(held, name)
		}
	}
	slices.Sort(held)
	if !slices.Equal(held, keyGated) {
		t.Errorf("methods a closed KeyGate holds back = %v, want %v", held, keyGated)
	}
}

// On a real store: a closed gate answers ErrOwnerKeyNotLoaded from the
// gated operations and Ping; once open they reach the store. The mismatch
// flag fails Ping only, until cleared.
func TestKeyGate(t *testing.T) {
	s, closeStore, err := NewEmbedded(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	gate := NewKeyGate(s)
	ctx := context.Background()
	task := &Task{Owner: "o", Runner: "r", TTL: time.Minute}
	calls := map[string]func() error{
		"Create":            func() error { return gate.Create(ctx, task, CreateOptions{}) },
		"Get":               func() error { _, err := gate.Get(ctx, "o", task.ID); return err },
		"Outcome":           func() error { _, _, err := gate.Outcome(ctx, "o", task.ID); return err },
		"List":              func() error { _, _, err := gate.List(ctx, "o", "", 10); return err },
		"SessionVersion":    func() error { _, err := gate.SessionVersion(ctx, "s"); return err },
		"SetSessionVersion": func() error { return gate.SetSessionVersion(ctx, "s", "2025-06-18", time.Minute) },
		"BindSession":       func() error { return gate.BindSession(ctx, "s", "anone", time.Minute) },
		"Session":           func() error { _, err := gate.Session(ctx, "s"); return err },
		"StartSessionTask":  func() error { return gate.StartSessionTask(ctx, "s", task.ID, time.Now().Add(time.Minute)) },
		"Cancel":            func() error { _, err := gate.Cancel(ctx, "o", task.ID, "m"); return err },
		"CloseSession":      func() error { _, err := gate.CloseSession(ctx, "s"); return err },
		"Ping":              func() error { return gate.Ping(ctx) },
	}
	order := []string{"Create", "Get", "Outcome", "List", "SessionVersion", "SetSessionVersion",
		"BindSession", "Session", "StartSessionTask", "Cancel", "CloseSession", "Ping"}
	for _, name := range order {
		if err := calls[name](); !errors.Is(err, ErrOwnerKeyNotLoaded) {
			t.Errorf("%s on a closed gate: %v; want ErrOwnerKeyNotLoaded", name, err)
		}
	}
	if gate.IsOpen() {
		t.Fatal("IsOpen before Open")
	}
	gate.Open()
	if !gate.IsOpen() {
		t.Fatal("not IsOpen after Open")
	}
	task.ID = "t1"
	for _, name := range order {
		if err := calls[name](); err != nil {
			t.Errorf("%s on an open gate: %v", name, err)
		}
	}
	if got, err := s.Get(ctx, "o", "t1"); err != nil || got.Status != Cancelled {
		t.Errorf("the task created through the gate, read from the store: %+v, %v; want cancelled", got, err)
	}

	if was := gate.SetMismatch(true); was {
		t.Error("SetMismatch(true) reported a mismatch set before")
	}
	if err := gate.Ping(ctx); !errors.Is(err, ErrOwnerKeyMismatch) {
		t.Errorf("Ping with the mismatch flag: %v; want ErrOwnerKeyMismatch", err)
	}
	if _, err := gate.Get(ctx, "o", "t1"); err != nil {
		t.Errorf("Get with the mismatch flag: %v; the flag fails Ping only", err)
	}
	if was := gate.SetMismatch(false); !was {
		t.Error("SetMismatch(false) did not report the flag set")
	}
	if err := gate.Ping(ctx); err != nil {
		t.Errorf("Ping after the flag was cleared: %v", err)
	}
}
