package taskstore

import (
	"cmp"
	"errors"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/taskgate/taskgate/taskstore/redistest"
)

// adminTasks creates a mix of tasks over two owners, tools, runners and
// eras, and returns them newest first in the admin order.
func adminTasks(t *testing.T, s Store) []*Task {
	t.Helper()
	var all []*Task
	for i := range 7 {
		tk := newTask([]string{ownerA, ownerB}[i%2])
		tk.Tool = []string{"build", "deploy", "test"}[i%3]
		tk.Runner = []string{"r1", "r2"}[i%2]
		tk.Era = []string{"2025-11-25", "2026-07-28", ""}[i%3]
		all = append(all, mustCreate(t, s, tk, CreateOptions{}))
	}
	slices.SortFunc(all, func(a, b *Task) int {
		return compareAdminPos(adminPos{a.CreatedAt.UnixMilli(), leaseMember(a.Owner, a.ID)},
			adminPos{b.CreatedAt.UnixMilli(), leaseMember(b.Owner, b.ID)})
	})
	return all
}

// adminAll pages through AdminList with f and returns the ids.
func adminAll(t *testing.T, s Store, f AdminFilter) []string {
	t.Helper()
	var got []string
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("AdminList does not end")
		}
		ts, next, err := s.AdminList(testCtx(t), f)
		if err != nil {
			t.Fatalf("AdminList(%+v) = %v", f, err)
		}
		got = append(got, ids(ts)...)
		if next == "" {
			return got
		}
		f.Cursor = next
	}
}

func idsOf(ts []*Task, keep func(*Task) bool) []string {
	var out []string
	for _, t := range ts {
		if keep(t) {
			out = append(out, t.ID)
		}
	}
	return out
}

