package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Status is a task's status as defined by MCP 2025-11-25 (TaskStatus).
type Status string

// The five task statuses. Completed, Failed and Cancelled are terminal (T-23).
const (
	Working       Status = "working"
	InputRequired Status = "input_required"
	Completed     Status = "completed"
	Failed        Status = "failed"
	Cancelled     Status = "cancelled"
)

// Terminal reports whether s is completed, failed or cancelled.
func (s Status) Terminal() bool {
	return s == Completed || s == Failed || s == Cancelled
}

// OutcomeKind says what the stored outcome of a finished task holds.
type OutcomeKind string

// Outcome kinds. The store keeps the upstream's answer raw; mapping it to a
// wire status is the caller's job: each protocol era renders the same raw
// outcome its own way (an isError result is failed on one wire and completed
// on the other).
const (
	// OutcomeNone: no outcome (task not finished, or cancelled).
	OutcomeNone OutcomeKind = ""
	// OutcomeResult: Raw is the upstream JSON-RPC "result" member verbatim.
	OutcomeResult OutcomeKind = "result"
	// OutcomeError: Raw is the upstream JSON-RPC "error" member verbatim.
	OutcomeError OutcomeKind = "error"
	// OutcomeInternal: taskgate could not obtain an upstream answer
	// (transport failure, timeout, lost lease); Raw is empty and the
	// task's StatusMessage says why.
	OutcomeInternal OutcomeKind = "internal"
)

// Outcome is the final answer of a task's underlying request.
type Outcome struct {
	Kind OutcomeKind
	Raw  json.RawMessage
}

// Task is one task as stored. Times have millisecond precision.
type Task struct {
	ID            string
	Owner         string // opaque owner key (already a hash; safe in key names)
	Status        Status
	StatusMessage string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	TTL           time.Duration // effective retention from CreatedAt; always > 0
	PollInterval  time.Duration // 0 = not reported
	Tool          string        // tool name of the underlying tools/call
	UpstreamID    string        // JSON-RPC id used for the upstream request (raw JSON text)
	Runner        string        // id of the taskgate process running the call
	// Session is the opaque key of the group of client streams that may
	// deliver the task's messages and answer its requests (the proxy uses
	// one group per owner, so any session of the owner does), or "" for
	// none. Create accepts "" or 1..128 bytes of
	// [A-Za-z0-9_-] (a hex or base64url digest); it names the session's
	// channel and sets, so it is never a raw Mcp-Session-Id.
	Session string
	// Era is the wire revision that created the task ("2025-11-25",
	// "2026-07-28"), "" when unknown. The store keeps it verbatim.
	Era string
}

// ExpiresAt is CreatedAt + TTL: after it the task and its outcome are gone (T-30).
func (t *Task) ExpiresAt() time.Time { return t.CreatedAt.Add(t.TTL) }

// EventKind is a set of task event kinds, for WatchKinds. The kinds are
// bits, so a set is their sum or bitwise or; 0 means every kind.
type EventKind uint8

// Kinds of task events.
const (
	EventUpdate   EventKind = 1 << iota // status or message changed (Update)
	EventTerminal                       // finished, cancelled or failed by recovery
	EventMessage                        // a message was queued for the client (Enqueue, Requeue)
	EventAnswer                         // a client answer reached the task's inbox

	// AllEvents is every kind (the same as 0).
	AllEvents = EventUpdate | EventTerminal | EventMessage | EventAnswer
)

// has reports whether the set k (0 = all) contains kind.
func (k EventKind) has(kind EventKind) bool { return k == 0 || k&kind != 0 }

// Errors returned by Store implementations. Callers use errors.Is.
var (
	// ErrNotFound: no such task for this owner (unknown, expired or foreign id).
	ErrNotFound = errors.New("taskstore: task not found")
	// ErrTerminal: the task is already terminal; the change was refused.
	ErrTerminal = errors.New("taskstore: task is already terminal")
	// ErrOwnerLimit: the owner already has the maximum number of live tasks.
	ErrOwnerLimit = errors.New("taskstore: too many running tasks for this owner")
	// ErrBadCursor: a tasks/list cursor that this store did not issue for this owner.
	ErrBadCursor = errors.New("taskstore: invalid cursor")
	// ErrUnavailable wraps failures to reach the backing Redis.
	ErrUnavailable = errors.New("taskstore: task store unavailable")
)

// MessageKind classifies a queued message for the queue bound. The caller
// says what a message is; the store never parses messages.
type MessageKind byte

// Message kinds, in the order Enqueue drops them when a queue is full.
const (
	KindProgress     MessageKind = 'p' // notifications/progress: dropped first when the queue is full
	KindNotification MessageKind = 'n' // other notifications (logging): dropped after progress
	KindRequest      MessageKind = 'r' // server-to-client requests: never dropped
)

