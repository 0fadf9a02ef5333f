package engine

import (
	"errors"
	"sync"
	"time"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/taskstore"
)

// ErrToolBusy: the tool already runs its policy's maxConcurrent calls in
// this process.
var ErrToolBusy = errors.New("engine: the tool runs its maximum of concurrent task calls")

// ErrNoID: making a task id failed.
var ErrNoID = errors.New("engine: generating a task id failed")

// Limits is the engine's admission control: the per-tool concurrency
// slots of this process (policy maxConcurrent; Reserve, ReleaseTool) and
// the per-owner token bucket of task operations (Allow, LookupMiss,
// Thrifty), which also shapes the poll interval an owner is told
// (Engine.ReportedPollInterval). New makes it (Engine.Limits); it is safe for
// concurrent use.
type Limits struct {
	tools toolLimiter
	rate  *rateLimiter
	hooks *Hooks // the engine's
}

// Reserve takes one of tool's concurrency slots (policy maxConcurrent)
// and makes a new task's id and the random nonce of its upstream request,
// which is separate from the task id the client knows. On an error
// (ErrToolBusy, ErrNoID) it holds nothing; else the slot is the task's
// until its run ends (or Engine.Create fails, or ReleaseTool gives it
// back).
func (l *Limits) Reserve(tool string, st policy.Settings) (id, upNonce string, err error) {
	if !l.tools.acquire(tool, st.MaxConcurrent) {
		l.hooks.event("refused", tool)
		return "", "", ErrToolBusy
	}
	id, err1 := taskstore.NewID()
	upNonce, err2 := taskstore.NewID()
	if errors.Join(err1, err2) != nil {
		l.tools.release(tool)
		return "", "", ErrNoID
	}
	return id, upNonce, nil
}

// ReleaseTool gives back a slot Reserve took, for a task that will not be
// created.
func (l *Limits) ReleaseTool(tool string) { l.tools.release(tool) }

// Allow applies the per-owner rate limit to one task operation. When
// over it, it returns false and how long until the owner may go on.
func (l *Limits) Allow(owner string) (bool, time.Duration) {
	ok, wait := l.rate.allow(owner, 1)
	if !ok {
		l.hooks.event("rate_limited", "")
		if l.hooks.RateLimited != nil {
			l.hooks.RateLimited()
		}
	}
	return ok, wait
}

// LookupMiss records that owner looked up a task that does not exist (or
// is not theirs): it counts the miss and charges the owner's rate limit
// the extra cost of a miss, which slows down id enumeration.
func (l *Limits) LookupMiss(owner string) {
	l.hooks.event("lookup_miss", "")
	if owner != "" {
		l.rate.charge(owner, missCost-1)
	}
}

// Thrifty reports whether owner has spent more than half of its rate-limit
// burst: a wire then tells it the policy's pollInterval rather than the
// short one of a young task.
func (l *Limits) Thrifty(owner string) bool { return l.rate.low(owner) }

// toolLimiter counts running background calls per tool in this process
// (policy maxConcurrent protects the upstream this sidecar fronts).
type toolLimiter struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *toolLimiter) acquire(tool string, max int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = make(map[string]int)
	}
	if max > 0 && l.n[tool] >= max {
		return false
	}
	l.n[tool]++
	return true
}

func (l *toolLimiter) release(tool string) {
	l.mu.Lock()
	if l.n[tool]--; l.n[tool] <= 0 {
		delete(l.n, tool)
	}
	l.mu.Unlock()
}
