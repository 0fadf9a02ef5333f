package taskstore

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// SharedSecret: concurrent first calls on one Redis all get the same key,
// later calls read it back, and another name or prefix is another key; on
// a real redis-server (SET NX GET) and on miniredis.
func TestSharedSecret(t *testing.T) {
	for _, backend := range []string{"redis-server", "miniredis"} {
		t.Run(backend, func(t *testing.T) {
			var addr string
			if backend == "miniredis" {
				addr = miniredis.RunT(t).Addr()
			} else {
				addr = redistest.Start(t)
			}
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			ctx := context.Background()
			keys := make([][]byte, 8)
			var wg sync.WaitGroup
			for i := range keys {
				wg.Go(func() {
					k, err := SharedSecret(ctx, rdb, "", "owner-key")
					if err != nil {
						t.Error(err)
					}
					keys[i] = k
				})
			}
			wg.Wait()
			for i, k := range keys {
				if len(k) != SharedSecretLen || !bytes.Equal(k, keys[0]) {
					t.Fatalf("call %d got %x, call 0 %x; want the same %d-byte key", i, k, keys[0], SharedSecretLen)
				}
			}
			if again, _ := SharedSecret(ctx, rdb, "", "owner-key"); !bytes.Equal(again, keys[0]) {
				t.Errorf("a later call got %x, want %x", again, keys[0])
			}
			if other, _ := SharedSecret(ctx, rdb, "other", "owner-key"); bytes.Equal(other, keys[0]) {
				t.Error("another prefix got the same key")
			}
			if v := rdb.Get(ctx, SharedSecretKey("", "owner-key")).Val(); len(v) != 2*SharedSecretLen {
				t.Errorf("stored value %q, want %d hex digits", v, 2*SharedSecretLen)
			}
			rdb.Set(ctx, SharedSecretKey("", "bad"), "zz", 0)
			if _, err := SharedSecret(ctx, rdb, "", "bad"); err == nil {
				t.Error("a stored value that is not hex was accepted")
			}
		})
	}
}

// A wrong password is recognised as such; a refused connection is not.
func TestIsAuthError(t *testing.T) {
	addr := redistest.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "requirepass", "right-password").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, pass string
		want       bool
	}{{"wrong password", "wrong", true}, {"no password", "", true}} {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: tc.pass, MaxRetries: -1})
		err := c.Ping(ctx).Err()
		c.Close()
		if got := IsAuthError(err); got != tc.want {
			t.Errorf("%s: IsAuthError(%v) = %v, want %v", tc.name, err, got, tc.want)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); IsAuthError(err) {
		t.Errorf("IsAuthError(%v) = true for a refused connection", err)
	}
	if p, err := EvictionPolicy(ctx, admin); err != nil || p != "noeviction" {
		t.Errorf("EvictionPolicy = %q, %v; want noeviction (redis-server's default)", p, err)
	}
}
