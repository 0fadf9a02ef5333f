// Package engine is taskgate's task engine: it runs tool calls as tasks
// for the wire layers in package proxy, and knows no wire. Its API speaks
// in tasks (taskstore.Task), owners (the opaque strings the wires derive
// from a request's credential or session), outcomes (taskstore.Outcome:
// the upstream's raw result or error, or none) and messages (opaque bytes
// the wire rendered, queued in the task's mailbox). It never parses
// JSON-RPC, never sees an HTTP request and never renders an answer; it
// imports neither fasthttp nor package proxy nor a wire package.
//
// # Its parts
//
// Each part is a type in its own file; the wire layers see Engine and its
// two exported parts, Engine.Mail and Engine.Limits.
//
//	Engine      engine.go     its life: New, Close, Root, WaitRoot, Enter, Leave
//	            tasks.go      create, start, read and cancel a task
//	            wait.go       wait for a task's end (or its open questions)
//	Mailbox     mailbox.go    a running call's messages, questions and answers
//	Limits      limits.go     tool concurrency slots, the per-owner rate limit
//	runners     runner.go     the runner goroutines: run a call, record its outcome
//	supervisor  supervise.go  renew leases, see cancels, end calls at their deadline
//	recoverer   recover.go    fail the tasks of runners that died (lease timing)
//	Job         job.go        one running call; Upstream, Sender, Result
//
// Engine, Mailbox and Limits are safe for concurrent use (Mailbox.Progress
// only from the goroutine reading the call's answer). A job's run happens
// on its runner goroutine; the supervisor works on one loop goroutine and
// a few workers; the recoverer on a goroutine of its own.
//
// Helpers: toolLimiter (limits.go) and rateLimiter (ratelimit.go) under
// Limits, meteredStore (storemetrics.go) timing the store's operations
// for Hooks.StoreOp, PollInterval (poll.go), lifeGroup (lifegroup.go).
//
// # What the engine does
//
//   - Create and Start: Limits.Reserve takes one of the tool's
//     concurrency slots (policy maxConcurrent, per process) and makes the
//     task id and the nonce of its upstream request. Create stores the
//     task durably (with the per-owner cap, MaxTasksPerOwner, and the
//     runner's first lease); only then does Start hand it to a runner, so
//     a task a client learns of is always readable from any replica
//     sharing the store.
//   - Runners: a pool of goroutines reused across jobs (a fresh goroutine
//     would grow its stack on every task). A Job is one running call; its
//     supervision starts only after the call has run for a moment (most
//     calls end before) and then renews the lease, watches the store for a
//     cancel (from any replica) and for the client's answers, and ends the
//     call at its deadline: the policy timeout or the task's ttl,
//     whichever comes first. One supervisor per engine does this for
//     every call (a heap of due times, a few workers for the store calls),
//     so a long call costs no goroutine but its runner. The runner records
//     the outcome (retrying while the store is briefly down), or nothing
//     when the task was cancelled or expired.
//   - Leases: every process fails the tasks whose runner stopped renewing
//     (a killed process), at most Config.Lease after the last renewal
//     (LeaseRenew, LeaseTTL, LeaseSkew, LeaseCheck).
//   - Reads and waits: Poll and Get (tasks/get: a read of a working task
//     running here is held until it changes status or for HoldTime, at most
//     Config.PollHold, and such a task reports a pollInterval that leaves
//     the round trips after the hold room within the delay bound (Holds,
//     ReportedPollInterval), so a polling client learns of the end within
//     the bound with about half the polls), Task, Outcome, List, LocalJob,
//     AwaitLocal (a call running here: its runner's memory, no store
//     round trip), WaitTerminal (any call: a store subscription with
//     re-reads, optionally delivering the task's queued messages through a
//     callback first), WaitTerminalOrInput (WaitTerminal that also returns
//     when the task has an open question, for a client that answers
//     questions as they come).
//   - Cancel and CancelOwnerTasks: cancel in the store, and abort the call
//     at once when it runs here; Withdraw for a task nobody else knew of.
//   - Sessions: Start records a call on its upstream session; EndSession
//     defers the end of a session on which calls still run to the last
//     call's runner (Upstream.CloseSession).
//   - Messages (Engine.Mail): Progress (a throttled statusMessage),
//     Enqueue (a message for the client, into the task's mailbox), Ask,
//     AskFor and InputRequired (a question: pending for the owner, task
//     input_required), Answer (a client's answer into the task's inbox,
//     from any replica), TakeAnswers, Answered and Working (the runner's
//     side), WatchOwner, DeliverQueued and DeliverAllQueued (a stream that
//     carries the messages of all of an owner's tasks), Listen (a stream
//     of one task claims its messages), Redeliver (a question whose stream
//     ended unanswered). Open questions can also be kept as input requests
//     readable from any replica (AddInputRequest, InputRequests,
//     AnswerInputs), as the 2026-07-28 wire shows them.
//   - Limits (Engine.Limits): Allow (the per-owner token bucket of task
//     operations), LookupMiss (a miss costs more, which slows down id
//     enumeration), Thrifty (with Engine.ReportedPollInterval: an owner low on
//     budget is told a longer poll interval), Reserve and ReleaseTool.
//
// # What the engine needs from a wire
//
// Upstream runs a job's call: Begin prepares it, Call runs it and
// classifies the answer into a Result, Stopped tells the upstream the call
// was stopped, Answers hands the client's answers to the running call,
// CloseSession ends the upstream session after the last call on a session
// the client ended, Ended releases the call's resources. Job.Call is the
// wire's own value for the call (proxy's job embeds engine.Job and points
// Call back at itself, so a task costs no extra allocation). Hooks
// receive the engine's metrics; the engine imports no metrics library.
//
// # What the wire layers do
//
// Package proxy is the HTTP front; the wire eras are packages of their
// own behind package proxy/wire. The 2025-11-25 era (proxy/wire/v20251125)
// parses tools/call's params.task and the tasks/* requests, renders
// CreateTaskResult, the flat Task, tasks/result with the related-task
// _meta, notifications/tasks/status, the SSE streams that carry a task's
// messages, and maps the engine's errors to JSON-RPC errors; the front
// derives owners. The 2026-07-28 era (proxy/wire/v20260728) renders the
// same stored tasks and raw outcomes in the tasks extension's shapes. Both
// create, read, wait and cancel through one Engine. The Upstream
// implementation is wire.Runner, which leaves each call to its era's
// wire.Call: a 2025-era upstream's call (a JSON or SSE answer, with the
// upstream's notifications and questions on the way) or a 2026-era
// upstream's (input rounds).
//
// Store operations take the caller's context; the store bounds each one
// itself (taskstore.Config.OpTimeout) when the context has no deadline, so
// the engine sets none.
package engine
