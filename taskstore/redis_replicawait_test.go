package taskstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

func TestSplitWaitParams(t *testing.T) {
	tests := []struct {
		in, url string
		w       replicaWait
		bad     bool
	}{
		{in: "redis://h:1/0", url: "redis://h:1/0"},
		{in: "redis://h:1?pool_size=5", url: "redis://h:1?pool_size=5"},
		{in: "redis://h:1?wait_replicas=2", url: "redis://h:1", w: replicaWait{n: 2, timeout: DefaultWaitTimeout}},
		{in: "redis+sentinel://s1,s2/m?wait_replicas=1&wait_timeout=2s&pool_size=5", url: "redis+sentinel://s1,s2/m?pool_size=5", w: replicaWait{n: 1, timeout: 2 * time.Second}},
		{in: "redis+sentinel://s1,s2/m", url: "redis+sentinel://s1,s2/m", w: replicaWait{n: WaitAll, timeout: DefaultWaitTimeout}},
		{in: "rediss+sentinel://s1/m?wait_replicas=all&wait_timeout=1s", url: "rediss+sentinel://s1/m", w: replicaWait{n: WaitAll, timeout: time.Second}},
		{in: "redis+sentinel://s1/m?wait_replicas=0", url: "redis+sentinel://s1/m", w: replicaWait{timeout: DefaultWaitTimeout}},
		{in: "redis://h:1?wait_replicas=0", url: "redis://h:1"},
		{in: "redis://h:1?wait_replicas=all", bad: true},
		{in: "redis://h:1?wait_replicas=x", bad: true},
		{in: "redis://h:1?wait_replicas=1&wait_timeout=-1s", bad: true},
	}
	for _, tt := range tests {
		url, w, err := splitWaitParams(tt.in)
		if (err != nil) != tt.bad || (!tt.bad && (url != tt.url || w != tt.w)) {
			t.Errorf("splitWaitParams(%q) = %q, %+v, %v; want %q, %+v, error %v", tt.in, url, w, err, tt.url, tt.w, tt.bad)
		}
	}
	c, err := Open("redis://127.0.0.1:1?wait_replicas=1&wait_timeout=1s")
	if err != nil {
		t.Fatalf("Open with wait parameters: %v", err)
	}
	c.Close()
}

// With WaitReplicas, a write that no replica acknowledged fails with
// ErrNotReplicated (an ErrUnavailable) and reads still work; once a
// replica follows the master, the same operations succeed, large
// payloads (sent alone) included.
func TestReplicaWait(t *testing.T) {
	master := redistest.Start(t)
	rdb, err := Open("redis://" + master + "?wait_replicas=1&wait_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	n, timeout, err := ReplicaWait("redis://" + master + "?wait_replicas=1&wait_timeout=2s")
	if err != nil || n != 1 || timeout != 2*time.Second {
		t.Fatalf("ReplicaWait = %d, %v, %v", n, timeout, err)
	}
	s := storeOn(t, rdb, uniquePrefix(), Config{WaitReplicas: n, WaitTimeout: timeout, OpTimeout: 10 * time.Second}, true)
	ctx := context.Background()
	task := &Task{Owner: ownerA, Runner: "r", TTL: time.Minute}
	if err := s.Create(ctx, task, CreateOptions{}); !errors.Is(err, ErrNotReplicated) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Create without a replica = %v, want ErrNotReplicated", err)
	}
	if _, err := s.Get(ctx, ownerA, task.ID); !errors.Is(err, ErrNotFound) && err != nil {
		t.Errorf("Get without a replica = %v; reads do not wait", err)
	}

	replica := redistest.Start(t)
	host, port, _ := net.SplitHostPort(master)
	rc := redis.NewClient(&redis.Options{Addr: replica})
	defer rc.Close()
	if err := rc.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	task = &Task{Owner: ownerA, Runner: "r", TTL: time.Minute}
	if err := s.Create(ctx, task, CreateOptions{}); err != nil {
		t.Fatalf("Create with a replica = %v", err)
	}
	big := bigResult(spillMin + 1)
	if _, err := s.Finish(ctx, ownerA, task.ID, Completed, "", Outcome{OutcomeResult, big}); err != nil {
		t.Fatalf("large Finish with a replica = %v", err)
	}
	if _, out, err := s.Outcome(ctx, ownerA, task.ID); err != nil || len(out.Raw) != len(big) {
		t.Fatalf("Outcome = %d bytes, %v", len(out.Raw), err)
	}
	// The replica has what the client was told.
	if v, err := rc.HGet(ctx, s.k.task(ownerA, task.ID), fStatus).Result(); err != nil || v != string(Completed) {
		t.Errorf("task status on the replica = %q, %v; want completed", v, err)
	}
}

