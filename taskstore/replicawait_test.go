package taskstore

import (
	"context"
	"errors"
	"net"
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
		{in: "redis://h:1?wait_replicas=2", url: "redis://h:1", w: replicaWait{2, DefaultWaitTimeout}},
		{in: "redis+sentinel://s1,s2/m?wait_replicas=1&wait_timeout=2s&pool_size=5", url: "redis+sentinel://s1,s2/m?pool_size=5", w: replicaWait{1, 2 * time.Second}},
		{in: "redis://h:1?wait_replicas=0", url: "redis://h:1"},
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
