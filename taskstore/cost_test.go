package taskstore

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// cmdStat is one INFO commandstats line: calls and µs.
type cmdStat struct{ calls, usec int64 }

// readCommandStats reads INFO commandstats: command -> calls and usec,
// without the commands of the measurement itself (INFO, CONFIG).
func readCommandStats(ctx context.Context, admin *redis.Client) (map[string]cmdStat, error) {
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		var c cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				c.calls = n
			case "usec":
				c.usec = n
			}
		}
		out[name] = c
	}
	return out, sc.Err()
}

// costTotals sums commandstats per operation (n operations): commands
// (those scripts run included), µs summed over every line (a script's
// EVALSHA time includes the commands it runs, which are listed on their
// own lines too, so this sum counts their time twice: the definition of
// the 40 µs goal) and the EVALSHA/EVAL time alone (the scripts with what
// they run, each µs once).
func costTotals(st map[string]cmdStat, n int) (cmds, sumAll, scripts float64) {
	for name, c := range st {
		cmds += float64(c.calls)
		sumAll += float64(c.usec)
		if name == "evalsha" || name == "eval" {
			scripts += float64(c.usec)
		}
	}
	return cmds / float64(n), sumAll / float64(n), scripts / float64(n)
}

// redisCPU is redis-server's CPU time so far (INFO cpu, user + sys, all
// threads), in µs: what Redis spends on commands and on the network.
func redisCPU(ctx context.Context, admin *redis.Client) (float64, error) {
	info, err := admin.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, l := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f * 1e6
		}
	}
	return sum, nil
}

// BenchmarkTaskCost measures what a whole task (create, completed,
// tasks/result on the replica that ran it) costs Redis, per command, over
// TASKGATE_COST_TASKS tasks (default 2000) on a fresh redis-server, and
// AdminStats at TASKGATE_COST_LIVE live tasks (default 10000). It is a
// measurement that reports and asserts nothing (TestCommandCounts asserts
// the counts); one run is the whole measurement, so run it with
// -benchtime 1x:
//
//	go test -run '^$' -bench BenchmarkTaskCost -benchtime 1x ./taskstore/
//
// With TASKGATE_COST_REDIS_CPU=n the redis-server is pinned to CPU n
// (taskset); pin the test itself with taskset -c m. With
// TASKGATE_COST_WORKERS=w (default 1) the whole tasks run w at a time,
// each worker its own owner: one at a time, Redis idles between
// round trips and its wall-clock counters include each wake-up; with
// tasks in flight together, as on a busy replica, it does not.
func BenchmarkTaskCost(b *testing.B) {
	b.ReportAllocs()
	t := b
	n := envInt("TASKGATE_COST_TASKS", 2000)
	live := envInt("TASKGATE_COST_LIVE", 10000)
	addr := redistest.Start(t)
	admin := redis.NewClient(clientOpts(addr))
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if cpu := os.Getenv("TASKGATE_COST_REDIS_CPU"); cpu != "" {
		info, err := admin.Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		var pid string
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
				pid = v
			}
		}
		if out, err := exec.Command("taskset", "-p", "-c", cpu, pid).CombinedOutput(); err != nil {
			t.Fatalf("taskset: %v: %s", err, out)
		}
	}
	tg := storeOn(t, redis.NewClient(clientOpts(addr)), uniquePrefix(), Config{SessionTaskDelay: DefaultSessionTaskDelay}, true)
	for range 200 {
		if err := wholeTask(ctx, tg, "owner-c", 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cpu0, err := redisCPU(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	workers := envInt("TASKGATE_COST_WORKERS", 1)
	start := time.Now()
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := w; i < n; i += workers {
				if err := wholeTask(ctx, tg, fmt.Sprint("owner-c", w), 0); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	wall := time.Since(start)
	cpu1, err := redisCPU(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	st, err := readCommandStats(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	cmds, sumAll, scripts := costTotals(st, n)
	var line []string
	for _, name := range slices.Sorted(maps.Keys(st)) {
		c := st[name]
		line = append(line, fmt.Sprintf("%s %.2f×%.1fµs", name, float64(c.calls)/float64(n), float64(c.usec)/float64(n)))
	}
	t.Logf("per task (%d at a time): %.2f commands; %.1f µs summed over every commandstats line; %.1f µs EVALSHA; %.1f µs redis-server CPU; %.0f µs wall",
		workers, cmds, sumAll, scripts, (cpu1-cpu0)/float64(n), float64(wall.Microseconds())/float64(n))
	t.Logf("per command (calls×µs per task): %s", strings.Join(line, ", "))

	// The same split: n creates, then their n finishes.
	ts := make([]*Task, n)
	for phase, name := range []string{"create", "finish"} {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		cpu0, err := redisCPU(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ts {
			var err error
			if phase == 0 {
				ts[i] = newSessionTask("owner-c", sessA)
				err = tg.Create(ctx, ts[i], CreateOptions{})
			} else {
				_, err = tg.Finish(ctx, "owner-c", ts[i].ID, Completed, "", benchOutcome)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		st, err := readCommandStats(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		cpu1, err := redisCPU(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		cmds, sumAll, scripts := costTotals(st, n)
		line = line[:0]
		for _, name := range slices.Sorted(maps.Keys(st)) {
			c := st[name]
			line = append(line, fmt.Sprintf("%s %.2f×%.1fµs", name, float64(c.calls)/float64(n), float64(c.usec)/float64(n)))
		}
		t.Logf("%s: %.2f commands, %.1f µs summed, %.1f µs EVALSHA, %.1f µs redis-server CPU: %s", name, cmds, sumAll, scripts,
			(cpu1-cpu0)/float64(n), strings.Join(line, ", "))
	}

	// AdminStats at live tasks.
	for i := 0; i < live; {
		p := min(500, live-i)
		errs := make(chan error, p)
		for range p {
			go func() {
				errs <- tg.Create(ctx, &Task{Owner: fmt.Sprintf("owner-%d", i%50), TTL: time.Hour, Tool: fmt.Sprintf("tool-%d", i%7), Runner: "r"}, CreateOptions{})
			}()
		}
		for range p {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		i += p
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var best time.Duration
	for range 5 {
		start := time.Now()
		stats, err := tg.AdminStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); best == 0 || d < best {
			best = d
		}
		if stats.ByStatus[Working] < live {
			t.Fatalf("AdminStats: %d working, want >= %d", stats.ByStatus[Working], live)
		}
	}
	st, err = readCommandStats(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	cmds, sumAll, _ = costTotals(st, 5)
	t.Logf("AdminStats at %d live tasks: best of 5 %v; %.0f commands, %.0f µs of Redis command time per call", live, best, cmds, sumAll)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