// Message is one queued message: the bytes the upstream sent, stored
// verbatim, and the kind the caller gave when it queued them (Drain returns
// it so that Requeue can put the message back in its class).
type Message struct {
	Kind MessageKind
	Data []byte
}

// SessionEventKind says what a SessionEvent reports.
type SessionEventKind byte

// Session event kinds.
const (
	// SessionQueued: the task has queued messages (drain them).
	SessionQueued SessionEventKind = 'q'
	// SessionStatus: the task's status or message changed (re-read it).
	SessionStatus SessionEventKind = 's'
	// SessionRescan: events may have been lost (pub/sub reconnect, a full
	// channel, Close): re-scan QueuedTasks and re-read the session's
	// tasks. TaskID is then "".
	SessionRescan SessionEventKind = 'r'
)

// valid reports whether k is one of the three message kinds.
func (k MessageKind) valid() bool {
	return k == KindProgress || k == KindNotification || k == KindRequest
}

// SessionEvent is a wake-up on a session's channel (WatchSession).
type SessionEvent struct {
	Kind   SessionEventKind
	TaskID string
}

// DefaultOpTimeout is Config.OpTimeout when zero: how long one store
// operation may take when the caller's context has no deadline.
const DefaultOpTimeout = 3 * time.Second

// bound returns ctx limited to d from now when it has no deadline, else
// ctx itself (at no cost): a caller's own deadline, shorter or longer,
// wins.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, d)
}

func noCancel() {}

// CreateOptions bound a creation.
type CreateOptions struct {
	// MaxPerOwner caps the owner's non-terminal tasks; 0 = no cap.
	MaxPerOwner int
	// Lease is how long the runner's lease lasts before it must Renew.
	Lease time.Duration
}

// Store keeps tasks and their outcomes: the union of the role interfaces
// below, which callers may accept instead when they need one role only.
// Implementations (Redis, Embedded) are safe for concurrent use.
//
// Every method with a ctx honours its deadline. Callers need not set one:
// an operation whose ctx has no deadline is bounded by the store's own
// per-operation timeout (Config.OpTimeout, default DefaultOpTimeout).
type Store interface {
	Tasks
	Leases
	Events
	Mailboxes
	Inputs
	SessionVersions
	// SessionRecords (sessions.go): owner binding and lifetime of the
	// upstream sessions.
	SessionRecords
	// Admin (admin.go): tasks across owners, for operators.
	Admin
	// Ping checks that the store is reachable.
	Ping(ctx context.Context) error
}

// Tasks creates, reads, changes and lists tasks. Status changes refuse to
// leave a terminal status.
type Tasks interface {
	// Create stores t (status working, CreatedAt == UpdatedAt) and takes a
	// lease for t.Runner, in one round trip. ErrOwnerLimit when over
	// MaxPerOwner; then nothing is stored, and neither with any other
	// error (a create whose outcome is unknown is withdrawn).
	Create(ctx context.Context, t *Task, opt CreateOptions) error
	// Get returns the task or ErrNotFound.
	Get(ctx context.Context, owner, id string) (*Task, error)
	// Update moves a non-terminal task between working and input_required
	// and/or sets its status message (msg == "" keeps the current one).
	// A change wakes Watch and, if the task has a session, WatchSession
	// (SessionStatus). ErrTerminal if terminal, ErrNotFound if missing.
	Update(ctx context.Context, owner, id string, st Status, msg string) (*Task, error)
	// Finish moves a non-terminal task to completed or failed, stores out,
	// drops its lease and deletes its inbox and listening mark; of its
	// outbound queue it keeps the notifications (they precede the result)
	// and drops the requests. ErrTerminal if already terminal (a late
	// outcome after a cancel is dropped, T-59), ErrNotFound if missing or
	// expired. The store may keep out.Raw itself rather than a copy: the
	// caller must not modify it afterwards (Outcome's Raw is read-only
	// either way).
	Finish(ctx context.Context, owner, id string, st Status, msg string, out Outcome) (*Task, error)
	// Cancel moves a non-terminal task to cancelled (T-58) and returns it,
	// deleting its outbound queue, inbox and listening mark.
	// ErrTerminal if already terminal (T-57), ErrNotFound if missing.
	Cancel(ctx context.Context, owner, id, msg string) (*Task, error)
	// Outcome returns the task and its stored outcome in one round trip.
	// The Outcome is never nil when err is nil; its Raw must not be
	// modified.
	Outcome(ctx context.Context, owner, id string) (*Task, *Outcome, error)
	// List returns up to limit of owner's live tasks in creation order,
	// starting after cursor ("" = from the start), and the cursor of the
	// next page ("" = no more). ErrBadCursor for a cursor it did not issue.
	List(ctx context.Context, owner, cursor string, limit int) ([]Task, string, error)
}

