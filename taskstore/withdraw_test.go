package taskstore

import (
	"context"
	"errors"
	"fmt"
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

// stallRedis makes the Redis node holding key run a script for d (busy
// and probe are clients of the backend) and returns once that node is
// stalled (a script on key's slot goes unanswered for 20 ms); the returned
// channel is closed when the script ended.
func stallRedis(t *testing.T, busy, probe redis.UniversalClient, key string, d time.Duration) <-chan struct{} {
	t.Helper()
	ctx := context.Background()
	for _, c := range []redis.UniversalClient{busy, probe} { // connected, slots known
		if err := c.Eval(ctx, "return 1", []string{key}).Err(); err != nil {
			t.Fatalf("EVAL: %v", err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
		defer cancel()
		_ = busy.Eval(ctx, busyScript, []string{key}, d.Microseconds()).Err()
	}()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := probe.Eval(ctx, "return 1", []string{key}).Err()
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
	t.Run("redis-server", func(t *testing.T) {
		addr := redistest.Start(t)
		client := func() redis.UniversalClient { return redis.NewClient(clientOpts(addr)) }
		testCreateTimeoutWithdraws(t, client)
	})
	t.Run("cluster", func(t *testing.T) {
		addrs := redistest.StartCluster(t)
		client := func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: addrs, ContextTimeoutEnabled: true,
				DialTimeout: DefaultDialTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout,
				PoolSize: 64, DisableIdentity: true,
			})
		}
		testCreateTimeoutWithdraws(t, client)
	})
}

func testCreateTimeoutWithdraws(t *testing.T, client func() redis.UniversalClient) {
	s := storeOn(t, client(), uniquePrefix(), Config{OpTimeout: 100 * time.Millisecond}, true)
	raw, busy, probe := client(), client(), client()
	t.Cleanup(func() { _, _, _ = raw.Close(), busy.Close(), probe.Close() })
	ctx := context.Background()

	// The stall is seen by a probe timing out; on a loaded machine a probe
	// may time out before it, and the Create then succeeds: try again with
	// another owner.
	var owner string
	var kept, lost *Task
	for attempt := 0; ; attempt++ {
		if attempt == 5 {
			t.Fatal("Create never failed while Redis stalled")
		}
		owner = fmt.Sprintf("owner-w%d", attempt)
		// A task that was created normally stays listed.
		kept = newTask(owner)
		if err := s.Create(ctx, kept, CreateOptions{MaxPerOwner: 100}); err != nil {
			t.Fatalf("Create: %v", err)
		}
		done := stallRedis(t, busy, probe, s.k.index(owner), 600*time.Millisecond)
		lost = newTask(owner)
		err := s.Create(ctx, lost, CreateOptions{MaxPerOwner: 100})
		<-done
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Create while Redis stalls = %v, want ErrUnavailable", err)
		}
		break
	}

	// Redis ran the stalled Create's script after the stall; the task must
	// be gone (or never have been stored) by the time the withdrawal ran.
	var listed []string
	for end := time.Now().Add(5 * time.Second); ; {
		// The store's 100 ms may run out while Redis works off the stall.
		tasks, _, err := s.List(ctx, owner, "", MaxListLimit)
		if err == nil {
			listed = listed[:0]
			for _, x := range tasks {
				listed = append(listed, x.ID)
			}
			if len(listed) == 1 && listed[0] == kept.ID {
				break
			}
		}
		if time.Now().After(end) {
			t.Fatalf("tasks/list = %v (%v), want only %s: the task whose Create failed (%s) is listed", listed, err, kept.ID, lost.ID)
		}
	}
	if _, err := s.Get(ctx, owner, lost.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(failed create %s) = %v, want ErrNotFound", lost.ID, err)
	}
	// The id stays refused: a copy of the script that reaches Redis even
	// later stores nothing.
	late := *lost
	late.Status, late.CreatedAt = "", time.Time{}
	if err := s.Create(ctx, &late, CreateOptions{}); err == nil {
		t.Errorf("Create(%s) again after its withdrawal succeeded, want the id refused", lost.ID)
	}
	if tasks, _, err := s.List(ctx, owner, "", MaxListLimit); err != nil || len(tasks) != 1 {
		t.Errorf("List after the late create = %d tasks, %v; want 1", len(tasks), err)
	}
	// Neither the owner's live count (MaxPerOwner) nor the admin API sees
	// the withdrawn task. (On a Cluster the admin index's entry is written
	// by its own pipelined command, which may land after the withdrawal;
	// AdminList drops entries whose task is gone.)
	if n := raw.ZCard(ctx, s.k.live(owner)).Val(); n != 1 {
		t.Errorf("live zset holds %d tasks, want 1", n)
	}
	if _, err := s.AdminFind(ctx, lost.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("AdminFind(withdrawn %s) = %v, want ErrNotFound", lost.ID, err)
	}
	all, _, err := s.AdminList(ctx, AdminFilter{Limit: 1000})
	if err != nil {
		t.Fatalf("AdminList: %v", err)
	}
	for _, x := range all {
		if x.ID == lost.ID {
			t.Errorf("AdminList lists the withdrawn task %s", lost.ID)
		}
	}

	// An owner whose index is gone (listCmd pruned it empty) although this
	// replica extended it not long ago: the tombstone makes it anew with an
	// expiry (nothing leaks), and this replica forgets its extension, so
	// the next task's Create extends the index to that task's expiry.
	warm := newTask(ownerB)
	warm.TTL = time.Second
	if err := s.Create(ctx, warm, CreateOptions{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := raw.Del(ctx, s.k.index(ownerB)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.withdrawOnce(ctx, newTask(ownerB), 0); err != nil {
		t.Fatalf("withdrawOnce: %v", err)
	}
	if d := raw.PTTL(ctx, s.k.index(ownerB)).Val(); d <= withdrawHold/2 || d > withdrawHold {
		t.Errorf("owner index made by the tombstone: PTTL %v, want about %v", d, withdrawHold)
	}
	if err := s.Create(ctx, newTask(ownerB), CreateOptions{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if d := raw.PTTL(ctx, s.k.index(ownerB)).Val(); d < dayTTL {
		t.Errorf("owner index after a day-long task's Create: PTTL %v, want at least %v", d, dayTTL)
	}
}
