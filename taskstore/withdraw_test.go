package taskstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// busyScript keeps Redis busy for ARGV[1] µs: no other client's command runs
// meanwhile (a script is atomic), but what they send is read afterwards.
const busyScript = `
local t0 = redis.call("TIME")
local us = tonumber(ARGV[1])
repeat
  local t = redis.call("TIME")
until (tonumber(t[1]) - tonumber(t0[1])) * 1000000 + tonumber(t[2]) - tonumber(t0[2]) >= us
return 1`

// stallRedis makes the Redis at addr run a script for d and returns once
// Redis is stalled (a PING with a short deadline goes unanswered); the
// returned channel is closed when the script ended.
func stallRedis(t *testing.T, addr string, d time.Duration) <-chan struct{} {
	t.Helper()
	busy := redis.NewClient(clientOpts(addr))
	t.Cleanup(func() { _ = busy.Close() })
	if err := busy.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
		defer cancel()
		_ = busy.Eval(ctx, busyScript, nil, d.Microseconds()).Err()
	}()
	probe := redis.NewClient(clientOpts(addr))
	defer probe.Close()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := probe.Ping(ctx).Err()
		cancel()
		if err != nil {
			return done
		}
	}
	t.Fatal("Redis never stalled")
	return nil
}

// TestCreateTimeoutWithdrawsTask: a Create that fails because Redis stalls
// past the operation timeout, while its script already went out on the
// connection, must not leave a task behind. Redis runs the script once it
// is free again; without the withdrawal the task a caller was told does
// not exist is then listed (issue 21: "listed but not created", an owner's
// tasks/list counting one task too many) and runs into lease recovery.
func TestCreateTimeoutWithdrawsTask(t *testing.T) {
	addr := redistest.Start(t)
	s := storeOn(t, redis.NewClient(clientOpts(addr)), uniquePrefix(), Config{OpTimeout: 100 * time.Millisecond}, true)
	ctx := context.Background()
	// A task that was created normally stays listed.
	kept := newTask(ownerA)
	if err := s.Create(ctx, kept, CreateOptions{MaxPerOwner: 100}); err != nil {
		t.Fatalf("Create: %v", err)
	}

	done := stallRedis(t, addr, 600*time.Millisecond)
	lost := newTask(ownerA)
	err := s.Create(ctx, lost, CreateOptions{MaxPerOwner: 100})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Create while Redis stalls = %v, want ErrUnavailable", err)
	}
	<-done

	// Redis ran the stalled Create's script after the stall; the task must
	// be gone (or never have been stored) by the time the withdrawal ran.
	var listed []string
	for end := time.Now().Add(5 * time.Second); ; {
		tasks, _, err := s.List(ctx, ownerA, "", MaxListLimit)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		listed = listed[:0]
		for _, x := range tasks {
			listed = append(listed, x.ID)
		}
		if len(listed) == 1 && listed[0] == kept.ID {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("tasks/list = %v, want only %s: the task whose Create failed (%s) is listed", listed, kept.ID, lost.ID)
		}
	}
	if _, err := s.Get(ctx, ownerA, lost.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(failed create %s) = %v, want ErrNotFound", lost.ID, err)
	}
	// The id stays refused: a stored copy of the script that reaches Redis
	// even later stores nothing.
	late := *lost
	late.Status, late.CreatedAt = "", time.Time{}
	if err := s.Create(ctx, &late, CreateOptions{}); err == nil {
		t.Errorf("Create(%s) again after its withdrawal succeeded, want the id refused", lost.ID)
	}
	if tasks, _, err := s.List(ctx, ownerA, "", MaxListLimit); err != nil || len(tasks) != 1 {
		t.Errorf("List after the late create = %d tasks, %v; want 1", len(tasks), err)
	}
	// The owner's live count (MaxPerOwner) does not hold the withdrawn task.
	raw := redis.NewClient(clientOpts(addr))
	defer raw.Close()
	if n := raw.ZCard(ctx, s.k.live(ownerA)).Val(); n != 1 {
		t.Errorf("live zset holds %d tasks, want 1", n)
	}
}
