package taskstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// AdminStats of the Redis store come from counters, not from reading the
// tasks, and cost Redis nothing per task: each store counts in memory the
// status changes it makes and writes the sums every statFlush in one
// pipeline (a few commands per replica and flush, whatever the number of
// tasks; nothing when nothing changed).
//
//   - Per status and tool, in buckets by the tasks' expiry second:
//     P:st:<s> (hash "<status>\x1f<tool>" -> count, expiring with its
//     tasks) for the tasks expiring in the second before unix second s,
//     and P:stb (zset of those s). A create adds 1 to working; a status
//     change (Update, Finish, Cancel, Recover) moves 1 between two fields
//     of the task's bucket. AdminStats sums the buckets of the seconds
//     not yet over: O(buckets + statuses x tools), at most one bucket per
//     second of the longest TTL, however many tasks.
//   - Oldest running task per tool: each store keeps the tasks it created
//     and has not ended (its runner's calls) and writes the oldest per
//     tool to P:sr:<instance> (hash tool -> CreatedAt ms) with P:srs (zset
//     instance -> until when the hash counts) when it changed, and every
//     runnerStatTTL/2 while it has any.
//     AdminStats takes the minimum over the live instances.
//
// What this trades: a task is counted until the end of its expiry second
// (up to 1 s after it expired); a replica's last statFlush of changes is
// lost when it dies (the buckets they fall in are off by that much until
// they expire with their tasks: never longer than the tasks' TTL); the
// oldest running task of a replica that died is dropped within
// runnerStatTTL (its tasks stay counted as running until Recover fails
// them); and another replica's changes show up within statFlush (the
// replica asked flushes its own first, so one replica's AdminStats is
// exact).

// statFlush is how often a store writes its counts (when it has any).
const statFlush = 250 * time.Millisecond

// runnerStatTTL is how long a replica's oldest-running entry counts after
// it was written; a replica rewrites it when it changed or is half that
// old.
const runnerStatTTL = 5 * time.Second

// statField is the counter of status st and tool.
func statField(st Status, tool string) string { return string(st) + "\x1f" + tool }

// runningTask is a task this store created and has not ended.
type runningTask struct {
	tool         string
	created, exp int64 // unix ms
}

// statCounts are a store's unwritten counter changes and its running
// tasks. Safe for concurrent use.
type statCounts struct {
	flush func(context.Context) error // the store's flushStats

	mu      sync.Mutex
	delta   map[int64]map[string]int64 // expiry second -> statField -> change
	running map[string]runningTask     // "<owner>/<id>"
	shown   bool                       // an oldest-running hash was written and not cleared
	written map[string]int64           // the oldest-running hash as last written
	wroteAt int64                      // when (unix ms)
	inst    string
	noTimer bool // tests: write only from AdminStats and Close
	stop    chan struct{}
	done    chan struct{}
	closed  bool
}

// bucketOf is the expiry bucket of a task expiring at exp ms: the first
// unix second at or after exp.
func bucketOf(exp int64) int64 { return (exp + 999) / 1000 }

// add records a change of n tasks in status st of tool expiring at exp;
// the caller holds mu.
func (c *statCounts) add(exp int64, st Status, tool string, n int64) {
	if c.delta == nil {
		c.delta = map[int64]map[string]int64{}
	}
	b := bucketOf(exp)
	m := c.delta[b]
	if m == nil {
		m = map[string]int64{}
		c.delta[b] = m
	}
	m[statField(st, tool)] += n
}

// start begins the flush loop once; the caller holds mu.
func (c *statCounts) start() {
	if c.stop != nil || c.closed {
		return
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	c.inst = hex.EncodeToString(b[:])
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	if c.noTimer {
		close(c.done)
		return
	}
	go c.loop(c.stop, c.done)
}

func (c *statCounts) loop(stop, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(statFlush)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), statFlush)
			_ = c.flush(ctx) // kept and retried next time
			cancel()
		}
	}
}

// close stops the loop after a last flush.
func (c *statCounts) close() {
	c.mu.Lock()
	c.closed = true
	stop, done := c.stop, c.done
	c.mu.Unlock()
	if stop == nil {
		return
	}
	close(stop)
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), statFlush)
	defer cancel()
	_ = c.flush(ctx)
}

// created counts a new working task.
func (c *statCounts) created(t *Task) {
	exp := t.CreatedAt.Add(t.TTL).UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(exp, Working, t.Tool, 1)
	if c.running == nil {
		c.running = map[string]runningTask{}
	}
	c.running[leaseMember(t.Owner, t.ID)] = runningTask{t.Tool, t.CreatedAt.UnixMilli(), exp}
	c.start()
}

// moved counts t's change from status was to t.Status (a script's reply).
func (c *statCounts) moved(t *Task, was string) {
	if was == "" || Status(was) == t.Status {
		return
	}
	exp := t.ExpiresAt().UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(exp, Status(was), t.Tool, -1)
	c.add(exp, t.Status, t.Tool, 1)
	if t.Status.Terminal() {
		delete(c.running, leaseMember(t.Owner, t.ID))
	}
	c.start()
}

// ended forgets a running task that turned out terminal or gone.
func (c *statCounts) ended(owner, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.running, leaseMember(owner, id))
}

