package engine

import (
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// The pollInterval reported for a task that still runs is a share of the
// task's age: 1/PollShare of it (5 %), at least PollMin, at most the
// policy's pollInterval (its bound). A client that polls at the reported
// interval learns that a task ended at most one interval late, and the
// interval it followed was set when the task was younger than its end, so
// the delay stays within max(PollMin, 5 % of the task's duration) (plus
// the poll's round trips). Answered at once, the cost is PollMin's rate
// while the task is young (a 2 s task: about 20 polls) and then a constant
// number of polls per doubling of the age (ln 2/ln 1.05, about 14): a
// 10-minute task 138; held (below), about half, round trips included.
//
// No schedule whose polls are answered at once meets that delay bound
// with fewer polls than 137 for 10 minutes (TestPollScheduleFloor). The
// bound holds for every duration, and a task seen running at age t may end
// just after it and is then owed its answer within max(PollMin, 5 % of t):
// so the next poll may come at most that long after t, whatever the
// schedule knows. Knowing more does not lift this: a tool's usual duration
// or the progress a task reports (total, ETA) say when it will probably
// end, not that it cannot end (fail, be cancelled) sooner, and a poll
// skipped on that guess breaks the bound for the task that did. Waiting
// the most allowed at every poll is the fewest polls (x ↦ x + max(PollMin,
// x/20) is increasing, so by induction no valid schedule's k-th poll comes
// later), and that is this schedule: 20 polls to 2 s, then ×1.05 per poll,
// ln 300/ln 1.05 ≈ 117 more to 10 minutes.
//
// Holding the poll lifts the floor (Engine.Poll): a tasks/get of a working
// task, on the process that runs its call, is answered when the task
// changes status or after HoldTime (twice the bound above, at most
// Config.PollHold, 5 s by default). A client learns of an end during a
// hold at once; only an end in the gap between a hold's answer and its
// next poll makes it late, by that gap: the interval it was told plus the
// answer's way back, the next poll's way there and back and, for the TS
// SDK, its tasks/result. So where polls are held (Engine.Holds) the
// reported interval is the bound less a margin for those round trips,
// max(PollMargin, a tenth of the bound): 25 ms for a young task, 27 s at
// 10 minutes. Told the whole bound, a task that ends just after a hold was
// learnt the bound plus a round trip late (30.07 s for 10 minutes). The
// hold's length sets the cost, not the delay: each poll covers a hold of
// twice the bound and an interval, about ×1.14 of the age per poll instead
// of ×1.05 until the hold reaches its 5 s cap, 9 polls for 2 s and 68 for
// 10 minutes (TestPollScheduleCost). A held request is open up to 5 s,
// well under the limits of gateways (30-60 s) and of clients' request
// timeouts. Where nothing holds (another process answers, or PollHold is
// off) the interval is the whole bound: shortened, a young task would cost
// about four times the polls. A client that wants to learn sooner still,
// or to poll less, listens on the GET stream, where status notifications
// arrive as they happen.
//
// A terminal task reports the policy's value (nothing is left to poll). An
// owner that has spent more than half of its rate-limit burst is told at
// least PollThrifty (or the bound, when smaller): a client that follows the
// short intervals of many young tasks at once would otherwise run into the
// rate limit (Limits.Thrifty). Both wires report it (pollInterval,
// pollIntervalMs).
const (
	PollMin     = 100 * time.Millisecond
	PollShare   = 20
	PollThrifty = 2 * time.Second
	PollMargin  = 75 * time.Millisecond
)

// PollInterval is the pollInterval t reports at now: held reports it for
// a task whose next tasks/get is held (Engine.Holds), thrifty at least
// PollThrifty (see PollMin).
func PollInterval(t *taskstore.Task, now time.Time, thrifty, held bool) time.Duration {
	bound := t.PollInterval
	if bound <= 0 || t.Status.Terminal() {
		return bound
	}
	d := pollBound(t, now)
	if held {
		d -= max(PollMargin, d/10)
	}
	if thrifty {
		d = max(d, PollThrifty)
	}
	return max(min(d, bound).Truncate(time.Millisecond), time.Millisecond)
}

// pollBound is how late a client may learn that t, still running at now,
// ended: max(PollMin, 5 % of its age).
func pollBound(t *taskstore.Task, now time.Time) time.Duration {
	age := max(now.Sub(t.CreatedAt), 0) // replicas' clocks may differ a little
	return max(age/PollShare, PollMin)
}
