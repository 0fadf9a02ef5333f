package engine

import (
	"testing"
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// PollInterval: a running task's interval is 1/PollShare of its age, at
// least PollMin, at most the policy's bound; held, less max(PollMargin, a
// tenth of that); a thrifty owner gets at least PollThrifty; a terminal
// task gets the bound.
func TestPollInterval(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		age     time.Duration
		bound   time.Duration
		status  taskstore.Status
		thrifty bool
		held    bool
		want    time.Duration
	}{
		{age: 0, bound: 30 * time.Second, status: taskstore.Working, want: PollMin},
		{age: time.Second, bound: 30 * time.Second, status: taskstore.Working, want: PollMin},
		{age: 4 * time.Second, bound: 30 * time.Second, status: taskstore.Working, want: 200 * time.Millisecond},
		{age: 10 * time.Minute, bound: 30 * time.Second, status: taskstore.Working, want: 30 * time.Second},
		{age: time.Hour, bound: 30 * time.Second, status: taskstore.Working, want: 30 * time.Second},
		{age: time.Hour, bound: 2 * time.Second, status: taskstore.Working, want: 2 * time.Second},
		{age: 0, bound: 50 * time.Millisecond, status: taskstore.Working, want: 50 * time.Millisecond},
		{age: 0, bound: 30 * time.Second, status: taskstore.Working, thrifty: true, want: PollThrifty},
		{age: 0, bound: time.Second, status: taskstore.Working, thrifty: true, want: time.Second},
		{age: time.Minute, bound: 30 * time.Second, status: taskstore.Working, thrifty: true, want: 3 * time.Second},
		{age: 0, bound: 30 * time.Second, status: taskstore.Completed, want: 30 * time.Second},
		{age: 0, bound: 30 * time.Second, status: taskstore.Working, held: true, want: 25 * time.Millisecond},
		{age: 4 * time.Second, bound: 30 * time.Second, status: taskstore.Working, held: true, want: 125 * time.Millisecond},
		{age: 30 * time.Second, bound: 30 * time.Second, status: taskstore.Working, held: true, want: 1350 * time.Millisecond},
		{age: 10 * time.Minute, bound: 30 * time.Second, status: taskstore.Working, held: true, want: 27 * time.Second},
		{age: time.Hour, bound: 30 * time.Second, status: taskstore.Working, held: true, want: 30 * time.Second},
		{age: 0, bound: 10 * time.Millisecond, status: taskstore.Working, held: true, want: 10 * time.Millisecond},
		{age: 0, bound: 30 * time.Second, status: taskstore.Working, held: true, thrifty: true, want: PollThrifty},
		{age: 0, bound: 30 * time.Second, status: taskstore.Completed, held: true, want: 30 * time.Second},
	} {
		tk := &taskstore.Task{Status: tc.status, CreatedAt: created, PollInterval: tc.bound}
		if got := PollInterval(tk, created.Add(tc.age), tc.thrifty, tc.held); got != tc.want {
			t.Errorf("age %v, bound %v, %s, thrifty %v, held %v: %v, want %v", tc.age, tc.bound, tc.status, tc.thrifty, tc.held, got, tc.want)
		}
	}
}

// followSchedule simulates a client that polls a task of duration d as
// the TS SDK does: a tasks/get right after the CreateTaskResult, then one
// each reported pollInterval, each poll taking rtt, and once a tasks/get
// says the task ended, a tasks/result (one more rtt). taskgate holds a
// poll of the working task for HoldTime (limit hold; 0 answers at once)
// and answers at once when the task ends during it; the interval it
// reports is the held one when it holds. It returns the number of
// tasks/get and how late the client learnt of the end (had its result).
func followSchedule(d, bound, hold, rtt time.Duration) (polls int, late time.Duration) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tk := &taskstore.Task{Status: taskstore.Working, CreatedAt: created, PollInterval: bound}
	at := rtt // the create's round trip
	for {
		polls++
		at += rtt / 2 // the request reaches taskgate
		if at >= d {
			return polls, at + rtt/2 + rtt - d
		}
		if h := HoldTime(tk, created.Add(at), hold); at+h >= d {
			return polls, rtt/2 + rtt // answered as it ends
		} else {
			at += h
		}
		at += rtt/2 + PollInterval(tk, created.Add(at), false, hold > 0)
	}
}

