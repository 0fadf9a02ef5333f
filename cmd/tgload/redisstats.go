package main

// Redis commands per operation, from INFO commandstats (--redis).

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// namedAddr is one --redis entry: a name and a redis-server address.
type namedAddr struct{ name, addr string }

// redisCounts are the totals of INFO commandstats: every command Redis
// counted (the commands a script runs as well as the script's EVALSHA),
// their time in µs as Redis counts it (a script's time includes the
// commands it runs, so the sum counts those twice), and the EVALSHA/EVAL
// time alone.
type redisCounts struct {
	Calls    float64 `json:"calls"`
	Usec     float64 `json:"usec"`
	EvalUsec float64 `json:"eval_usec"`
}

// readRedis reads INFO commandstats of each address; an unreachable one
// is left out.
func readRedis(rs []namedAddr) map[string]redisCounts {
	out := map[string]redisCounts{}
	for _, r := range rs {
		if c, ok := redisStats(r.addr); ok {
			out[r.name] = c
		}
	}
	return out
}

func redisStats(addr string) (redisCounts, bool) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return redisCounts{}, false
	}
	return parseCommandStats(info), true
}

// parseCommandStats sums INFO commandstats, without INFO, CONFIG and
// CLIENT (the measurement's own commands).
func parseCommandStats(info string) redisCounts {
	var c redisCounts
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") || strings.HasPrefix(name, "client") || name == "hello" {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				c.Calls += n
			case "usec":
				c.Usec += n
				if name == "evalsha" || name == "eval" {
					c.EvalUsec += n
				}
			}
		}
	}
	return c
}