func testAdminList(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	all := adminTasks(t, s)
	if _, err := s.Finish(ctx, all[1].Owner, all[1].ID, Completed, "", Outcome{Kind: OutcomeResult, Raw: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, all[4].Owner, all[4].ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, all[5].Owner, all[5].ID, InputRequired, "asks"); err != nil {
		t.Fatal(err)
	}
	every := func(*Task) bool { return true }
	for _, tc := range []struct {
		name string
		f    AdminFilter
		want []string
	}{
		{"all, pages of 2", AdminFilter{Limit: 2}, idsOf(all, every)},
		{"all, one page", AdminFilter{}, idsOf(all, every)},
		{"completed", AdminFilter{Status: []Status{Completed}}, []string{all[1].ID}},
		{"running", AdminFilter{Status: []Status{Working, InputRequired}, Limit: 1},
			idsOf(all, func(x *Task) bool { return x != all[1] && x != all[4] })},
		{"tool", AdminFilter{Tool: "deploy"}, idsOf(all, func(x *Task) bool { return x.Tool == "deploy" })},
		{"runner", AdminFilter{Runner: "r2", Limit: 3}, idsOf(all, func(x *Task) bool { return x.Runner == "r2" })},
		{"tool and runner", AdminFilter{Tool: "test", Runner: "r1"},
			idsOf(all, func(x *Task) bool { return x.Tool == "test" && x.Runner == "r1" })},
		{"older than an hour", AdminFilter{OlderThan: time.Hour}, nil},
		{"no such tool", AdminFilter{Tool: "nope"}, nil},
	} {
		if diff := gocmp.Diff(tc.want, adminAll(t, s, tc.f)); diff != "" {
			t.Errorf("%s: AdminList ids (-want +got):\n%s", tc.name, diff)
		}
	}
	// Two hours later (another replica's clock) every task is older than an hour.
	later := b.open(t, Config{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if diff := gocmp.Diff(idsOf(all, every), adminAll(t, later, AdminFilter{OlderThan: time.Hour, Limit: 3})); diff != "" {
		t.Errorf("older than an hour, 2h later (-want +got):\n%s", diff)
	}
	// The listed tasks are whole: owner, era, status.
	ts, _, err := s.AdminList(ctx, AdminFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range ts {
		if got.Owner != all[i].Owner || got.Era != all[i].Era || got.Tool != all[i].Tool || got.Runner != all[i].Runner {
			t.Errorf("AdminList[%d] = %+v, want owner %s era %q tool %s runner %s", i, got, all[i].Owner, all[i].Era, all[i].Tool, all[i].Runner)
		}
	}
	if ts[1].Status != Completed || ts[4].Status != Cancelled || ts[5].Status != InputRequired || ts[5].StatusMessage != "asks" {
		t.Errorf("statuses = %s %s %s, want completed cancelled input_required", ts[1].Status, ts[4].Status, ts[5].Status)
	}
	// A task created while paging does not disturb the pages (it sorts
	// before the first page, or in the cursor's millisecond after it: then
	// it is listed once).
	page, next, err := s.AdminList(ctx, AdminFilter{Limit: 3})
	if err != nil || next == "" {
		t.Fatalf("AdminList = %v, %q, %v", ids(page), next, err)
	}
	added := mustCreate(t, s, newTask(ownerA), CreateOptions{})
	rest := slices.DeleteFunc(adminAll(t, s, AdminFilter{Limit: 3, Cursor: next}), func(id string) bool { return id == added.ID })
	if diff := gocmp.Diff(idsOf(all, every), append(ids(page), rest...)); diff != "" {
		t.Errorf("paging across a create (-want +got):\n%s", diff)
	}
	// Cursors: garbage, an owner's tasks/list cursor, another key's cursor.
	_, listCur, err := s.List(ctx, ownerA, "", 1)
	if err != nil || listCur == "" {
		t.Fatalf("List = %q, %v", listCur, err)
	}
	foreign := b.open(t, Config{CursorKey: []byte("another cursor key of 32 bytes!!")})
	_, foreignCur, err := foreign.AdminList(ctx, AdminFilter{Limit: 1})
	if err != nil || foreignCur == "" {
		t.Fatalf("foreign AdminList = %q, %v", foreignCur, err)
	}
	for _, c := range []string{"garbage", listCur, foreignCur, next + "x"} {
		if _, _, err := s.AdminList(ctx, AdminFilter{Cursor: c}); !errors.Is(err, ErrBadCursor) {
			t.Errorf("AdminList(cursor %q) = %v, want ErrBadCursor", c, err)
		}
	}
	if _, _, err := s.List(ctx, ownerA, next, 10); !errors.Is(err, ErrBadCursor) {
		t.Errorf("List(admin cursor) = %v, want ErrBadCursor", err)
	}
}

func testAdminFindStats(t *testing.T, b *backend) {
	s := b.open(t, Config{})
	ctx := testCtx(t)
	all := adminTasks(t, s)
	if _, err := s.Finish(ctx, all[0].Owner, all[0].ID, Failed, "no", Outcome{Kind: OutcomeInternal}); err != nil {
		t.Fatal(err)
	}
	for _, want := range all {
		got, err := s.AdminFind(ctx, want.ID)
		if err != nil {
			t.Fatalf("AdminFind(%s) = %v", want.ID, err)
		}
		if got.Owner != want.Owner || got.Era != want.Era || got.Tool != want.Tool {
			t.Errorf("AdminFind(%s) = %+v, want owner %s era %q", want.ID, got, want.Owner, want.Era)
		}
	}
	for _, id := range []string{"0123456789abcdef0123456789abcdef", "", "bad/id", "x{y}"} {
		if _, err := s.AdminFind(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("AdminFind(%q) = %v, want ErrNotFound", id, err)
		}
	}
	st, err := s.AdminStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := newAdminStats()
	for _, tk := range all {
		got := mustGet(t, s, tk.Owner, tk.ID)
		want.add(got)
	}
	if diff := gocmp.Diff(want, st); diff != "" {
		t.Errorf("AdminStats (-want +got):\n%s", diff)
	}
	if want.ByStatus[Failed] != 1 || want.ByStatus[Working] != 6 || len(want.OldestRunning) != 3 {
		t.Errorf("expected stats = %+v", want)
	}
	oldest := slices.MinFunc(all[1:], func(a, b *Task) int {
		return cmp.Compare(a.CreatedAt.UnixMilli(), b.CreatedAt.UnixMilli())
	})
	if o := st.OldestRunning[oldest.Tool]; !o.Equal(oldest.CreatedAt) {
		t.Errorf("OldestRunning[%s] = %v, want %v", oldest.Tool, o, oldest.CreatedAt)
	}
	// An expired task is neither found nor counted.
	short := newTask(ownerA)
	short.TTL = 200 * time.Millisecond
	mustCreate(t, s, short, CreateOptions{})
	if _, err := s.AdminFind(ctx, short.ID); err != nil {
		t.Fatalf("AdminFind(new) = %v", err)
	}
	expire(t, b, s, short.TTL, ownerA, short.ID)
	waitFor(t, 5*time.Second, func() bool {
		_, err := s.AdminFind(ctx, short.ID)
		return errors.Is(err, ErrNotFound)
	})
	// The Redis store counts a task until the end of its expiry second.
	var after AdminStats
	waitFor(t, 5*time.Second, func() bool {
		after, err = s.AdminStats(ctx)
		return err == nil && after.ByStatus[Working] == 6
	})
	if err != nil || after.ByStatus[Working] != 6 {
		t.Errorf("AdminStats after expiry = %+v, %v; want 6 working", after, err)
	}
	if got := adminAll(t, s, AdminFilter{}); slices.Contains(got, short.ID) {
		t.Errorf("AdminList lists the expired task")
	}
}

// TestAdminStatsCountersRedis checks that the Redis store's AdminStats,
// which comes from counters (redis_stats.go), counts exactly on a
// redis-server holding many tasks changed by two replicas, and that it
// reads no task: its commands do not grow with the number of tasks.
func TestAdminStatsCountersRedis(t *testing.T) {
	addr := redistest.Start(t)
	prefix := uniquePrefix()
	a := storeOn(t, redis.NewClient(clientOpts(addr)), prefix, Config{}, true)
	b := storeOn(t, redis.NewClient(clientOpts(addr)), prefix, Config{}, true)
	admin := redis.NewClient(clientOpts(addr))
	t.Cleanup(func() { _ = admin.Close() })
	ctx := testCtx(t)
	tools := []string{"build", "deploy", "test", "lint"}
	const n = 3000
	want := newAdminStats()
	var tasks []*Task
	for i := range n {
		s := []*Redis{a, b}[i%2]
		tk := newTask([]string{ownerA, ownerB, "owner-c"}[i%3])
		tk.Tool = tools[i%len(tools)]
		tasks = append(tasks, mustCreate(t, s, tk, CreateOptions{}))
	}
	for i, tk := range tasks {
		// Cancels and updates come through either replica, outcomes from
		// the one that runs the task (created it), as in taskgate.
		s, runner := []*Redis{a, b}[(i/2)%2], []*Redis{a, b}[i%2]
		var err error
		switch i % 5 {
		case 0:
			_, err = runner.Finish(ctx, tk.Owner, tk.ID, Completed, "", benchOutcome)
		case 1:
			// The client cancels, possibly on another replica; the runner
			// then records its late outcome where it runs, refused.
			if _, err = s.Cancel(ctx, tk.Owner, tk.ID, ""); err == nil {
				_, err = runner.Finish(ctx, tk.Owner, tk.ID, Completed, "", benchOutcome)
				if errors.Is(err, ErrTerminal) {
					err = nil
				}
			}
		case 2:
			_, err = s.Update(ctx, tk.Owner, tk.ID, InputRequired, "")
		case 3:
			if _, err = runner.Finish(ctx, tk.Owner, tk.ID, Failed, "", Outcome{Kind: OutcomeInternal}); err == nil {
				_, err = s.Cancel(ctx, tk.Owner, tk.ID, "") // refused: counted once
				if errors.Is(err, ErrTerminal) {
					err = nil
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tk := range tasks {
		want.add(mustGet(t, a, tk.Owner, tk.ID))
	}
	if err := b.flushStats(ctx); err != nil { // the other replica's last changes
		t.Fatal(err)
	}
	if err := a.flushStats(ctx); err != nil { // so that only AdminStats's reads are counted
		t.Fatal(err)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := a.AdminStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("AdminStats over %d tasks (-want +got):\n%s", n, diff)
	}
	st, err := readCommandStats(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	seconds := map[int64]bool{}
	for _, tk := range tasks {
		seconds[bucketOf(tk.ExpiresAt().UnixMilli())] = true
	}
	// Two range reads, one HGETALL per expiry second and per replica with
	// running tasks; no task read. (A replica's timer may write its
	// oldest running tasks meanwhile: those writes are not counted.)
	for name, c := range st {
		switch {
		case name == "zrangebyscore" && c.calls > 2,
			name == "hgetall" && c.calls > int64(len(seconds)+2),
			name == "hmget" || name == "hget" || name == "zrange" || name == "zrevrangebyscore":
			t.Errorf("AdminStats over %d tasks in %d expiry seconds ran %s %d times: %v", n, len(seconds), name, c.calls, st)
		}
	}
	calls := st["zrangebyscore"].calls + st["hgetall"].calls
	t.Logf("AdminStats over %d tasks (%d expiry seconds): %d reads", n, len(seconds), calls)
}
