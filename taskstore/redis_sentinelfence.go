package taskstore

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A sentinelFence decides whether a write that fewer replicas than wanted
// acknowledged may still be reported, by asking every sentinel.
//
// Waiting for every replica (WAIT) is what makes a Sentinel failover lose
// nothing acknowledged: the old master keeps accepting writes until it is
// reconfigured, but the replica being promoted has stopped replicating
// from it, so none of those writes reaches every replica. Waiting for
// every replica alone also stops all writes after a failover until the
// old master has been turned into a replica of the new one and has
// resynchronised: the sentinels do that 8-10 s after the switch at the
// earliest (a crashed master: when it returns). The fence lets writes
// resume as soon as the sentinels agree on the new master:
//
// A write whose WAIT saw fewer replicas than wanted is reported when
// every replica the master itself lists as online acknowledged it (a
// connected replica that did not is promotable without the write:
// refused) and, asked after the write, every sentinel of the URL names
// this node as the master with flags exactly "master" (no failover in
// progress, nothing down), and sees each missing replica down,
// unreachable or still reporting itself a master (the old master not yet
// converted): replicas Sentinel would not promote, or that resynchronise
// from scratch before they can be. A replica still synchronising counts
// as present, so its writes wait. The old master during a failover fails
// the test: the sentinel leading the failover marks it
// failover_in_progress before it promotes the replica, and names the new
// master once done; the others name the new master a few seconds later.
// A sentinel that does not answer refuses the write.
//
// What it does not cover: a second fault before the replicas have caught
// up (the new master crashing while the old one is not yet converted)
// can lose the writes of that interval.
type sentinelFence struct {
	master  string
	clients []*redis.SentinelClient
	// listed is the largest replica count (num-slaves) the sentinels
	// reported in the last check they all answered, the "every replica"
	// of WaitAll; -1 until known.
	listed atomic.Int64
	// online is how many replicas the master listed as online after the
	// last WAIT, the next WAIT's target; -1 until known.
	online atomic.Int64

	mu  sync.Mutex
	cur *fenceCheck    // the latest check, running or done
	wg  sync.WaitGroup // running checks
}

// fenceCheck is one round of questions to every sentinel.
type fenceCheck struct {
	start time.Time
	done  chan struct{}
	// addr is the master every sentinel named ("" when they did not all
	// answer and agree), runID its run_id if they all know it; listed
	// the most replicas one of them lists;
	// away the fewest replicas one of them sees down, unreachable or
	// still reporting itself a master (the old master not yet
	// converted): replicas the sentinels would not promote.
	addr, runID  string
	listed, away int64
}

// sentinelTimeout bounds one question to a sentinel.
const sentinelTimeout = 500 * time.Millisecond

func newSentinelFence(o *redis.FailoverOptions) *sentinelFence {
	f := &sentinelFence{master: o.MasterName}
	f.listed.Store(-1)
	f.online.Store(-1)
	for _, addr := range o.SentinelAddrs {
		f.clients = append(f.clients, redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword, TLSConfig: o.TLSConfig,
			DialTimeout: sentinelTimeout, ReadTimeout: sentinelTimeout, WriteTimeout: sentinelTimeout,
			MaxRetries: -1, PoolSize: 2, ContextTimeoutEnabled: true,
		}))
	}
	return f
}

// close waits for running checks (at most sentinelTimeout) and closes the
// sentinel clients.
func (f *sentinelFence) close() {
	f.wg.Wait()
	for _, c := range f.clients {
		_ = c.Close()
	}
}

// confirm returns a check that started at or after after (so it covers a
// write that completed before after); nil when ctx ends first.
// Concurrent callers share checks.
func (f *sentinelFence) confirm(ctx context.Context, after time.Time) *fenceCheck {
	f.mu.Lock()
	c := f.cur
	if c == nil || c.start.Before(after) {
		c = &fenceCheck{start: time.Now(), done: make(chan struct{})}
		f.cur = c
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.check(c)
		}()
	}
	f.mu.Unlock()
	select {
	case <-c.done:
		return c
	case <-ctx.Done():
		return nil
	}
}

// allows reports whether c lets a write with acks replica acknowledgements
// on node stand, want being the replicas it should have reached.
func (c *fenceCheck) allows(node nodeInfo, acks, want int64) bool {
	if c == nil || c.addr == "" {
		return false
	}
	// The sentinels name the master by the address it announces, which
	// is the address the node sees its clients arrive on unless NAT or
	// announce-ip hide it; then by run_id, which they learn from the
	// master's INFO up to 10 s after a switch.
	if c.addr != node.laddr && (c.runID == "" || c.runID != node.runID) {
		return false
	}
	if want == WaitAll {
		want = c.listed
	}
	return acks+c.away >= want
}

// check asks every sentinel at once for the master and its replicas.
func (f *sentinelFence) check(c *fenceCheck) {
	defer close(c.done)
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	type view struct {
		addr, runID  string
		listed, away int64 // listed -1: no answer
	}
	views := make([]view, len(f.clients))
	var wg sync.WaitGroup
	for i, sc := range f.clients {
		views[i].listed = -1
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps, err := sc.Replicas(ctx, f.master).Result()
			if err != nil {
				return
			}
			v := view{listed: int64(len(reps))}
			defer func() { views[i] = v }()
			m, err := sc.Master(ctx, f.master).Result()
			if err != nil || m["flags"] != "master" || m["ip"] == "" {
				return
			}
			v.addr, v.runID = net.JoinHostPort(m["ip"], m["port"]), m["runid"]
			for _, r := range reps {
				fl := "," + r["flags"] + ","
				if strings.Contains(fl, ",s_down,") || strings.Contains(fl, ",o_down,") ||
					strings.Contains(fl, ",disconnected,") || r["role-reported"] == "master" {
					v.away++
				}
			}
		}()
	}
	wg.Wait()
	// How many replicas there are, any sentinel that answered can say;
	// that a write may stand with fewer, only all of them together.
	c.listed = -1
	for _, v := range views {
		c.listed = max(c.listed, v.listed)
	}
	if c.listed >= 0 {
		f.listed.Store(c.listed)
	}
	c.away, c.runID = views[0].away, views[0].runID
	for _, v := range views {
		if v.addr == "" || v.addr != views[0].addr {
			return
		}
		if v.runID != c.runID {
			c.runID = ""
		}
		c.away = min(c.away, v.away)
	}
	c.addr = views[0].addr
}

// nodeInfo is what INFO server replication and CLIENT INFO, sent after
// WAIT in the same pipeline, say about the node that ran the writes.
type nodeInfo struct {
	runID  string
	laddr  string // the node's address as its client (this connection) reached it
	master bool
	online int // replicas in state online
}

func parseNodeInfo(info, client string) nodeInfo {
	var n nodeInfo
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "run_id:"):
			n.runID = line[len("run_id:"):]
		case line == "role:master":
			n.master = true
		case strings.HasPrefix(line, "slave") && strings.Contains(line, ",state=online,"):
			n.online++
		}
	}
	for _, f := range strings.Fields(client) {
		if v, ok := strings.CutPrefix(f, "laddr="); ok {
			n.laddr = v
		}
	}
	return n
}
