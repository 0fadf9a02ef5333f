package taskstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis replicates asynchronously: a write the master acknowledged may not
// have reached a replica when the master fails or a Sentinel promotes the
// replica, and is then gone. Worse, during a Sentinel failover the old
// master keeps accepting writes until the sentinels reconfigure it and
// go-redis learns of the switch (+switch-master), a second or more; every
// one of those writes is dropped when the old master becomes a replica.
// Measured with two replicas and 8 clients through a SENTINEL FAILOVER:
// 834 of 893 tasks acknowledged as completed were gone afterwards.
//
// With Config.WaitReplicas = N, every pipeline that carries a write (a
// script, SET) ends with WAIT N timeout on the same connection, and the
// writes of a pipeline whose WAIT saw fewer than N replicas fail with
// ErrNotReplicated (an ErrUnavailable). The write did happen on the node
// that answered, but nothing taskgate acknowledges to a client was held by
// that node alone: a task the client was told exists, or a state it was
// told, survives the promotion of any of those N replicas. Reads are not
// delayed. It costs one WAIT per pipeline (one per batch of concurrent
// operations, not one per operation) and the replication delay on every
// write.
//
// Not covered: the lease zset's bookkeeping after Recover, the session
// version records (SetSessionVersion) and the shared owner key; they are
// rebuilt or re-asserted after a loss. On a Cluster, WAIT would go to an
// arbitrary node; it is not used there.

// ErrNotReplicated is the error of a write that fewer replicas than
// Config.WaitReplicas acknowledged within Config.WaitTimeout. It wraps
// ErrUnavailable.
var ErrNotReplicated = fmt.Errorf("%w: the write did not reach enough Redis replicas in time", ErrUnavailable)

// DefaultWaitTimeout is Config.WaitTimeout when unset.
const DefaultWaitTimeout = 500 * time.Millisecond

// replicaWait is WAIT's settings; n == 0 means no WAIT.
type replicaWait struct {
	n       int
	timeout time.Duration
}

func (w replicaWait) on() bool { return w.n > 0 }

// add queues WAIT on p when w is on and cmds has a write; the returned
// function, called after Exec, fails the writes of cmds that succeeded
// when WAIT saw fewer than n replicas.
func (w replicaWait) add(ctx context.Context, p redis.Pipeliner, cmds []redis.Cmder) func() {
	if !w.on() || !slicesAny(cmds, isWrite) {
		return func() {}
	}
	wait := redis.NewIntCmd(ctx, "wait", w.n, w.timeout.Milliseconds())
	_ = p.Process(ctx, wait)
	return func() {
		if n, err := wait.Result(); err == nil && n >= int64(w.n) {
			return
		}
		for _, c := range cmds {
			if isWrite(c) && c.Err() == nil {
				c.SetErr(ErrNotReplicated)
			}
		}
	}
}

// isWrite reports whether cmd may write: everything but the plain reads the
// store sends (scripts count as writes).
func isWrite(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hmget", "hget", "get", "hgetall", "exists", "pttl", "zrangebyscore":
		return false
	}
	return true
}

func slicesAny(cmds []redis.Cmder, f func(redis.Cmder) bool) bool {
	for _, c := range cmds {
		if f(c) {
			return true
		}
	}
	return false
}

// splitWaitParams removes taskgate's own query parameters wait_replicas and
// wait_timeout from a Redis URL (go-redis refuses unknown ones) and
// returns them.
func splitWaitParams(rawURL string) (string, replicaWait, error) {
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return rawURL, replicaWait{}, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return rawURL, replicaWait{}, nil // go-redis reports it
	}
	var w replicaWait
	if v := q.Get("wait_replicas"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return "", w, errors.New("wait_replicas: want a number of replicas >= 0")
		}
		w.n = n
	}
	if v := q.Get("wait_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return "", w, errors.New("wait_timeout: want a positive duration such as 500ms")
		}
		w.timeout = d
	}
	if w.n > 0 && w.timeout == 0 {
		w.timeout = DefaultWaitTimeout
	}
	q.Del("wait_replicas")
	q.Del("wait_timeout")
	if len(q) == 0 {
		return base, w, nil
	}
	return base + "?" + q.Encode(), w, nil
}

// ReplicaWait returns the wait_replicas and wait_timeout parameters of a
// Redis URL accepted by Open, for Config.WaitReplicas and
// Config.WaitTimeout.
func ReplicaWait(rawURL string) (replicas int, timeout time.Duration, err error) {
	_, w, err := splitWaitParams(rawURL)
	if err != nil {
		return 0, 0, fmt.Errorf("taskstore: %s: %w", redactURL(rawURL), err)
	}
	return w.n, w.timeout, nil
}

// addCmds is add for script commands; it allocates nothing when w is off.
func (w replicaWait) addCmds(ctx context.Context, p redis.Pipeliner, cmds []*redis.Cmd) func() {
	if !w.on() {
		return func() {}
	}
	out := make([]redis.Cmder, len(cmds))
	for i, c := range cmds {
		out[i] = c
	}
	return w.add(ctx, p, out)
}

// eval runs script with EVAL (which also loads it), followed by WAIT when
// Config.WaitReplicas is set.
func (s *Redis) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if !s.reads.wait.on() {
		return script.Eval(ctx, s.rdb, keys, args...)
	}
	p := s.rdb.Pipeline()
	cmd := script.Eval(ctx, p, keys, args...)
	check := s.reads.wait.add(ctx, p, []redis.Cmder{cmd})
	_, _ = p.Exec(ctx) // errors are on cmd
	check()
	return cmd
}