// take returns the unwritten changes and the oldest running task per tool
// (expired ones dropped), and whether an oldest-running hash must be
// written or cleared.
func (c *statCounts) take(now int64) (delta map[int64]map[string]int64, oldest map[string]int64, show bool, inst string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delta, c.delta = c.delta, nil
	oldest = map[string]int64{}
	for k, r := range c.running {
		if r.exp <= now {
			delete(c.running, k)
			continue
		}
		if o, ok := oldest[r.tool]; !ok || r.created < o {
			oldest[r.tool] = r.created
		}
	}
	show = (len(oldest) > 0 || c.shown) &&
		(!maps.Equal(oldest, c.written) || now-c.wroteAt >= runnerStatTTL.Milliseconds()/2)
	if show {
		c.shown = len(oldest) > 0
		c.written, c.wroteAt = oldest, now
	}
	return delta, oldest, show, c.inst
}

// putBack merges changes a failed flush did not write.
func (c *statCounts) putBack(delta map[int64]map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for b, m := range delta {
		for f, n := range m {
			if c.delta == nil {
				c.delta = map[int64]map[string]int64{}
			}
			if c.delta[b] == nil {
				c.delta[b] = map[string]int64{}
			}
			c.delta[b][f] += n
		}
	}
	c.shown, c.written = true, nil
}

// flushStats writes this store's counter changes and oldest running tasks
// in one pipeline (nothing when there is nothing to write).
func (s *Redis) flushStats(ctx context.Context) error {
	now := s.nowMS()
	delta, oldest, show, inst := s.stats.take(now)
	if len(delta) == 0 && !show {
		return nil
	}
	var calls []scriptCall
	extra := func(p redis.Pipeliner) {
		for b, m := range delta {
			key := s.k.statBucket(b)
			for f, n := range m {
				if n != 0 {
					p.HIncrBy(ctx, key, f, n)
				}
			}
			p.PExpireAt(ctx, key, time.UnixMilli(b*1000+indexSlack.Milliseconds()))
		}
		if show {
			key := s.k.statRunner(inst)
			p.Del(ctx, key)
			if len(oldest) > 0 {
				args := make([]any, 0, 2*len(oldest))
				for tool, ms := range oldest {
					args = append(args, tool, ms)
				}
				p.HSet(ctx, key, args...)
				p.PExpireAt(ctx, key, time.UnixMilli(now+runnerStatTTL.Milliseconds()))
			}
		}
	}
	keep := func(b int64) int64 {
		step := keepStep.Milliseconds()
		return (b*1000 + indexSlack.Milliseconds() + step - 1) / step * step
	}
	for b := range delta {
		calls = append(calls, scriptCall{zaddKeepCmd, []string{s.k.statBuckets()}, []any{b, b, keep(b), now}})
	}
	if show {
		until := now + runnerStatTTL.Milliseconds()
		calls = append(calls, scriptCall{zaddKeepCmd, []string{s.k.statRunners()}, []any{inst, until, keep(until / 1000), now}})
	}
	res, err := s.pipe(ctx, calls, extra)
	if err == nil {
		for _, r := range res {
			if err = r.Err(); err != nil {
				break
			}
		}
	}
	if err != nil {
		s.stats.putBack(delta)
		return wrapErr("admin stats flush", "", err)
	}
	return nil
}

// AdminStats implements Admin from the counters (see statCounts), after
// writing this store's own: two range reads and one HGETALL per live
// expiry second and per replica with running tasks, in two round trips;
// no task is read.
func (s *Redis) AdminStats(ctx context.Context) (AdminStats, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if err := s.flushStats(ctx); err != nil {
		return AdminStats{}, err
	}
	now := s.nowMS()
	p := s.rdb.Pipeline()
	bs := p.ZRangeByScore(ctx, s.k.statBuckets(), &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now/1000, 10), Max: "+inf"})
	rs := p.ZRangeByScore(ctx, s.k.statRunners(), &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"})
	p.ZRemRangeByScore(ctx, s.k.statBuckets(), "-inf", strconv.FormatInt(now/1000-indexSlack.Milliseconds()/1000, 10))
	p.ZRemRangeByScore(ctx, s.k.statRunners(), "-inf", strconv.FormatInt(now, 10))
	if _, err := p.Exec(ctx); err != nil {
		return AdminStats{}, wrapErr("admin stats", "", err)
	}
	p = s.rdb.Pipeline()
	var buckets, runners []*redis.MapStringStringCmd
	for _, b := range bs.Val() {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil {
			continue
		}
		buckets = append(buckets, p.HGetAll(ctx, s.k.statBucket(n)))
	}
	for _, inst := range rs.Val() {
		runners = append(runners, p.HGetAll(ctx, s.k.statRunner(inst)))
	}
	st := newAdminStats()
	if len(buckets)+len(runners) == 0 {
		return st, nil
	}
	if _, err := p.Exec(ctx); err != nil {
		return AdminStats{}, wrapErr("admin stats", "", err)
	}
	sums := map[string]int64{}
	for _, c := range buckets {
		for f, v := range c.Val() {
			n, _ := strconv.ParseInt(v, 10, 64)
			sums[f] += n
		}
	}
	for f, n := range sums {
		stat, tool, ok := strings.Cut(f, "\x1f")
		if !ok || n <= 0 {
			continue // a replica's changes lost when it died
		}
		st.ByStatus[Status(stat)] += int(n)
		m := st.ByTool[tool]
		if m == nil {
			m = map[Status]int{}
			st.ByTool[tool] = m
		}
		m[Status(stat)] += int(n)
	}
	for _, c := range runners {
		for tool, v := range c.Val() {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			if cur, ok := st.OldestRunning[tool]; !ok || ms < cur.UnixMilli() {
				st.OldestRunning[tool] = time.UnixMilli(ms)
			}
		}
	}
	return st, nil
}
