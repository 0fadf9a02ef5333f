package taskstore

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Runner leases. A task's lease deadline lives in its hash (field lease:
// Create's, then Renew's), and that field is the authority; what lets
// Recover find the tasks whose runner stopped is kept per runner, not per
// task: the runner zset P:runners holds each runner's heartbeat deadline.
// The first Create of a runner registers it (in the same round trip), and
// from then on the store that created it renews the entry every third of
// the runner's longest lease until Close: one command per runner and
// heartbeat, none per task. Recover looks for runners whose entry expired
// more than the skew ago; only when it finds one does it walk the admin
// index (every live task, adminBatch per round trip) for that runner's
// non-terminal tasks, fails those whose own lease expired too, and then
// drops the runner's entry, or moves it to the latest lease it found still
// running (a task renewed meanwhile). So a task whose runner process lives
// is that process's responsibility; a runner that dies is recovered as a
// whole. Tasks created before runner leases existed have entries in the
// old per-task lease zset P:leases, which Recover still drains.

// keepCache remembers the keep-until time this replica last gave a
// long-lived key (an owner's index, the admin index, the runner zset), so
// that the creates of one keepStep skip the PTTL check that would extend
// it. It is only a hint: a key whose expiry another replica or a Redis
// restart changed is checked again within one keepStep, when the wanted
// time passes the remembered one.
type keepCache struct {
	mu sync.Mutex
	m  map[string]int64
}

// keepCacheMax bounds the cache; it is cleared when full (owners come and go).
const keepCacheMax = 4096

// due returns at when key must be extended to at, or 0 when this replica
// already extended it at least that far.
func (c *keepCache) due(key string, at int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key] >= at {
		return 0
	}
	return at
}

// done records that key was extended to at (0: nothing was asked).
func (c *keepCache) done(key string, at int64) {
	if at == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= keepCacheMax {
		c.m = map[string]int64{}
	}
	c.m[key] = max(c.m[key], at)
}

// forget drops key's entry: the next due for it asks for the extension
// (the key was made anew with a shorter expiry than this replica gave it).
func (c *keepCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// runnerBeatCmd raises a runner's heartbeat deadline (never lowers it:
// Recover may have moved it to a renewed task's lease) and keeps the
// runner zset until keep-until.
//
// KEYS[1] runner zset P:runners. ARGV[1] runner, ARGV[2] deadline ms,
// ARGV[3] keep-until ms, ARGV[4] now ms.
// Returns 1.
var runnerBeatCmd = redis.NewScript(`
local cur = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not cur or tonumber(cur) < tonumber(ARGV[2]) then redis.call("ZADD", KEYS[1], ARGV[2], ARGV[1]) end
local p = redis.call("PTTL", KEYS[1])
if p < 0 or tonumber(ARGV[4]) + p < tonumber(ARGV[3]) then redis.call("PEXPIREAT", KEYS[1], ARGV[3]) end
return 1
`)

// runnerDoneCmd settles a dead runner after Recover walked its tasks: its
// entry is removed, or moved to the latest lease still running, but only
// if the entry still has the score Recover read (a heartbeat meanwhile
// means the runner lives).
//
// KEYS[1] runner zset. ARGV[1] runner, ARGV[2] score read, ARGV[3] new
// score (0 = remove).
// Returns 1 settled, 0 changed meanwhile.
var runnerDoneCmd = redis.NewScript(`
local cur = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == "0" then redis.call("ZREM", KEYS[1], ARGV[1]) else redis.call("ZADD", KEYS[1], ARGV[3], ARGV[1]) end
return 1
`)

// runnerBeats is the set of runners a Redis store renews, and the loop
// that renews them.
type runnerBeats struct {
	mu      sync.Mutex
	runners map[string]int64 // runner -> longest lease ms it was given
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
	beat    func(runners map[string]int64) // writes one heartbeat of each
}

// beatReg is a runner's first registration, written with its first Create.
type beatReg struct {
	runner   string
	deadline int64
}

// register notes runner with lease and returns its first registration
// when it is new (or its lease grew), else nil. The first registration
// starts the heartbeat loop.
func (b *runnerBeats) register(runner string, lease time.Duration, now int64) *beatReg {
	ms := lease.Milliseconds()
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.runners[runner]; ok && cur >= ms || b.closed {
		return nil
	}
	if b.runners == nil {
		b.runners = map[string]int64{}
		b.stop = make(chan struct{})
		b.wg.Add(1)
		go b.loop()
	}
	b.runners[runner] = ms
	return &beatReg{runner, now + ms}
}

// loop renews every registered runner each third of the shortest lease.
func (b *runnerBeats) loop() {
	defer b.wg.Done()
	for {
		b.mu.Lock()
		every := DefaultLease
		snap := make(map[string]int64, len(b.runners))
		for r, ms := range b.runners {
			snap[r] = ms
			every = min(every, time.Duration(ms)*time.Millisecond)
		}
		b.mu.Unlock()
		t := time.NewTimer(max(every/3, 10*time.Millisecond))
		select {
		case <-b.stop:
			t.Stop()
			return
		case <-t.C:
		}
		b.beat(snap)
	}
}

// close stops the loop. The runners' entries stay: their tasks are then
// recovered like those of a runner that died.
func (b *runnerBeats) close() {
	b.mu.Lock()
	b.closed = true
	started := b.stop != nil
	b.mu.Unlock()
	if started {
		close(b.stop)
		b.wg.Wait()
	}
}

// beatCall is runnerBeatCmd for runner with deadline.
func (s *Redis) beatCall(runner string, deadline, now int64) scriptCall {
	step := keepStep.Milliseconds()
	keep := (deadline + indexSlack.Milliseconds() + step - 1) / step * step
	return scriptCall{runnerBeatCmd, []string{s.k.runners()}, []any{runner, deadline, keep, now}}
}

// heartbeat writes one heartbeat of each runner (the loop's beat).
// Failures are not reported: the next beat retries, and a runner whose
// beats fail for longer than its lease is recovered like a dead one.
func (s *Redis) heartbeat(runners map[string]int64) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
	defer cancel()
	now := s.nowMS()
	calls := make([]scriptCall, 0, len(runners))
	for r, ms := range runners {
		calls = append(calls, s.beatCall(r, now+ms, now))
	}
	_, _ = s.pipe(ctx, calls)
}