// Leases keep a running task bound to the process running it: Create takes
// the lease, the runner renews it, and any process fails the tasks whose
// runner stopped renewing.
type Leases interface {
	// Renew extends the runner's lease to now+lease and returns the task's
	// current status (so a runner learns of a cancel even without Watch).
	Renew(ctx context.Context, owner, id string, lease time.Duration) (Status, error)
	// Recover fails every non-terminal task whose lease expired more than
	// skew ago (on Redis: and whose runner's heartbeat expired too, so a
	// runner that lives answers for its own tasks), with statusMessage msg and outcome kind internal (deleting
	// queue and inbox like Cancel), and returns those tasks. Concurrent
	// Recovers (any replica) fail and return each task once.
	Recover(ctx context.Context, skew time.Duration, msg string) ([]Task, error)
}

// Events are wake-ups. The store stays the source of truth: a watcher
// subscribes first, then re-reads, and re-reads after each signal.
type Events interface {
	// Watch delivers a signal on the returned channel whenever the task
	// changes, a message is enqueued or requeued for it, or an answer
	// arrives for it (any replica). It returns once subscribed; ctx bounds
	// only the subscription. Signals are coalesced (buffer of one) and may
	// be spurious; the channel is never closed; stop releases the
	// subscription, is idempotent and must be called.
	Watch(ctx context.Context, owner, id string) (ch <-chan struct{}, stop func(), err error)
	// WatchKinds is Watch for the event kinds in kinds only (0 = all).
	// Reconnects and Close always signal.
	WatchKinds(ctx context.Context, owner, id string, kinds EventKind) (ch <-chan struct{}, stop func(), err error)
	// WatchFunc is WatchKinds calling fn for each signal instead of
	// sending on a channel, so a watcher needs no goroutine of its own.
	// fn runs on the store's delivery path, under its locks: it must
	// return at once and must not call the store.
	WatchFunc(ctx context.Context, owner, id string, kinds EventKind, fn func()) (stop func(), err error)
	// WatchSession subscribes to the session's events. Same contract as
	// Watch, except that events carry a payload and are not coalesced; a
	// SessionRescan stands for whatever may have been lost.
	WatchSession(ctx context.Context, owner, session string) (<-chan SessionEvent, func(), error)
}

// Mailboxes carry messages while a task runs: the upstream's messages are
// queued per task and delivered once, by whichever stream drains them; the
// client's answers travel back through a per-task inbox.
type Mailboxes interface {
	// Enqueue appends msg to the task's outbound queue and wakes listeners, in
	// one round trip. If a tasks/result listener is registered (SetListening),
	// only the task's Watch channel is signalled; otherwise also the session
	// (SessionQueued) and the task id is recorded in the session's set of
	// tasks with queued messages. When the queue is longer than max
	// (max > 0), the oldest progress messages are dropped first, then the oldest
	// other notifications; requests are never dropped (the queue may then exceed
	// max). Returns how many were dropped. ErrTerminal if the task is terminal
	// (nothing is queued after the end, T-50), ErrNotFound if missing.
	Enqueue(ctx context.Context, owner, id string, kind MessageKind, msg []byte, max int) (dropped int, err error)
	// Drain removes and returns all queued messages of the task, FIFO, atomically
	// (two concurrent Drains never return the same message), and removes the task
	// from its session's queued set.
	Drain(ctx context.Context, owner, id string) ([]Message, error)
	// Requeue puts msgs (undelivered, in order, as Drain returned them)
	// back at the head of the queue and wakes listeners like Enqueue.
	Requeue(ctx context.Context, owner, id string, msgs []Message) error
	// SetListening marks (ttl > 0) or unmarks (ttl <= 0) an open tasks/result
	// stream for the task; the mark expires after ttl unless refreshed.
	SetListening(ctx context.Context, owner, id string, ttl time.Duration) error
	// QueuedTasks lists the session's tasks with queued messages.
	QueuedTasks(ctx context.Context, owner, session string) ([]string, error)
	// AddPending records that upstream request reqID (raw JSON id text) of the
	// session belongs to task id (expires with the task).
	AddPending(ctx context.Context, owner, session, reqID, id string) error
	// Answer, if reqID is pending for (owner, session): removes it, appends msg
	// (the client's JSON-RPC response) to the task's inbox, signals the task's
	// Watch channel, and returns the task id, atomically. ErrNotFound if not pending.
	Answer(ctx context.Context, owner, session, reqID string, msg []byte) (taskID string, err error)
	// TakeAnswers removes and returns the task's inbox (FIFO).
	TakeAnswers(ctx context.Context, owner, id string) ([][]byte, error)
}

// SessionVersions keep the upstream protocol version of each session,
// shared by replicas.
type SessionVersions interface {
	// SessionVersion returns the upstream protocol version recorded for the
	// session key, or "" when none was recorded.
	SessionVersion(ctx context.Context, session string) (string, error)
	// SetSessionVersion records the upstream's protocol version for a
	// session; ttl <= 0 means Config.SessionTTL.
	SetSessionVersion(ctx context.Context, session, version string, ttl time.Duration) error
}
