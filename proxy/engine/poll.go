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
// the poll's round trip). The cost is PollMin's rate while the task is young (a 2 s
// task: about 20 polls) and then a constant number of polls per doubling
// of the age (PollShare·ln 2, about 14): a 10-minute task about 140. No
// schedule does much better with that delay bound: the interval may never
// exceed 5 % of the age the client polled at. A
// client that wants to learn sooner listens on the GET stream, where status
// notifications arrive as they happen.
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
)

// PollInterval is the pollInterval t reports at now; thrifty reports at
// least PollThrifty (see PollMin).
func PollInterval(t *taskstore.Task, now time.Time, thrifty bool) time.Duration {
	bound := t.PollInterval
	if bound <= 0 || t.Status.Terminal() {
		return bound
	}
	age := max(now.Sub(t.CreatedAt), 0) // replicas' clocks may differ a little
	d := max(age/PollShare, PollMin)
	if thrifty {
		d = max(d, PollThrifty)
	}
	return max(min(d, bound).Truncate(time.Millisecond), time.Millisecond)
}
