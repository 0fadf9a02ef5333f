package engine

import (
	"context"
	"errors"
	"time"

	"github.com/taskgate/taskgate/policy"
	"github.com/taskgate/taskgate/taskstore"
)

// Create durably stores t, a new working task whose tool slot Limits.Reserve
// took, with its runner's first lease, and makes j its job (call is the
// wire's value for it, session and upSession as in Job). Start then runs
// it. When storing fails it gives back the tool slot and returns the
// error: taskstore.ErrOwnerLimit when the owner has MaxTasksPerOwner
// unfinished tasks, else the store's (the task is then failed in the
// background, in case the store did create it although the answer was
// lost). The caller frees call's resources on an error. ctx carries the
// request's values (its trace span); the store's own timeout bounds the
// operation.
func (e *Engine) Create(ctx context.Context, j *Job, t *taskstore.Task, st policy.Settings, call any, session, upSession string) error {
	err := e.store.Create(ctx, t, taskstore.CreateOptions{MaxPerOwner: max(e.cfg.MaxTasksPerOwner, 0), Lease: LeaseTTL(e.cfg.Lease)})
	if err != nil {
		e.Limits.ReleaseTool(t.Tool)
		e.hooks.event("refused", t.Tool)
		if !errors.Is(err, taskstore.ErrOwnerLimit) {
			e.logAt(ctx).Error().Err(err).Str(logTool, t.Tool).Msg("creating a task failed")
			e.abandonCreate(t)
		}
		return err
	}
	e.hooks.event("created", t.Tool)
	e.runs.prepare(j, t, st, call, session, upSession)
	return nil
}

// abandonCreate fails a task whose Create timed out: the store may have
// created it although the answer was lost, and the client was told no
// task exists. Without this the task would sit until lease recovery
// failed it.
func (e *Engine) abandonCreate(t *taskstore.Task) {
	e.runs.wg.Add(1)
	go func() {
		defer e.runs.wg.Done()
		_, _ = e.store.Finish(context.Background(), t.Owner, t.ID, taskstore.Failed,
			"task creation timed out; the call was not started", taskstore.Outcome{Kind: taskstore.OutcomeInternal})
	}()
}

// Start records j's call on its upstream session (so that the client's
// end of the session waits for it), registers it as running here and
// hands it to a runner.
func (e *Engine) Start(j *Job) {
	e.runs.startSessionTask(j)
	e.jobs.Store(j.Task.ID, j)
	e.runs.start(j)
}

// LocalJob returns the job running taskID in this process if it belongs
// to owner (else nil: a foreign id is answered exactly as an unknown one).
func (e *Engine) LocalJob(owner, taskID string) *Job {
	v, found := e.jobs.Load(taskID)
	if !found {
		return nil
	}
	if j := v.(*Job); j.Task.Owner == owner {
		return j
	}
	return nil
}

// RunsHere reports whether owner's task taskID runs in this process.
func (e *Engine) RunsHere(owner, taskID string) bool { return e.LocalJob(owner, taskID) != nil }

// Get returns owner's task taskID as tasks/get answers it: Poll without
// the outcome.
func (e *Engine) Get(ctx context.Context, owner, taskID string) (*taskstore.Task, error) {
	t, _, err := e.Poll(ctx, owner, taskID, false)
	return t, err
}

// Task reads owner's task taskID from the store (no hold; see Get).
func (e *Engine) Task(ctx context.Context, owner, taskID string) (*taskstore.Task, error) {
	return e.store.Get(ctx, owner, taskID)
}

// Outcome reads owner's task taskID with its stored outcome.
func (e *Engine) Outcome(ctx context.Context, owner, taskID string) (*taskstore.Task, *taskstore.Outcome, error) {
	return e.store.Outcome(ctx, owner, taskID)
}

// List returns a page (ListPageSize) of owner's live tasks after cursor,
// and the next page's cursor ("" = no more); taskstore.ErrBadCursor for a
// cursor the store did not issue.
func (e *Engine) List(ctx context.Context, owner, cursor string) ([]taskstore.Task, string, error) {
	return e.store.List(ctx, owner, cursor, e.cfg.ListPageSize)
}

// Cancel cancels owner's unfinished task taskID with statusMessage msg
// and aborts its call when it runs here; taskstore.ErrTerminal when it
// already finished. With timed the task's age is observed (TaskDuration).
func (e *Engine) Cancel(ctx context.Context, owner, taskID, msg string, timed bool) (*taskstore.Task, error) {
	t, err := e.store.Cancel(ctx, owner, taskID, msg)
	if err != nil {
		return nil, err
	}
	if v, ok := e.jobs.Load(taskID); ok {
		// The call runs here: abort it now rather than when its runner
		// sees the store's wake-up.
		v.(*Job).cancel(ErrCancelledByClient)
	}
	e.hooks.event("cancelled", t.Tool)
	if timed {
		e.hooks.duration(t.Tool, "cancelled", time.Since(t.CreatedAt))
	}
	e.logAt(ctx).Info().Str(logTaskID, taskID).Str(logOwner, owner).Msg("task cancelled")
	return t, nil
}

// Withdraw cancels j's task with statusMessage msg and aborts its call,
// without counting it as a client's cancel: nobody but the engine knew of
// the task (a held call whose client never came back).
func (e *Engine) Withdraw(ctx context.Context, j *Job, msg string) error {
	if _, err := e.store.Cancel(ctx, j.Task.Owner, j.Task.ID, msg); err != nil {
		return err
	}
	j.cancel(ErrCancelledByClient)
	return nil
}

// CancelOwnerTasks cancels owner's unfinished tasks with statusMessage
// msg (and aborts those running here). Failures are logged: the end of
// the session that owned them fails their calls anyway.
func (e *Engine) CancelOwnerTasks(owner, msg string) {
	ctx := e.root
	for cursor := ""; ; {
		tasks, next, err := e.store.List(ctx, owner, cursor, taskstore.MaxListLimit)
		if err != nil {
			e.log.Warn().Err(err).Msg("listing the ended session's tasks failed; their calls end with the session")
			return
		}
		for i := range tasks {
			if tasks[i].Status.Terminal() {
				continue
			}
			if _, err := e.store.Cancel(ctx, owner, tasks[i].ID, msg); err != nil {
				continue // finished meanwhile, or the store failed: the session's end settles it
			}
			if v, ok := e.jobs.Load(tasks[i].ID); ok {
				v.(*Job).cancel(ErrCancelledByClient)
			}
			e.hooks.event("cancelled", tasks[i].Tool)
			e.hooks.duration(tasks[i].Tool, "cancelled", time.Since(tasks[i].CreatedAt))
			e.log.Info().Str(logTaskID, tasks[i].ID).Str(logOwner, owner).Msg("task cancelled: its session ended")
		}
		if next == "" {
			return
		}
		cursor = next
	}
}

// EndSession records that the client ended upstream session sess (its
// store key). When task calls still run on it, the session is marked
// closing and deferred is true: the runner of the last call has the
// upstream end it (Upstream.CloseSession). Else the session's record is
// gone and the caller ends the session upstream itself.
func (e *Engine) EndSession(ctx context.Context, sess string) (deferred bool, err error) {
	return e.store.CloseSession(ctx, sess)
}
