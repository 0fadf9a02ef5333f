package main

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/taskstore"
)

// Until the shared owner key is loaded, the store's key gate holds task
// operations back and Ping says why (which operations: taskstore's
// TestKeyGateMethods); load opens it, and the key is the one kept in Redis.
func TestSharedKeyLoad(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s, err := taskstore.NewRedis(rdb, taskstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gate := taskstore.NewKeyGate(s)
	ctx := context.Background()
	create := func() error {
		return gate.Create(ctx, &taskstore.Task{Owner: "o", Runner: "r", TTL: time.Minute}, taskstore.CreateOptions{})
	}
	if err := create(); !errors.Is(err, taskstore.ErrUnavailable) || !errors.Is(err, taskstore.ErrOwnerKeyNotLoaded) {
		t.Errorf("Create before the key: %v; want unavailable, key not loaded", err)
	}
	if err := gate.Ping(ctx); !errors.Is(err, taskstore.ErrOwnerKeyNotLoaded) {
		t.Errorf("Ping before the key: %v; want key not loaded", err)
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
	if err := create(); err != nil {
		t.Errorf("Create after the key: %v", err)
	}
	if err := gate.Ping(ctx); err != nil {
		t.Errorf("Ping after the key: %v", err)
	}
	if v := mr.Exists(taskstore.SharedSecretKey("", ownerKeyName)); !v {
		t.Error("no owner key in Redis after load")
	}
}

// After Redis loses the shared owner key, a replica writes its own back;
// when Redis holds a different key (another replica wrote one first), the
// replica adopts it, counts and logs the mismatch, and Ping fails until a
// later check finds them agreeing. An unreadable stored value is a
// mismatch that lasts until the value is fixed.
func TestSharedKeyReassert(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s, err := taskstore.NewRedis(rdb, taskstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gate := taskstore.NewKeyGate(s)
	ctx := context.Background()
	h, err := proxy.New(proxy.Config{Upstream: "http://127.0.0.1:1/mcp"}, nil, gate, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	reg := prometheus.NewRegistry()
	k := &sharedKey{rdb: rdb, store: s, gate: gate, timeout: time.Second, log: zerolog.Nop()}
	k.register(reg)
	if err := k.load(ctx, h); err != nil {
		t.Fatal(err)
	}
	redisKey := taskstore.SharedSecretKey("", ownerKeyName)
	mine, _ := mr.Get(redisKey)
	label := func() string { return h.SessionLabel([]byte("session")) }
	labelWith := func(hexKey string) string {
		t.Helper()
		key, err := hex.DecodeString(hexKey)
		if err != nil {
			t.Fatal(err)
		}
		o, err := proxy.New(proxy.Config{Upstream: "http://127.0.0.1:1/mcp", OwnerKey: key}, nil, s, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(ctx)
		return o.SessionLabel([]byte("session"))
	}
	if label() != labelWith(mine) {
		t.Fatal("the handler does not use the key stored in Redis")
	}

	// Redis lost its data: the replica writes its key back.
	mr.FlushAll()
	if err := k.reassert(ctx, h); err != nil {
		t.Fatalf("reassert after a flush: %v", err)
	}
	if v, _ := mr.Get(redisKey); v != mine {
		t.Errorf("key in Redis after the flush and reassert = %q, want this replica's %q", v, mine)
	}
	if n := testutil.ToFloat64(k.rewrites); n != 1 {
		t.Errorf("rewrites = %v, want 1", n)
	}

	// Another replica wrote a different key first: adopt it.
	other := strings.Repeat("ab", 32)
	mr.FlushAll()
	if err := mr.Set(redisKey, other); err != nil {
		t.Fatal(err)
	}
	if err := k.reassert(ctx, h); !errors.Is(err, taskstore.ErrOwnerKeyMismatch) {
		t.Errorf("reassert with a different key in Redis: %v, want ErrOwnerKeyMismatch", err)
	}
	if label() != labelWith(other) {
		t.Error("the handler did not adopt the key found in Redis")
	}
	if n := testutil.ToFloat64(k.mismatches); n != 1 {
		t.Errorf("mismatches = %v, want 1", n)
	}
	if err := gate.Ping(ctx); !errors.Is(err, taskstore.ErrOwnerKeyMismatch) {
		t.Errorf("Ping after the mismatch: %v, want ErrOwnerKeyMismatch", err)
	}
	if err := gate.Create(ctx, &taskstore.Task{Owner: "o", Runner: "r", TTL: time.Minute}, taskstore.CreateOptions{}); err != nil {
		t.Errorf("Create with the adopted key: %v", err)
	}
	if err := k.reassert(ctx, h); err != nil {
		t.Errorf("second reassert: %v", err)
	}
	if err := gate.Ping(ctx); err != nil {
		t.Errorf("Ping once Redis and the replica agree: %v", err)
	}

	// A value taskgate did not write: keep the key, stay not ready.
	if err := mr.Set(redisKey, "not hex"); err != nil {
		t.Fatal(err)
	}
	if err := k.reassert(ctx, h); !errors.Is(err, taskstore.ErrBadSharedSecret) {
		t.Errorf("reassert with a bad value: %v, want ErrBadSharedSecret", err)
	}
	if err := gate.Ping(ctx); !errors.Is(err, taskstore.ErrOwnerKeyMismatch) {
		t.Errorf("Ping with a bad value in Redis: %v, want ErrOwnerKeyMismatch", err)
	}
	if label() != labelWith(other) {
		t.Error("the handler changed its key for a bad value")
	}
	if n := testutil.ToFloat64(k.mismatches); n != 2 {
		t.Errorf("mismatches = %v, want 2", n)
	}
	mr.Del(redisKey)
	if err := k.reassert(ctx, h); err != nil {
		t.Errorf("reassert after the bad value was deleted: %v", err)
	}
	if err := gate.Ping(ctx); err != nil {
		t.Errorf("Ping after the bad value was deleted: %v", err)
	}
}
