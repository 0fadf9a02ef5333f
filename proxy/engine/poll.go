package engine

import (
	"time"

	"github.com/taskgate/taskgate/taskstore"
)

// The pollInterval reported for a task that still runs starts at
// PollStart and grows by 1/PollGrowth of the task's age, up to the
// policy's pollInterval (its bound). A client that follows it learns of
// the end of a short call within a few milliseconds and of a long one at
// most about 1/PollGrowth of its age late (a 3 s call: 80 ms), while a
// call that runs for minutes is polled no more often than the policy says.
// A terminal task reports the policy's value (nothing is left to poll).
// An owner that has spent more than half of its rate-limit burst is told
// the policy's value too: a client that follows the short intervals of
// many young tasks at once would otherwise run into the rate limit
// (Thrifty). Both wires report it (pollInterval, pollIntervalMs).
const (
	PollStart  = 5 * time.Millisecond
	PollGrowth = 40
)

// PollInterval is the pollInterval t reports at now; thrifty reports the
// policy's value (see PollStart).
func PollInterval(t *taskstore.Task, now time.Time, thrifty bool) time.Duration {
	if thrifty || t.PollInterval <= 0 || t.Status.Terminal() {
		return t.PollInterval
	}
	age := max(now.Sub(t.CreatedAt), 0) // replicas' clocks may differ a little
	return max(min(PollStart+age/PollGrowth, t.PollInterval).Truncate(time.Millisecond), time.Millisecond)
}

// ReportedPollInterval is the pollInterval t reports now to its owner
// (PollInterval, thrifty when the owner runs low on its rate-limit budget).
func (e *Engine) ReportedPollInterval(t *taskstore.Task) time.Duration {
	return PollInterval(t, time.Now(), e.Thrifty(t.Owner))
}