// recoverRunners is Recover's pass over the runner zset: see the comment
// at the top of this file.
func (s *Redis) recoverRunners(ctx context.Context, cutoff, now int64, msg string, failed []Task) ([]Task, error) {
	rctx, cancel := bound(ctx, s.opTimeout)
	zs, err := s.rdb.ZRangeByScoreWithScores(rctx, s.k.runners(), &redis.ZRangeBy{
		Min: "-inf", Max: "(" + strconv.FormatInt(cutoff, 10),
	}).Result()
	cancel()
	if err != nil {
		return failed, wrapErr("recover", "", err)
	}
	if len(zs) == 0 {
		return failed, nil
	}
	dead := make(map[string]float64, len(zs))
	for _, z := range zs {
		r, _ := z.Member.(string)
		dead[r] = z.Score
	}
	running := map[string]int64{} // dead runner -> latest lease still running
	for off := int64(0); ; off += adminBatch {
		var n int
		failed, n, err = s.recoverPage(ctx, off, cutoff, now, msg, dead, running, failed)
		if err != nil {
			return failed, err
		}
		if n < adminBatch {
			break
		}
	}
	rctx, cancel = bound(ctx, s.opTimeout)
	defer cancel()
	calls := make([]scriptCall, 0, len(dead))
	for r, score := range dead {
		calls = append(calls, scriptCall{runnerDoneCmd, []string{s.k.runners()},
			[]any{r, strconv.FormatFloat(score, 'f', 0, 64), running[r]}})
	}
	if _, err := s.pipe(rctx, calls); err != nil {
		return failed, wrapErr("recover", "", err)
	}
	return failed, nil
}

// recoverPage reads one page of the admin index, fails the non-terminal
// tasks of dead runners whose lease expired before cutoff, and records in
// running the latest lease of those still running. It returns the number
// of index members read.
func (s *Redis) recoverPage(ctx context.Context, off, cutoff, now int64, msg string, dead map[string]float64,
	running map[string]int64, failed []Task) ([]Task, int, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	members, err := s.rdb.ZRange(ctx, s.k.adminIndex(), off, off+adminBatch-1).Result()
	if err != nil {
		return failed, 0, wrapErr("recover", "", err)
	}
	p := s.rdb.Pipeline()
	reads := make([]*redis.SliceCmd, len(members))
	for i, m := range members {
		if owner, id, ok := parseLeaseMember(m); ok {
			reads[i] = p.HMGet(ctx, s.k.task(owner, id), fStatus, fRunner, fLease)
		}
	}
	if len(members) > 0 {
		if _, err := p.Exec(ctx); err != nil && !isNil(err) {
			return failed, 0, wrapErr("recover", "", err)
		}
	}
	var calls []scriptCall
	var owners, ids, runners []string
	for i, r := range reads {
		if r == nil {
			continue
		}
		v := r.Val()
		st, _ := v[0].(string)
		runner, _ := v[1].(string)
		if _, ok := dead[runner]; !ok || st == "" || Status(st).Terminal() {
			continue
		}
		owner, id, _ := parseLeaseMember(members[i])
		owners, ids, runners = append(owners, owner), append(ids, id), append(runners, runner)
		calls = append(calls, s.terminateCall(owner, id, Failed, msg, now, Outcome{Kind: OutcomeInternal}, cutoff, "0"))
	}
	if len(calls) == 0 {
		return failed, len(members), nil
	}
	res, err := s.pipe(ctx, calls)
	if err != nil {
		return failed, 0, wrapErr("recover", "", err)
	}
	for i, cmd := range res {
		code, vals, err := scriptReply(cmd)
		if err != nil {
			return failed, 0, wrapErr("recover", ids[i], err)
		}
		switch code {
		case codeOK:
			t, err := decodeTask(owners[i], ids[i], vals)
			if err == nil && t != nil {
				s.stats.moved(t, previousStatus(vals))
				failed = append(failed, *t)
			}
		case codeLeaseLive:
			lease, _ := vals[0].(string)
			if l, err := strconv.ParseInt(lease, 10, 64); err == nil {
				running[runners[i]] = max(running[runners[i]], l)
			}
		}
	}
	return failed, len(members), nil
}

func isNil(err error) bool { return err == redis.Nil }
