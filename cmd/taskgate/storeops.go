package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/proxy"
	"github.com/taskgate/taskgate/taskstore"
)

// ownerKeyName names the owner key SharedSecret keeps in Redis.
const ownerKeyName = "owner-key"

// sharedKey loads the owner key the replicas on one Redis share, installs
// it in the handler and the store, and opens the store's key gate (which
// holds task operations back until then); then it keeps the replicas on
// one key.
//
// Redis can lose the key with its data (a restart without persistence, a
// FLUSHALL, a failover to an empty replica) while replicas keep using it
// from memory; a replica started afterwards would create a new one, and
// from then on a task created on one replica would be "not found" on the
// other. So every interval (a quarter of the lease) each replica re-asserts
// its key with SET NX GET: when the key is missing it writes its own back;
// when Redis holds a different one, it adopts that one. The key in Redis
// wins because it is the only point all replicas see: SET NX lets exactly
// one writer set it after a loss, every replica converges on that value
// within one interval with no further coordination, and a replica that
// starts meanwhile reads the same value. (Keeping the oldest replica's key
// instead would need the replicas to compare and elect, through the same
// Redis that just lost its data.) In the common case the running replicas
// all hold the same key and the first to re-assert writes it back, so
// clients see no change at all.
type sharedKey struct {
	rdb      redis.UniversalClient
	store    *taskstore.Redis
	gate     *taskstore.KeyGate
	timeout  time.Duration
	interval time.Duration // re-assert period; 0 means defaultKeyInterval
	log      zerolog.Logger

	key        []byte // the key in use; set by load, read and swapped by the loop only
	mismatches prometheus.Counter
	rewrites   prometheus.Counter
}

// defaultKeyInterval is sharedKey.interval when unset.
const defaultKeyInterval = 5 * time.Second

// register creates and registers the key's counters; without it they count
// into unregistered collectors.
func (k *sharedKey) register(reg prometheus.Registerer) {
	k.mismatches = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskgate_store_owner_key_mismatches_total",
		Help: "Times this replica found in Redis a different shared owner key than the one it used (another replica wrote a new key after Redis lost its data) and adopted it, or an unreadable one."})
	k.rewrites = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskgate_store_owner_key_rewrites_total",
		Help: "Times this replica found the shared owner key missing from Redis (Redis lost its data) and wrote its own back."})
	reg.MustRegister(k.mismatches, k.rewrites)
}

func (k *sharedKey) counters() {
	if k.mismatches == nil {
		k.register(prometheus.NewRegistry())
	}
}

// load makes one attempt.
func (k *sharedKey) load(ctx context.Context, h *proxy.Handler) error {
	k.counters()
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	key, err := taskstore.SharedSecret(ctx, k.rdb, "", ownerKeyName)
	if err != nil {
		return err
	}
	if err := k.install(h, key); err != nil {
		return err
	}
	k.gate.Open()
	k.log.Info().Str("redis_key", taskstore.SharedSecretKey("", ownerKeyName)).
		Msg("owner key: shared by every taskgate on this Redis (anyone who can read this Redis key can read it; set --owner-key to keep it out of Redis)")
	return nil
}

// install makes key the owner key of h and the store's cursor key.
func (k *sharedKey) install(h *proxy.Handler, key []byte) error {
	if err := k.store.SetCursorKey(key); err != nil {
		return err
	}
	h.SetOwnerKey(key)
	k.key = key
	return nil
}

// reassert makes one check of the key in Redis against k.key (loaded
// before): it writes k.key back when Redis has none, adopts the key Redis
// has when it differs, and keeps the gate's mismatch flag (which fails
// Ping, so /readyz/store) set from a mismatch until a later check finds
// Redis and this replica agreeing. Transport errors change nothing: the
// store probe reports those.
func (k *sharedKey) reassert(ctx context.Context, h *proxy.Handler) error {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	stored, wrote, err := taskstore.AssertSharedSecret(ctx, k.rdb, "", ownerKeyName, k.key)
	redisKey := taskstore.SharedSecretKey("", ownerKeyName)
	switch {
	case errors.Is(err, taskstore.ErrBadSharedSecret):
		if !k.gate.SetMismatch(true) {
			k.mismatches.Inc()
			k.log.Error().Str("redis_key", redisKey).
				Msg("owner key: the value in Redis is not a taskgate key; this replica keeps its own and reports the store not ready until the Redis key is deleted or fixed")
		}
		return err
	case err != nil:
		return err
	case wrote:
		k.rewrites.Inc()
		k.log.Warn().Str("redis_key", redisKey).
			Msg("owner key: missing from Redis, which lost its data (restarted without persistence, flushed, or failed over to an empty replica); wrote this replica's key back. Tasks stored before the loss are gone")
	case !bytes.Equal(stored, k.key):
		if err := k.install(h, stored); err != nil {
			return err
		}
		k.gate.SetMismatch(true)
		k.mismatches.Inc()
		k.log.Error().Str("redis_key", redisKey).
			Msg("owner key: Redis holds a different key than this replica used (another replica wrote a new one after Redis lost its data); adopted it. Tasks this replica created with the old key since the loss are no longer found; the store reports not ready until the next check confirms the key")
		return taskstore.ErrOwnerKeyMismatch
	}
	if k.gate.SetMismatch(false) {
		k.log.Info().Msg("owner key: this replica and Redis agree again")
	}
	return nil
}

