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
// Measured with one replica and 8 clients through a SENTINEL FAILOVER:
// 995 of 1082 tasks acknowledged as completed were gone afterwards.
//
// With Config.WaitReplicas = N, every pipeline that carries a write (a
// script, SET) ends with WAIT on the same connection, and the writes of a
// pipeline whose WAIT saw fewer than N replicas fail with
// ErrNotReplicated (an ErrUnavailable). The write did happen on the node
// that answered, but nothing taskgate acknowledges to a client was held by
// that node alone: a task the client was told exists, or a state it was
// told, survives the promotion of any of those N replicas. Reads are not
// delayed. It costs one WAIT per pipeline (one per batch of concurrent
// operations, not one per operation) and the replication delay on every
// write.
//
// On Sentinel (Config.Sentinels), N defaults to WaitAll, every replica the
// sentinels list, and the pipeline also carries INFO server replication
// and CLIENT INFO: a write fewer than N replicas acknowledged is still reported when the
// sentinels confirm the node is the master (redis_sentinelfence.go). Writes then
// resume as soon as the sentinels agree on a new master, instead of when
// the old master has rejoined as a replica.
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

// WaitAll is Config.WaitReplicas for every replica the sentinels list for
// the master (Sentinel only): the default of a Sentinel URL.
const WaitAll = -1

// replicaWait is WAIT's settings; n == 0 means no WAIT.
type replicaWait struct {
	n       int
	timeout time.Duration
	fence   *sentinelFence // nil: not on Sentinel
}

func (w replicaWait) on() bool { return w.n != 0 }

// add queues WAIT on p when w is on and cmds has a write; the returned
// function, called after Exec, fails the writes of cmds that succeeded
// when WAIT saw fewer replicas than wanted (and, on Sentinel, the fence
// did not confirm the node).
func (w replicaWait) add(ctx context.Context, p redis.Pipeliner, cmds []redis.Cmder) func() {
	if !w.on() || !slicesAny(cmds, isWrite) {
		return func() {}
	}
	want := int64(w.n)
	if w.n == WaitAll {
		want = w.fence.listed.Load() // -1 until the sentinels said
	}
	target := want
	if w.fence != nil {
		// Wait for the replicas the master had online last time: one that
		// is away cannot answer, and the fence decides without it.
		if o := w.fence.online.Load(); o >= 0 && (target < 0 || o < target) {
			target = o
		}
		target = max(target, 0)
	}
	wait := redis.NewIntCmd(ctx, "wait", target, w.timeout.Milliseconds())
	_ = p.Process(ctx, wait)
	var info, client *redis.StringCmd
	if w.fence != nil {
		info = redis.NewStringCmd(ctx, "info", "server", "replication")
		client = redis.NewStringCmd(ctx, "client", "info")
		_ = p.Process(ctx, info)
		_ = p.Process(ctx, client)
	}
	return func() {
		if !w.replicated(ctx, want, wait, info, client) {
			for _, c := range cmds {
				if isWrite(c) && c.Err() == nil {
					c.SetErr(ErrNotReplicated)
				}
			}
		}
	}
}

// replicated reports whether the writes before wait may be reported.
func (w replicaWait) replicated(ctx context.Context, want int64, wait *redis.IntCmd, info, client *redis.StringCmd) bool {
	acks, err := wait.Result()
	if err != nil {
		return false
	}
	if w.fence == nil {
		return acks >= want
	}
	if info.Err() != nil || client.Err() != nil {
		return false
	}
	node := parseNodeInfo(info.Val(), client.Val())
	if !node.master {
		return false
	}
	w.fence.online.Store(int64(node.online))
	need := int64(node.online)
	if w.n != WaitAll {
		need = min(need, want) // WAIT returns once N have them
	}
	if acks < need {
		return false // a connected replica did not get the writes in time
	}
	if want >= 0 { // with WaitAll, unknown until the sentinels were asked once
		if w.n == WaitAll {
			want = max(want, int64(node.online))
		}
		if acks >= want {
			return true
		}
	}
	return w.fence.confirm(ctx, time.Now()).allows(node, acks, int64(w.n))
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
	var w replicaWait
	if scheme, _, _ := strings.Cut(rawURL, "://"); strings.HasSuffix(scheme, "+sentinel") {
		w = replicaWait{n: WaitAll, timeout: DefaultWaitTimeout}
	}
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return rawURL, w, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return rawURL, w, nil // go-redis reports it
	}
	sentinel := w.n == WaitAll
	switch v := q.Get("wait_replicas"); {
	case v == "all" && sentinel:
	case v == "all":
		return "", w, errors.New("wait_replicas=all needs a Sentinel URL (redis+sentinel://)")
	case v != "":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return "", w, errors.New("wait_replicas: want a number of replicas >= 0, or all")
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
	if w.n != 0 && w.timeout == 0 {
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
// Config.WaitTimeout. A Sentinel URL without wait_replicas gets WaitAll
// and DefaultWaitTimeout; wait_replicas=0 turns waiting off.
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
