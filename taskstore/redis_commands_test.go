package taskstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// commandBudgets are the Redis commands each operation may cost, counted by
// a real redis-server (INFO commandstats counts the commands a script
// runs, too), averaged over opRuns runs in steady state (scripts cached,
// the owner's index and the admin index already extended for this
// keepStep, the runner registered). Each entry is the most the operation
// may cost of that command; a command not listed must not be run at all.
// They are the budgets of the design: one EVALSHA or HMGET per operation;
// one PEXPIREAT per create (the task hash), none for the zsets within one
// keepStep; no lease entry per task (runners have heartbeats); no PUBLISH
// on a session channel nobody listens on (only the task channel's); the
// cleanup of queue, inbox, mark and input requests only for tasks that
// had them.
var commandBudgets = map[string]map[string]float64{
	// Create with a MaxPerOwner cap: the live zset's ZCARD and ZADD; the
	// admin index's ZADD and the owner-by-id SET.
	"Create": {"evalsha": 1, "zcard": 1, "zrange": 1, "hset": 1, "pexpireat": 1.1, "zadd": 3, "set": 1, "pttl": 0.1},
	"Get":    {"hmget": 1},
	// Update publishes on the task channel and checks the session's
	// listener registry instead of publishing there.
	"Update": {"evalsha": 1, "hmget": 1, "hset": 1, "publish": 1, "hget": 1},
	// Enqueue sets the queue's expiry and the task's aux mark only when it
	// starts the queue.
	"Enqueue": {"evalsha": 1, "hmget": 1, "rpush": 1, "pexpireat": 1.1, "hset": 1, "publish": 1, "exists": 1, "sadd": 1, "pttl": 1.1, "hget": 1},
	"Drain":   {"evalsha": 1, "lrange": 1, "del": 1, "hget": 1, "srem": 1},
	"Renew":   {"evalsha": 1, "hmget": 1, "hset": 1},
	"Outcome": {"hmget": 1},
	// Finish of a task that had a queue (the Enqueue above) and a cap.
	"Finish": {"evalsha": 1, "zrem": 1, "hmget": 1, "hset": 1, "lrange": 1, "del": 1,
		"publish": 1, "srem": 1, "hget": 1},
	// Cancel of a task that never had a queue, with a cap.
	"Cancel": {"evalsha": 1, "zrem": 1, "hmget": 1, "hset": 1, "publish": 1, "hget": 1},
	// List of a page of 10 from 20 tasks: one range read and one HMGET per
	// task read (10 and the one that tells there is more).
	"List": {"evalsha": 1, "zrangebyscore": 1, "hmget": 11},
	// A whole task as the engine drives it for a client on a 2025 session,
	// on the replica that runs it (whose tasks/result answers from the
	// runner's memory): Create, StartSessionTask, Finish, EndSessionTask,
	// with taskgate's SessionTaskDelay. Without a MaxPerOwner cap:
	"Task": {"evalsha": 2, "zrange": 1, "hset": 2, "pexpireat": 1.1, "zadd": 2, "set": 1, "pttl": 0.1,
		"hmget": 1, "publish": 1, "hget": 1},
	// With taskgate's default cap (100 per owner): the live zset's ZCARD,
	// ZADD and ZREM on top.
	"TaskCapped": {"evalsha": 2, "zcard": 1, "zrange": 1, "hset": 2, "pexpireat": 1.1, "zadd": 3, "set": 1, "pttl": 0.1,
		"hmget": 1, "zrem": 1, "publish": 1, "hget": 1},
	// A tasks/result served by another replica reads the outcome.
	"Result": {"hmget": 1},
	// The operator API: a task's owner by id (GET P:id:<id>) and the task;
	// a page of 10 across owners (one range read of the admin index, one
	// HMGET per member read, in one pipeline).
	"AdminFind": {"get": 1, "hmget": 1},
	"AdminList": {"zrevrangebyscore": 1, "hmget": 11},
}