// The schedule keeps a following client's delay within max(100 ms, 5 % of
// the task's duration) for every duration from 10 ms to an hour when its
// polls are held (PollHold), round trips of 20 ms included (the held
// interval leaves them PollMargin); answered at once, within that plus
// the round trips. Held it costs 9 polls for 2 s and 68 for 10 minutes;
// answered at once about 20 and 140 (the count grows with the logarithm
// of the duration once 5 % of it exceeds PollMin). The tables are the ones
// cmd/tgload's README gives.
func TestPollScheduleCost(t *testing.T) {
	const bound = 30 * time.Second // the policy's default
	for _, tc := range []struct {
		hold     time.Duration
		d        time.Duration
		maxPolls int
	}{
		{hold: 0, d: 100 * time.Millisecond, maxPolls: 2},
		{hold: 0, d: 2 * time.Second, maxPolls: 21},
		{hold: 0, d: 30 * time.Second, maxPolls: 76},
		{hold: 0, d: 10 * time.Minute, maxPolls: 140},
		{hold: PollHold, d: 100 * time.Millisecond, maxPolls: 1},
		{hold: PollHold, d: 2 * time.Second, maxPolls: 9},
		{hold: PollHold, d: 30 * time.Second, maxPolls: 30},
		{hold: PollHold, d: 10 * time.Minute, maxPolls: 68},
	} {
		polls, late := followSchedule(tc.d, bound, tc.hold, 2*time.Millisecond)
		t.Logf("hold %v, task of %v: %d polls, learnt %v after its end", tc.hold, tc.d, polls, late)
		if polls > tc.maxPolls {
			t.Errorf("hold %v, task of %v: %d polls, want at most %d", tc.hold, tc.d, polls, tc.maxPolls)
		}
	}
	for _, rtt := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond} {
		for _, hold := range []time.Duration{0, PollHold, 100 * time.Millisecond, time.Second, time.Minute} {
			worst := 0.0
			for d := 10 * time.Millisecond; d <= time.Hour; d += d/200 + time.Millisecond {
				_, late := followSchedule(d, bound, hold, rtt)
				allowed := max(PollMin, d/20)
				if hold == 0 {
					// The interval is the whole bound: the round trips come on top.
					allowed = min(allowed, bound) + 5*rtt/2
				}
				if late > allowed {
					t.Fatalf("hold %v, round trips of %v, task of %v: learnt %v after its end, want at most %v", hold, rtt, d, late, allowed)
				}
				worst = max(worst, float64(late)/float64(allowed))
			}
			t.Logf("hold %v, round trips of %v: worst delay over 10 ms..1 h: %.2f of the allowed", hold, rtt, worst)
		}
	}
}

// floorPolls is the fewest polls any schedule needs to see a task of
// duration d end while keeping the delay within max(PollMin, share·d): the
// greedy schedule, which after a poll at age t waits the most the bound
// allows, max(PollMin, share·t) (a task that ends just after t is owed no
// more). Greedy is optimal: x ↦ x + max(PollMin, share·x) is increasing,
// so by induction its k-th poll is never earlier than any valid
// schedule's.
func floorPolls(d time.Duration, share float64) int {
	n := 0
	for at := time.Duration(0); at < d; n++ {
		at += max(PollMin, time.Duration(share*float64(at)))
	}
	return n
}

// Answered at once, the schedule is within two polls of the floor for the
// delay bound max(100 ms, 5 % of the duration) at every duration from
// 100 ms to 10 minutes: no schedule that answers at once and meets that
// bound polls a 10-minute task about 100 times (the floor is 137). The
// floor for other shares shows what a looser bound would buy: about 100
// polls for 10 minutes needs 7.5 % (98). Held polls are not bound by it
// (the client learns of the end during a hold without a poll): the same
// schedule held needs at most 60 % of that floor from 2 s on.
func TestPollScheduleFloor(t *testing.T) {
	const bound = 30 * time.Second
	for d := 100 * time.Millisecond; d <= 10*time.Minute; d += d / 50 {
		polls, _ := followSchedule(d, bound, 0, 0)
		floor := floorPolls(d, 1.0/PollShare)
		if polls > floor+2 {
			t.Fatalf("task of %v: %d polls, the floor for 5 %% is %d", d, polls, floor)
		}
		if held, _ := followSchedule(d, bound, PollHold, 0); d >= 2*time.Second && float64(held) > 0.6*float64(floor) {
			t.Fatalf("task of %v: %d polls held, want at most 60 %% of the floor %d", d, held, floor)
		}
	}
	for _, tc := range []struct {
		share float64
		d     time.Duration
		want  int
	}{
		{share: 0.05, d: 2 * time.Second, want: 20},
		{share: 0.05, d: 30 * time.Second, want: 76},
		{share: 0.05, d: 10 * time.Minute, want: 137},
		{share: 0.075, d: 2 * time.Second, want: 19},
		{share: 0.075, d: 10 * time.Minute, want: 98},
		{share: 0.10, d: 10 * time.Minute, want: 78},
	} {
		if got := floorPolls(tc.d, tc.share); got != tc.want {
			t.Errorf("floorPolls(%v, %.3f) = %d, want %d", tc.d, tc.share, got, tc.want)
		}
	}
}
