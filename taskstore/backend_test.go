package taskstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// backend is one Redis the suite runs against.
type backend struct {
	// open returns a new Store value on the backend's data with its own
	// client and pub/sub (Redis) or clock and cursor key (native): another
	// taskgate replica. Closed in t.Cleanup.
	open func(t testing.TB, cfg Config) Store
	// raw inspects keys; nil for the native store, which has none.
	raw redis.UniversalClient
	// k names the keys raw holds.
	k keys
	// listening reports whether the task's listening mark is still set
	// (by the backend's own clock).
	listening func(owner, id string) bool
	// prefix is unique to the test, so a shared Redis (REDIS_URL) works.
	prefix string
	// fastForward moves the server's TTL clock (miniredis.RunT); nil means
	// the backend expires keys in real time.
	fastForward func(time.Duration)
}

var prefixSeq atomic.Int64

func uniquePrefix() string {
	return fmt.Sprintf("tgtest%d_%d", time.Now().UnixNano()%1e9, prefixSeq.Add(1))
}

func clientOpts(addr string) *redis.Options {
	return &redis.Options{
		Addr: addr, ContextTimeoutEnabled: true,
		DialTimeout: DefaultDialTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout,
		PoolSize: 64, DisableIdentity: true,
	}
}

// storeOn makes a Store over rdb with the test's prefix, closing both in
// t.Cleanup.
func storeOn(t testing.TB, rdb redis.UniversalClient, prefix string, cfg Config, ownsClient bool) *Redis {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = prefix
	}
	if cfg.CursorKey == nil {
		cfg.CursorKey = testCursorKey
	}
	s, err := NewRedis(rdb, cfg)
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if ownsClient {
			_ = rdb.Close()
		}
	})
	return s
}

// miniBackend: miniredis.RunT, TTLs moved by FastForward.
func miniBackend(t testing.TB) *backend {
	m := miniredis.RunT(t)
	raw := redis.NewClient(clientOpts(m.Addr()))
	t.Cleanup(func() { _ = raw.Close() })
	b := &backend{raw: raw, prefix: uniquePrefix(), fastForward: m.FastForward}
	b.k = keys{prefix: b.prefix}
	b.open = func(t testing.TB, cfg Config) Store {
		return storeOn(t, redis.NewClient(clientOpts(m.Addr())), b.prefix, cfg, true)
	}
	b.listening = redisListening(b)
	return b
}

// redisListening checks the listening mark's key.
func redisListening(b *backend) func(owner, id string) bool {
	return func(owner, id string) bool {
		return b.raw.Exists(context.Background(), b.k.listening(owner, id)).Val() != 0
	}
}

// testCursorKey is the cursor key of every test store unless a test sets one.
var testCursorKey = []byte("test cursor key, 32 bytes long!!")

// nativeBackend: the native embedded store (NewEmbedded). Other
// "replicas" are views of the same data with their own clock and cursor
// key.
func nativeBackend(t testing.TB) *backend {
	e := newNative(t, Config{})
	b := &backend{prefix: uniquePrefix()}
	b.open = func(t testing.TB, cfg Config) Store {
		if cfg.CursorKey == nil {
			cfg.CursorKey = testCursorKey
		}
		v, err := e.view(cfg)
		if err != nil {
			t.Fatalf("view: %v", err)
		}
		return v
	}
	b.listening = func(owner, id string) bool {
		sh, o := e.lock(owner)
		defer sh.mu.Unlock()
		t := find(o, id, time.Now().UnixMilli())
		return t != nil && t.listening(time.Now().UnixMilli())
	}
	return b
}

// newNative returns a native store closed in t.Cleanup.
func newNative(t testing.TB, cfg Config) *Embedded {
	t.Helper()
	if cfg.CursorKey == nil {
		cfg.CursorKey = testCursorKey
	}
	e, closer, err := NewEmbedded(cfg)
	if err != nil {
		t.Fatalf("NewEmbedded: %v", err)
	}
	t.Cleanup(closer)
	return e
}

// miniEmbeddedBackend: the miniredis-based embedded store taskgate used
// before the native one (benchmarks compare them). Other "replicas" share
// its client but have their own Store value and pub/sub.
func miniEmbeddedBackend(t testing.TB) *backend {
	prefix := uniquePrefix()
	s, closer, err := newMiniEmbedded(Config{Prefix: prefix, CursorKey: testCursorKey})
	if err != nil {
		t.Fatalf("newMiniEmbedded: %v", err)
	}
	t.Cleanup(closer)
	b := &backend{raw: s.rdb, prefix: prefix, k: keys{prefix: prefix}}
	b.open = func(t testing.TB, cfg Config) Store { return storeOn(t, s.rdb, b.prefix, cfg, false) }
	b.listening = redisListening(b)
	return b
}

// redisServer returns a function making backends on one real redis-server
// (spawned by redistest, or REDIS_URL), each with a fresh prefix.
func redisServer(t testing.TB) func(testing.TB) *backend {
	u := redistest.URL(t)
	o, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", u, err)
	}
	opts := func() *redis.Options {
		c := clientOpts(o.Addr)
		c.Username, c.Password, c.DB = o.Username, o.Password, o.DB
		return c
	}
	return func(t testing.TB) *backend {
		raw := redis.NewClient(opts())
		t.Cleanup(func() { _ = raw.Close() })
		b := &backend{raw: raw, prefix: uniquePrefix()}
		b.k = keys{prefix: b.prefix}
		b.open = func(t testing.TB, cfg Config) Store {
			return storeOn(t, redis.NewClient(opts()), b.prefix, cfg, true)
		}
		b.listening = redisListening(b)
		return b
	}
}

// redisCluster returns a function making backends on a 3-master Cluster.
func redisCluster(t testing.TB) func(testing.TB) *backend {
	addrs := redistest.StartCluster(t)
	opts := func() *redis.ClusterOptions {
		return &redis.ClusterOptions{
			Addrs: addrs, ContextTimeoutEnabled: true,
			DialTimeout: DefaultDialTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout,
			PoolSize: 64, DisableIdentity: true,
		}
	}
	return func(t testing.TB) *backend {
		raw := redis.NewClusterClient(opts())
		t.Cleanup(func() { _ = raw.Close() })
		b := &backend{raw: raw, prefix: uniquePrefix()}
		b.k = keys{prefix: b.prefix}
		b.open = func(t testing.TB, cfg Config) Store {
			return storeOn(t, redis.NewClusterClient(opts()), b.prefix, cfg, true)
		}
		b.listening = redisListening(b)
		return b
	}
}

func TestStoreMiniredis(t *testing.T) { runSuite(t, miniBackend) }

func TestStoreNative(t *testing.T) { runSuite(t, nativeBackend) }

func TestStoreRedisServer(t *testing.T) { runSuite(t, redisServer(t)) }

func TestStoreRedisCluster(t *testing.T) {
	runSuite(t, redisCluster(t))
}

// scanKeys lists the keys under prefix (on every master of a Cluster).
func scanKeys(t testing.TB, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := testCtx(t)
	var out []string
	scan := func(c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for it.Next(ctx) {
			out = append(out, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu = make(chan struct{}, 1)
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu <- struct{}{}
			defer func() { <-mu }()
			return scan(n)
		})
	case *redis.Client:
		err = scan(c)
	default:
		t.Fatalf("scanKeys: client %T", rdb)
	}
	if err != nil {
		t.Fatalf("scan %s:*: %v", prefix, err)
	}
	return out
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
