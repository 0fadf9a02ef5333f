package engine

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/taskstore"
)

// Lease timing, all derived from Config.Lease (L). A runner renews its
// task's lease every LeaseRenew (L/5), each time to LeaseTTL (L/2) ahead.
// Every process checks every LeaseCheck (L/4) and fails a task whose lease
// ended more than LeaseSkew (L/4, the allowance for clock differences
// between hosts) ago. A runner that dies right after a renewal leaves a
// lease ending L/2 later; the first check more than L/4 after that comes
// at most L/4 later still: the task fails at most L after the last
// renewal, so at most L after the death (and at least 0.55 L after it). A
// live runner loses its task only when none of its renewals reached the
// store for 3L/4 (11.25 s by default: three attempts of StoreTimeout).
func LeaseRenew(l time.Duration) time.Duration { return l / 5 }

// LeaseTTL is how far ahead a lease is set (see LeaseRenew).
func LeaseTTL(l time.Duration) time.Duration { return l / 2 }

// LeaseSkew is the clock allowance of lease recovery (see LeaseRenew).
func LeaseSkew(l time.Duration) time.Duration { return l / 4 }

// LeaseCheck is the interval of lease recovery (see LeaseRenew).
func LeaseCheck(l time.Duration) time.Duration { return l / 4 }

// MsgLeaseLost is the statusMessage of a task whose runner vanished.
const MsgLeaseLost = "the taskgate process running this call stopped (its lease expired); the call's outcome is lost — call the tool again"

// recoverer fails the tasks whose runner (in any process sharing the
// store) stopped renewing its lease: a killed process's tasks. It runs
// at start and every LeaseCheck, on one goroutine of its own (loop), and
// reports each task it failed through the engine's hooks. Its fields are
// set before loop starts and not changed after.
type recoverer struct {
	store taskstore.Store
	lease time.Duration // Config.Lease
	log   *zerolog.Logger
	hooks *Hooks
}

// loop recovers until ctx ends.
func (r *recoverer) loop(ctx context.Context) {
	t := time.NewTicker(LeaseCheck(r.lease))
	defer t.Stop()
	for {
		r.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pass fails the tasks whose lease ended more than LeaseSkew ago. A panic
// is logged: the next pass tries again.
func (r *recoverer) pass(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error().Interface("panic", p).Msg("lease recovery panicked")
		}
	}()
	lost, err := r.store.Recover(ctx, LeaseSkew(r.lease), MsgLeaseLost)
	if err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Msg("lease recovery failed")
	}
	for _, t := range lost {
		r.hooks.event("lost", t.Tool)
		r.hooks.duration(t.Tool, "lost", time.Since(t.CreatedAt))
		r.log.Warn().Str(logTaskID, t.ID).Str(logOwner, t.Owner).Str("runner", t.Runner).
			Msg("task failed: its runner stopped renewing the lease")
		if r.hooks.Lost != nil {
			r.hooks.Lost(&t)
		}
	}
}
