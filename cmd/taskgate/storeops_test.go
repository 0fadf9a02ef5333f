package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/taskstore"
)

// Until the shared owner key is loaded, the operations that create or find
// tasks answer "unavailable" and Ping says why; once loaded they reach the
// store, and the key is the one kept in Redis.
func TestKeyGate(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s, err := taskstore.NewRedis(rdb, taskstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gate := &keyGate{Store: s}
	ctx := context.Background()
	calls := map[string]func() error{
		"Create": func() error {
			return gate.Create(ctx, &taskstore.Task{Owner: "o", Runner: "r", TTL: time.Minute}, taskstore.CreateOptions{})
		},
		"Get":            func() error { _, err := gate.Get(ctx, "o", "x"); return err },
		"Outcome":        func() error { _, _, err := gate.Outcome(ctx, "o", "x"); return err },
		"List":           func() error { _, _, err := gate.List(ctx, "o", "", 10); return err },
		"Cancel":         func() error { _, err := gate.Cancel(ctx, "o", "x", "m"); return err },
		"SessionVersion": func() error { _, err := gate.SessionVersion(ctx, "s"); return err },
		"SetSessionVersion": func() error {
			return gate.SetSessionVersion(ctx, "s", "2025-06-18", time.Minute)
		},
		"Ping":        func() error { return gate.Ping(ctx) },
		"BindSession": func() error { return gate.BindSession(ctx, "s", "anone", time.Minute) },
		"Session":     func() error { _, err := gate.Session(ctx, "s"); return err },
		"StartSessionTask": func() error {
			return gate.StartSessionTask(ctx, "s", "x", time.Now().Add(time.Minute))
		},
		"CloseSession": func() error { _, err := gate.CloseSession(ctx, "s"); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, taskstore.ErrUnavailable) || !errors.Is(err, errKeyNotLoaded) {
			t.Errorf("%s before the key: %v; want unavailable, key not loaded", name, err)
		}
	}
	h, err := proxy.New(proxy.Config{Upstream: "http://127.0.0.1:1/mcp"}, nil, gate, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	k := &sharedKey{rdb: rdb, store: s, gate: gate, timeout: time.Second, log: zerolog.Nop()}
	if err := k.load(ctx, h); err != nil {
		t.Fatal(err)
	}
	for name, call := range calls {
		if err := call(); errors.Is(err, errKeyNotLoaded) {
			t.Errorf("%s after the key: %v", name, err)
		}
	}
	if v := mr.Exists(taskstore.SharedSecretKey("", ownerKeyName)); !v {
		t.Error("no owner key in Redis after load")
	}
}