// taskBudgets cap the sum of an operation's commands: a whole task costs
// Redis at most 12 commands (15 with an owner cap).
var taskBudgets = map[string]float64{"Task": 12, "TaskCapped": 15}

const opRuns = 50

// TestCommandCounts runs each operation opRuns times on a fresh
// redis-server and compares the commands Redis counted with
// commandBudgets.
func TestCommandCounts(t *testing.T) {
	addr := redistest.Start(t)
	rdb := redis.NewClient(clientOpts(addr))
	s := storeOn(t, rdb, uniquePrefix(), Config{}, true)
	// tg is a replica configured as taskgate configures it.
	tg := storeOn(t, redis.NewClient(clientOpts(addr)), s.k.prefix, Config{SessionTaskDelay: DefaultSessionTaskDelay}, true)
	// The AdminStats counters are written every statFlush, not per task:
	// no timer here, so no write lands in an operation's count.
	s.stats.noTimer, tg.stats.noTimer = true, true
	admin := redis.NewClient(clientOpts(addr))
	t.Cleanup(func() { _ = admin.Close() })
	ctx := testCtx(t)

	newTasks := func(n int) []*Task {
		out := make([]*Task, n)
		for i := range out {
			out[i] = newSessionTask(ownerA, sessA)
			if err := s.Create(ctx, out[i], CreateOptions{MaxPerOwner: 1 << 20}); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	newTasks(20) // warm up: scripts cached, zsets extended
	var tasks []*Task
	msg := []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`)
	ops := []struct {
		name  string
		setup func()
		fn    func(i int) error
	}{
		{"Create", nil, func(int) error {
			return s.Create(ctx, newSessionTask(ownerA, sessA), CreateOptions{MaxPerOwner: 1 << 20})
		}},
		{"Get", func() { tasks = newTasks(opRuns) }, func(i int) error { _, err := s.Get(ctx, ownerA, tasks[i].ID); return err }},
		{"Update", nil, func(i int) error { _, err := s.Update(ctx, ownerA, tasks[i].ID, InputRequired, "x"); return err }},
		{"Enqueue", nil, func(i int) error {
			_, err := s.Enqueue(ctx, ownerA, tasks[i].ID, KindNotification, msg, 10)
			return err
		}},
		{"Drain", nil, func(i int) error { _, err := s.Drain(ctx, ownerA, tasks[i].ID); return err }},
		{"Renew", nil, func(i int) error { _, err := s.Renew(ctx, ownerA, tasks[i].ID, time.Minute); return err }},
		{"Finish", nil, func(i int) error {
			_, err := s.Finish(ctx, ownerA, tasks[i].ID, Completed, "", benchOutcome)
			return err
		}},
		{"Outcome", nil, func(i int) error { _, _, err := s.Outcome(ctx, ownerA, tasks[i].ID); return err }},
		{"Cancel", func() { tasks = newTasks(opRuns) }, func(i int) error { _, err := s.Cancel(ctx, ownerA, tasks[i].ID, ""); return err }},
		{"List", nil, func(int) error { _, _, err := s.List(ctx, ownerB, "", 10); return err }},
		{"Task", nil, func(int) error { return wholeTask(ctx, tg, "owner-c", 0) }},
		{"TaskCapped", nil, func(int) error { return wholeTask(ctx, tg, "owner-d", 100) }},
		{"Result", func() { tasks = newTasks(opRuns) }, func(i int) error { _, _, err := tg.Outcome(ctx, ownerA, tasks[i].ID); return err }},
		{"AdminFind", nil, func(i int) error { _, err := tg.AdminFind(ctx, tasks[i].ID); return err }},
		{"AdminList", nil, func(int) error {
			l, _, err := tg.AdminList(ctx, AdminFilter{Limit: 10, Status: []Status{Working}})
			if err == nil && len(l) != 10 {
				err = fmt.Errorf("AdminList: %d tasks, want 10", len(l))
			}
			return err
		}},
	}
	for range 20 {
		if err := s.Create(ctx, newTask(ownerB), CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Pass 0 loads every script (its first EVALSHA is a NOSCRIPT reply and
	// an EVAL); pass 1 is measured.
	for pass := range 2 {
		for _, op := range ops {
			if op.setup != nil {
				op.setup()
			}
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range opRuns {
				if err := op.fn(i); err != nil {
					t.Fatalf("%s: %v", op.name, err)
				}
			}
			if pass == 1 {
				checkBudget(t, op.name, commandStats(t, ctx, admin))
				logUsec(t, op.name, ctx, admin)
			}
		}
	}
}

// wholeTask drives one task through s as the engine does for a fast call
// (the tasks/result on the same replica answers from the runner's memory).
func wholeTask(ctx context.Context, s Store, owner string, maxPerOwner int) error {
	t := newSessionTask(owner, sessA)
	if err := s.Create(ctx, t, CreateOptions{MaxPerOwner: maxPerOwner}); err != nil {
		return err
	}
	if err := s.StartSessionTask(ctx, sessA, t.ID, time.Now().Add(time.Minute)); err != nil {
		return err
	}
	if _, err := s.Finish(ctx, owner, t.ID, Completed, "", benchOutcome); err != nil {
		return err
	}
	_, err := s.EndSessionTask(ctx, sessA, t.ID)
	return err
}

// taskUsecGoal is the Redis command time a whole task should cost: INFO
// commandstats's usec summed over every line, so the commands a script
// runs count in EVALSHA's line and again in their own. Reported, not
// asserted: it is wall-clock time inside redis-server and moves with the
// machine's load.
const taskUsecGoal = 40

// logUsec measures and logs the Redis command time of one operation
// (INFO commandstats; see taskUsecGoal) and the scripts' share. It fails
// only when nothing could be measured.
func logUsec(t *testing.T, op string, ctx context.Context, admin *redis.Client) {
	t.Helper()
	st, err := readCommandStats(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	_, usec, evalsha := costTotals(st, opRuns)
	if usec <= 0 && op != "Get" && op != "Outcome" && op != "Result" {
		t.Errorf("%s: no Redis command time measured (%v)", op, st)
	}
	note := ""
	if _, ok := taskBudgets[op]; ok {
		note = fmt.Sprintf(" (goal for a whole task: %d µs)", taskUsecGoal)
	}
	t.Logf("%-10s %.1f µs of Redis command time per operation, every commandstats line summed; %.1f of it EVALSHA, the commands it ran included%s",
		op, usec, evalsha, note)
}

// checkBudget compares one operation's command counts (over opRuns runs)
// with its budget and logs them.
func checkBudget(t *testing.T, op string, got map[string]int64) {
	t.Helper()
	budget, ok := commandBudgets[op]
	if !ok {
		t.Fatalf("no budget for %s", op)
	}
	var line []string
	var total float64
	for _, c := range slices.Sorted(maps.Keys(got)) {
		per := float64(got[c]) / opRuns
		total += per
		line = append(line, fmt.Sprintf("%s %.2f", c, per))
		if max, ok := budget[c]; !ok || per > max+1e-9 {
			t.Errorf("%s: %.2f %s per operation, budget %v", op, per, c, max)
		}
	}
	t.Logf("%-10s %.2f commands: %s", op, total, strings.Join(line, ", "))
	// The slack is a PTTL and a PEXPIREAT of the indexes when the runs
	// cross a keepStep boundary (once per 10 s per replica, not per task).
	if max, ok := taskBudgets[op]; ok && total > max+0.2 {
		t.Errorf("%s: %.2f commands, budget %v", op, total, max)
	}
}

// commandStats reads INFO commandstats: command -> calls, without the
// commands of the measurement itself (readCommandStats).
func commandStats(t *testing.T, ctx context.Context, admin *redis.Client) map[string]int64 {
	t.Helper()
	st, err := readCommandStats(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64, len(st))
	for name, c := range st {
		out[name] = c.calls
	}
	return out
}