// loop retries load until it succeeds, then re-asserts the key every
// interval, until ctx ends.
func (k *sharedKey) loop(ctx context.Context, h *proxy.Handler) {
	for wait := time.Second; !k.gate.IsOpen(); wait = min(2*wait, 10*time.Second) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := k.load(ctx, h); err != nil && ctx.Err() == nil {
			k.log.Debug().Err(err).Stringer("retry_in", wait).Msg("owner key: Redis not reachable yet")
		}
	}
	interval := k.interval
	if interval <= 0 {
		interval = defaultKeyInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = k.reassert(ctx, h)
		}
	}
}

// storeProbe checks the store every interval, keeps taskgate_store_up
// current, logs each change of health with its cause (a wrong password
// named as such), and checks Redis's eviction policy once it answers.
type storeProbe struct {
	store    taskstore.Store
	rdb      redis.UniversalClient // nil for the embedded store
	timeout  time.Duration
	log      zerolog.Logger
	up       prometheus.Gauge
	last     atomic.Pointer[error]
	evictOK  bool // the eviction policy was checked
	wasUp    int  // -1 unknown, 0 down, 1 up
	lastKind string
}

func newStoreProbe(reg prometheus.Registerer, store taskstore.Store, rdb redis.UniversalClient, timeout time.Duration, log zerolog.Logger) *storeProbe {
	p := &storeProbe{store: store, rdb: rdb, timeout: timeout, log: log, wasUp: -1,
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskgate_store_up",
			Help: "1 when the last check of the task store succeeded, else 0 (checked every 5s; /readyz/store checks on demand)."})}
	reg.MustRegister(p.up)
	return p
}

// check pings the store once and reports the result.
func (p *storeProbe) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	err := p.store.Ping(ctx)
	p.last.Store(&err)
	if err != nil {
		p.up.Set(0)
		kind := "unreachable"
		switch {
		case taskstore.IsAuthError(err):
			kind = "auth"
		case errors.Is(err, taskstore.ErrOwnerKeyNotLoaded):
			kind = "key"
		case errors.Is(err, taskstore.ErrOwnerKeyMismatch):
			kind = "key mismatch"
		}
		if p.wasUp != 0 || kind != p.lastKind {
			switch kind {
			case "auth":
				p.log.Error().Err(err).Msg("task store: Redis refused the credentials in --redis (wrong password or user); task operations fail until the URL is fixed")
			case "key":
				p.log.Warn().Msg("task store: Redis answers, the shared owner key is not loaded yet; task operations fail until it is")
			case "key mismatch":
				p.log.Warn().Msg("task store: Redis answers, the shared owner key in Redis differed from this replica's; not ready until they agree")
			default:
				p.log.Warn().Err(err).Msg("task store not reachable; pass-through works, task operations fail until it is")
			}
		}
		p.wasUp, p.lastKind = 0, kind
		return err
	}
	p.up.Set(1)
	if p.wasUp == 0 {
		p.log.Info().Msg("task store reachable again")
	}
	p.wasUp, p.lastKind = 1, ""
	if !p.evictOK && p.rdb != nil {
		p.evictOK = true
		switch pol, err := taskstore.EvictionPolicy(ctx, p.rdb); {
		case err != nil:
			p.log.Debug().Err(err).Msg("task store: cannot read maxmemory-policy (CONFIG may be disabled); make sure it is noeviction")
		case pol != "noeviction":
			p.log.Warn().Str("maxmemory_policy", pol).Msg("task store: Redis may evict keys under memory pressure, which loses tasks; set maxmemory-policy noeviction")
		}
	}
	return nil
}

// loop checks every interval until ctx ends.
func (p *storeProbe) loop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = p.check(ctx)
		}
	}
}

// openedStore is the task store openStore connected.
type openedStore struct {
	store taskstore.Store
	admin taskstore.Admin       // the store's operator view; nil when it has none
	rdb   redis.UniversalClient // nil for the embedded store
	key   *sharedKey            // non-nil: the owner key is to be read from Redis
	close func()
}

// openStore connects the task store: Redis when --redis is set (it need not
// be up yet: taskgate starts, passes traffic through and reports the store
// down), else the embedded one. With --redis and no --owner-key, task
// operations are held back by a taskstore.KeyGate until the shared key is
// loaded.
func openStore(o *options, log zerolog.Logger) (*openedStore, error) {
	cfg := taskstore.Config{CursorKey: []byte(o.ownerKey), OpTimeout: o.storeTimeout,
		SessionTaskDelay: taskstore.DefaultSessionTaskDelay}
	if len(cfg.CursorKey) == 0 {
		cfg.CursorKey = nil
	}
	if o.redisURL == "" {
		s, closer, err := taskstore.NewEmbedded(cfg)
		if err != nil {
			return nil, fmt.Errorf("embedded store: %w", err)
		}
		log.Warn().Msg("using the embedded task store: tasks live in this process only and are lost when it exits; " +
			"set --redis to share tasks between replicas and keep them across restarts")
		return &openedStore{store: s, admin: s, close: closer}, nil
	}
	rdb, err := taskstore.Open(o.redisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	if cfg.WaitReplicas, cfg.WaitTimeout, err = taskstore.ReplicaWait(o.redisURL); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	if cfg.Sentinels, err = taskstore.SentinelOptions(o.redisURL); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	s, err := taskstore.NewRedis(rdb, cfg)
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	out := &openedStore{store: s, rdb: rdb, close: func() { _ = s.Close(); _ = rdb.Close() }}
	out.admin, _ = any(s).(taskstore.Admin)
	if o.ownerKey == "" {
		gate := taskstore.NewKeyGate(s)
		out.store = gate
		out.key = &sharedKey{rdb: rdb, store: s, gate: gate, timeout: o.storeTimeout, log: log}
	}
	return out, nil
}