func TestParseNodeInfo(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:6380\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
		"slave0:ip=127.0.0.1,port=6381,state=online,offset=10,lag=0\r\nslave1:ip=127.0.0.1,port=6382,state=wait_bgsave,offset=0,lag=0\r\n"
	client := "id=7 addr=127.0.0.1:50000 laddr=127.0.0.1:6380 fd=8 name= age=1\n"
	got := parseNodeInfo(info, client)
	want := nodeInfo{runID: "abc123", laddr: "127.0.0.1:6380", master: true, online: 1}
	if got != want {
		t.Errorf("parseNodeInfo = %+v, want %+v", got, want)
	}
	if n := parseNodeInfo("# Replication\r\nrole:slave\r\n", ""); n.master {
		t.Errorf("parseNodeInfo(role:slave) = %+v, want not master", n)
	}
}

// A write fewer replicas took stands only on the node the sentinels all
// name, and only when the missing replicas are ones they would not promote.
func TestFenceAllows(t *testing.T) {
	node := nodeInfo{runID: "r1", laddr: "10.0.0.1:6379", master: true}
	tests := []struct {
		name string
		c    *fenceCheck
		node nodeInfo
		acks int64
		want int64
		ok   bool
	}{
		{name: "no check (ctx ended)", node: node, want: WaitAll},
		{name: "sentinels disagree", c: &fenceCheck{}, node: node, want: WaitAll},
		{name: "new master, old one not converted", c: &fenceCheck{addr: "10.0.0.1:6379", listed: 1, away: 1}, node: node, want: WaitAll, ok: true},
		{name: "another node is the master", c: &fenceCheck{addr: "10.0.0.2:6379", listed: 1, away: 1}, node: node, want: WaitAll},
		{name: "by run_id behind NAT", c: &fenceCheck{addr: "192.168.0.1:6379", runID: "r1", listed: 1, away: 1}, node: node, want: WaitAll, ok: true},
		{name: "run_id unknown behind NAT", c: &fenceCheck{addr: "192.168.0.1:6379", listed: 1, away: 1}, node: node, want: WaitAll},
		{name: "a promotable replica misses the write", c: &fenceCheck{addr: "10.0.0.1:6379", listed: 2, away: 1}, node: node, want: WaitAll},
		{name: "one acked, one away", c: &fenceCheck{addr: "10.0.0.1:6379", listed: 2, away: 1}, node: node, acks: 1, want: WaitAll, ok: true},
		{name: "fixed N", c: &fenceCheck{addr: "10.0.0.1:6379", listed: 3, away: 1}, node: node, want: 1, ok: true},
	}
	for _, tt := range tests {
		if got := tt.c.allows(tt.node, tt.acks, tt.want); got != tt.ok {
			t.Errorf("%s: allows(%+v, %d, %d) = %v, want %v", tt.name, tt.node, tt.acks, tt.want, got, tt.ok)
		}
	}
}

// startSentinel runs a redis-sentinel monitoring master as name, with quorum
// 1, and returns its address.
func startSentinel(t *testing.T, name, master string) string {
	t.Helper()
	bin := redistest.Need(t, "redis-sentinel")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	mhost, mport, _ := net.SplitHostPort(master)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\n",
		port, dir, name, mhost, mport, name)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return addr
}

// The fence with a real sentinel: a write every replica acknowledged needs
// no sentinel (one of the two listed is dead); a write that misses a
// replica stands only when every sentinel answers that this node is the
// master and the missing replica is one it would not promote (here: one
// that reports itself a master).
func TestSentinelFence(t *testing.T) {
	master, replica := redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: replica})
	defer rc.Close()
	mhost, mport, _ := net.SplitHostPort(master)
	if err := rc.ReplicaOf(ctx, mhost, mport).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	live := startSentinel(t, "m", master)
	sc := redis.NewSentinelClient(&redis.Options{Addr: live})
	defer sc.Close()
	waitFor(t, 20*time.Second, func() bool {
		reps, err := sc.Replicas(ctx, "m").Result()
		return err == nil && len(reps) == 1 && reps[0]["role-reported"] == "slave"
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	open := func(sentinels ...string) *Redis {
		rdb, err := Open("redis://" + master)
		if err != nil {
			t.Fatal(err)
		}
		return storeOn(t, rdb, uniquePrefix(), Config{WaitReplicas: WaitAll, WaitTimeout: 200 * time.Millisecond, OpTimeout: 5 * time.Second,
			Sentinels: &redis.FailoverOptions{MasterName: "m", SentinelAddrs: sentinels}}, true)
	}
	withDead, liveOnly := open(live, dead), open(live)
	create := func(s *Redis) error {
		return s.Create(ctx, &Task{Owner: ownerA, Runner: "r", TTL: time.Minute}, CreateOptions{})
	}
	if err := create(withDead); err != nil {
		t.Fatalf("Create with the replica following and one sentinel dead = %v, want nil", err)
	}

	// The replica leaves: it reports itself a master until the sentinel
	// turns it back (after 8 s).
	if err := rc.ReplicaOf(ctx, "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool {
		reps, err := sc.Replicas(ctx, "m").Result()
		return err == nil && len(reps) == 1 && reps[0]["role-reported"] == "master"
	})
	if err := create(withDead); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("Create missing a replica, one sentinel dead = %v, want ErrNotReplicated", err)
	}
	if err := create(liveOnly); err != nil {
		t.Errorf("Create missing a replica that reports itself a master, every sentinel naming this node = %v, want nil", err)
	}
}
