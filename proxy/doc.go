// Package proxy is taskgate's fasthttp handler: a reverse proxy in front of
// one MCP Streamable HTTP server that adds the tasks feature of MCP
// 2025-11-25 (tools/call with params.task, tasks/get, tasks/result,
// tasks/list, tasks/cancel) for servers that lack it.
//
// # Request path
//
// Only POSTs to the upstream's MCP path are parsed, and only their
// envelope (jsonrpc, id, method, params kept raw) by a strict scanner:
// exact-case member names, duplicates refused, invalid JSON answered with
// -32700 before anything reaches the upstream. What taskgate does not
// intercept is forwarded as the original bytes on a pooled connection
// and streamed back, SSE event by event; an answer that has already
// arrived whole goes back in one write. Hop-by-hop headers are removed both
// ways. Package upstream is the one client of the upstream: pass-through,
// rewritten answers (initialize, tools/list), task calls, messages to the
// upstream and PingUpstream all go through its Transport (Handler.up). It
// bounds reads per read (StreamIdleTimeout) and per answer
// (StreamMaxLifetime), uses direct system calls (package sysconn) unless
// Config.NetIO, and opens every connection with one dial function: TCP to
// the upstream's host, or Config.Dial, through which a stdio MCP server run
// by package proxy/stdio is reached in process.
//
// Intercepted: initialize and tools/list answers are rewritten in their own
// framing (package capability); tools/call is checked against the tool
// policy (package policy) and, with params.task, becomes a task; tasks/* are
// answered from the store (package taskstore) and never forwarded; a
// client's JSON-RPC response that answers a request relayed from a task's
// upstream call is routed to that task's runner; GET streams of sessions at
// 2025-11-25 are merged with the session's task messages.
//
// The method table (methods.go) lists every method taskgate knows, with its
// handler on each wire; the dispatch, the batch check and the metric labels
// read it. JSON is read and edited by package proxy/jsonx, SSE read and
// written by package proxy/sse.
//
// # Tasks
//
// The task engine (package proxy/engine) creates, runs, waits for, lists
// and cancels tasks and routes their messages; this package is the wire
// in front of it and the engine's upstream (taskUpstream in taskcall.go,
// whose job embeds the engine's). Creating a task is one store round trip;
// the CreateTaskResult goes back at once and a runner goroutine performs
// the upstream call on a connection of its own pool, so that tasks/cancel,
// the policy timeout, the task's ttl and shutdown can abort it by closing
// that connection. The runner holds a lease in the store and renews it;
// any replica fails tasks whose runner vanished. The upstream's final
// answer is stored raw; the wire status (completed, or failed for isError
// and JSON-RPC errors) is decided here (classify).
//
// While the call runs, the upstream's notifications and requests are
// stamped with related-task _meta and queued in the store; the task's open
// tasks/result stream, else a GET stream of any session of the task's
// owner, drains the queue (on any replica), so each message is delivered
// once. Tasks outlive their sessions and sessions are bound to their owner
// (sessions.go). tasks/result waits on
// the store's pub/sub wake-ups with the store as the source of truth, and
// keeps long waits alive with SSE comments.
//
// # The MCP 2026-07-28 wire
//
// The same endpoint also serves clients of MCP 2026-07-28, where tasks are
// the extension io.modelcontextprotocol/tasks on a stateless wire (no
// initialize, no sessions; each request names its protocol version and its
// client's capabilities in params._meta). The era is decided per request
// (modern.go); 2025-era requests never reach that code. The same stored
// task and raw outcome are rendered per era (package wire2026 renders the
// 2026 shapes). Files: modern.go (classifier, dispatch, tools/call),
// modern_tasks.go (task creation with its promote window, tasks/get,
// tasks/update, tasks/cancel, signed requestState), modern_runner.go (the
// questions of a running call, answers from any replica, the retries of a
// 2026 upstream), modern_upstream.go (the upstream's era, the bridge to a
// 2025 upstream with its credential-bound sessions and the private
// sessions of requests without credentials). The engine's upstream calls
// into them at one point each (taskUpstream.Call, relayRequest,
// relayNotification, deliverAnswers, notifyCancelled) for jobs with a
// modernJob.
//
// # Ownership
//
// Tasks belong to an owner derived from the request (a keyed hash of the
// Authorization header, else of the session id); a foreign task is
// indistinguishable from an unknown one. An MCP session is bound to the
// credential that opened it; a request carrying its id with another
// credential gets 404 before it reaches the upstream. Owners are rate
// limited per process.
//
// Handler is safe for concurrent use; Close stops it. No fasthttp
// RequestCtx is touched after its handler returns: fasthttp reuses its
// buffers at once, a RequestCtx belongs to one goroutine, and a gone client
// shows only as a failed write of a stream writer. Stream writers get copies of what they need.
//
// # Glossary of cited IDs
//
// Comments and test names cite requirements and decisions by short IDs;
// this list is where they are defined. "T-17..T-20" cites every ID of the
// range, and a test name ending in _E14 cites E-14. TestGlossary fails when
// a Go file of the module cites an ID missing here, and when an ID here is
// cited nowhere. The series:
//
//   - T-, H-, L-: requirements of MCP 2025-11-25 (tasks, the Streamable HTTP
//     transport, the lifecycle and JSON-RPC basics), in our words, with the
//     page of the specification that states them.
//   - P-: how taskgate maps those requirements onto a proxy (our choices).
//   - Q-: questions the 2025-11-25 text leaves open, with taskgate's answer.
//   - E-: edge cases of the 2025-11-25 wire and how taskgate handles them;
//     the tests that check one cite it.
//   - M-: edge cases of the MCP 2026-07-28 wire (the tasks extension), the
//     same way.
//     They are a series of their own so that an E- ID always means the 2025
//     wire; TestGlossary refuses an E- citation in a file of the 2026 wire
//     (modern*.go, wire2026).
//
// Pages of MCP 2025-11-25 cited below, under
// https://modelcontextprotocol.io/specification/2025-11-25/: the tasks page
// basic/utilities/tasks, the transport page basic/transports, the lifecycle
// page basic/lifecycle, basic/index, basic/utilities/progress,
// basic/utilities/cancellation and basic/authorization.
//
// # T: tasks (MCP 2025-11-25)
//
// https://modelcontextprotocol.io/specification/2025-11-25/basic/utilities/tasks,
// section named in each entry.
//
//   - T-01: a party that accepts task-augmented requests declares a "tasks"
//     capability at initialization (Capabilities).
//   - T-02: a server's task capabilities are tasks.list (it serves
//     tasks/list), tasks.cancel (it serves tasks/cancel) and
//     tasks.requests.tools.call (it accepts tools/call with params.task); a
//     client's are tasks.list, tasks.cancel,
//     tasks.requests.sampling.createMessage and
//     tasks.requests.elicitation.create (Capabilities).
//   - T-07: without the server's tasks.requests.tools.call a client never
//     sends a tool call as a task, whatever the tool says (Tool-Level
//     Negotiation, .../basic/utilities/tasks#tool-level-negotiation).
//   - T-08: a tool whose execution.taskSupport is absent or "forbidden" (the
//     default) must not be called as a task; a server should answer such a
//     call with -32601 (Tool-Level Negotiation).
//   - T-09: taskSupport "optional": the client may call with or without a
//     task (Tool-Level Negotiation).
//   - T-10: taskSupport "required": the client must call as a task, and the
//     server must answer a plain call with -32601 (Tool-Level Negotiation).
//   - T-11: a receiver that did not declare task support for a request type
//     handles such requests normally and ignores their params.task (Task
//     Support and Handling).
//   - T-14: a receiver that accepts a task-augmented request answers with a
//     CreateTaskResult ({"task": Task}), as soon as it has accepted it
//     (Result Retrieval).
//   - T-17, T-18, T-19: a task id is a string, made by the receiver, unique
//     among all tasks the receiver holds (Task ID Requirements).
//   - T-20: where tasks cannot be bound to an authorization context, ids
//     must come from a cryptographically secure source with enough entropy
//     not to be guessed; taskgate uses 128 random bits (Task Isolation and
//     Access Control).
//   - T-21: a new task starts as working (Task Status Lifecycle).
//   - T-22: the only moves are from working to input_required, completed,
//     failed or cancelled, and from input_required to working, completed,
//     failed or cancelled (Task Status Lifecycle).
//   - T-23: a terminal status (completed, failed, cancelled) never changes
//     again (Task Status Lifecycle).
//   - T-24: completed means a result exists; failed means the request did not
//     succeed, which includes a JSON-RPC error and, for tools/call, a
//     CallToolResult with isError true; cancelled means stopped by
//     tasks/cancel; input_required means the receiver waits for the
//     requestor (Data Types, Task Status; Task Execution Errors).
//   - T-25: a failed task should say why in statusMessage, which may appear
//     with any status (Data Types, Task; Task Execution Errors).
//   - T-26, T-27: every task in an answer carries createdAt and lastUpdatedAt
//     as ISO 8601 times (TTL and Resource Management).
//   - T-28: the receiver may override the ttl the requestor asked for (TTL
//     and Resource Management).
//   - T-29: tasks/get reports the ttl actually in force, in integer
//     milliseconds, or null for unlimited (TTL and Resource Management).
//   - T-30: once createdAt+ttl has passed, the receiver may delete the task
//     and its result whatever the task's status (TTL and Resource
//     Management).
//   - T-31: answering -32602 ("not found") for a task deleted after its ttl
//     is compliant: tasks need not be kept forever (TTL and Resource
//     Management).
//   - T-32: the receiver may suggest a pollInterval in milliseconds, which
//     requestors should honour (TTL and Resource Management).
//   - T-34: where it can, a receiver should not answer tasks/get with an SSE
//     stream: the client asked for a quick look (Input Required Status).
//   - T-36: tasks/result of a terminal task returns the outcome the original
//     request would have had, result or JSON-RPC error (Result Retrieval).
//   - T-37: tasks/result of a working or input_required task waits until the
//     task is terminal (Result Retrieval).
//   - T-38: a JSON-RPC error of the underlying request comes back from
//     tasks/result as that same error; a success as a response carrying that
//     result (Task Execution Errors).
//   - T-39: the tasks/result answer has the original request's result type,
//     CallToolResult for tools/call (Retrieving Task Results).
//   - T-40: the tasks/result answer carries
//     _meta["io.modelcontextprotocol/related-task"] = {"taskId": ...}, since
//     the result itself names no task (Related Task Metadata).
//   - T-41: a requestor may poll tasks/get while its tasks/result waits
//     (Retrieving Task Results).
//   - T-42: every request, notification and response that belongs to a task
//     carries the related-task _meta with the task's id (Associating
//     Task-Related Messages).
//   - T-44: answers of tasks/get, tasks/list and tasks/cancel should not
//     carry related-task _meta (Associating Task-Related Messages).
//   - T-45: notifications/tasks/status should not carry related-task _meta
//     (Task Notifications).
//   - T-46: a receiver may send notifications/tasks/status, carrying the
//     whole task, when a task's status changes (Task Status Notification).
//   - T-48: the progressToken of the task-augmented request stays valid for
//     the whole life of the task, also after CreateTaskResult, until the
//     task is terminal (Task Progress Notifications).
//   - T-49: a task's progress notifications use exactly that token (Task
//     Progress Notifications; basic/utilities/progress, Behavior
//     Requirements).
//   - T-50: no progress notification is sent once the task is terminal
//     (basic/utilities/progress, Behavior Requirements).
//   - T-51: the general progress rules still hold: the progress value
//     increases with each notification (basic/utilities/progress, Behavior
//     Requirements).
//   - T-52: tasks/list should be paginated with cursors (Task Listing).
//   - T-53: tasks/list includes nextCursor when more tasks exist (Task
//     Listing).
//   - T-54: requestors treat cursors as opaque (Task Listing).
//   - T-55: every task a requestor can read with tasks/get is also reachable
//     through its tasks/list (Task Listing).
//   - T-56: an invalid or unknown tasks/list cursor is -32602 (Protocol
//     Errors).
//   - T-57: tasks/cancel of a terminal task is -32602 (Task Cancellation,
//     Protocol Errors).
//   - T-58: tasks/cancel should stop the work and must set status cancelled
//     before it answers; the answer is the task, flat, status cancelled
//     (Task Cancellation).
//   - T-59: a cancelled task stays cancelled even if the work later ends
//     (Task Cancellation).
//   - T-61: a task-augmented request is cancelled with tasks/cancel, never
//     with notifications/cancelled (basic/utilities/cancellation, Behavior
//     Requirements).
//   - T-62: a receiver moves a task to input_required while it has requests
//     for the requestor that the task needs answered (Input Required Status).
//   - T-63: such requests to the requestor (elicitation/create,
//     sampling/createMessage) carry the related-task _meta (Input Required
//     Status).
//   - T-64: a requestor that sees input_required should call tasks/result at
//     once: that is where the questions are expected (Input Required Status).
//   - T-65: once the input it needed has arrived, the receiver leaves
//     input_required, normally for working (Input Required Status).
//   - T-66: the receiver may queue task messages and send them on another
//     stream; clients should accept them on any SSE stream, the GET stream
//     included (Input Required Status).
//   - T-67: an unknown or invalid taskId in tasks/get, tasks/result or
//     tasks/cancel is -32602 (Protocol Errors).
//   - T-68: an invalid tasks/list cursor is -32602 (Protocol Errors).
//   - T-70: internal errors are -32603 (Protocol Errors).
//   - T-74: where an authorization context exists, each task is bound to it
//     (Task Isolation and Access Control).
//   - T-75: with that binding, tasks/get, tasks/result and tasks/cancel
//     refuse another context's tasks, and tasks/list shows only the caller's
//     (Task Isolation and Access Control).
//   - T-76: without a binding, ids must be unguessable (T-20), and a receiver
//     that cannot tell requestors apart should not declare tasks.list (Task
//     Isolation and Access Control).
//   - T-77: task operations should be rate limited against denial of service
//     and id enumeration (Task Isolation and Access Control).
//   - T-78: concurrent tasks per requestor and the ttl should be capped
//     (Resource Management).
//
// # H: Streamable HTTP (MCP 2025-11-25)
//
// https://modelcontextprotocol.io/specification/2025-11-25/basic/transports,
// section named in each entry.
//
//   - H-02: the server validates Origin on every connection and answers an
//     invalid one with HTTP 403 (#streamable-http, Security Warning).
//   - H-04: a POST body is one JSON-RPC request, notification or response;
//     2025-11-25 has no batches (Sending Messages to the Server).
//   - H-05: an accepted notification or response gets HTTP 202 with an empty
//     body (Sending Messages to the Server).
//   - H-06: a request is answered as application/json or as
//     text/event-stream, and clients handle both (Sending Messages to the
//     Server).
//   - H-07: an SSE stream should start with an event that has an id and
//     empty data, so the client can resume it; before closing a connection
//     the server should send retry, and the client waits that long before
//     reconnecting (Sending Messages to the Server).
//   - H-08: an SSE answer may carry requests and notifications before the
//     response, and should end after the response (Sending Messages to the
//     Server).
//   - H-10: a GET opens a stream for server messages unrelated to running
//     requests, or gets 405; it never carries responses, except when resuming
//     a request's stream (Listening for Messages from the Server).
//   - H-11: with several streams open, each server message goes on exactly
//     one of them, never on two (Multiple Connections).
//   - H-12: SSE event ids are unique across the session's streams; a client
//     resumes with GET and Last-Event-ID, and only that stream's missed
//     messages are replayed (#resumability-and-redelivery).
//   - H-13: the server may give a session id (Mcp-Session-Id) with the
//     initialize answer; clients send it on every later request; a session
//     the server ended is HTTP 404, and the client then initializes again
//     (#session-management).
//   - H-14: after initialization every request carries MCP-Protocol-Version;
//     without it a server assumes 2025-03-26, and an unsupported value is
//     HTTP 400 (#protocol-version-header).
//   - H-17: a bearer token travels in the Authorization header of every
//     request; an invalid one is 401 with WWW-Authenticate, too little scope
//     403 (basic/authorization, Access Token Usage).
//
// # L: lifecycle and JSON-RPC (MCP 2025-11-25)
//
//   - L-05: tasks exist only in protocol revision 2025-11-25; a session
//     negotiated at an older version has no task vocabulary
//     (https://modelcontextprotocol.io/specification/2025-11-25/basic/lifecycle#version-negotiation).
//   - L-09: a request id is a string or an integer, never null, and is not
//     reused by the same sender within a session; a response echoes it
//     (https://modelcontextprotocol.io/specification/2025-11-25/basic/index#messages).
//
// # P: how taskgate maps the tasks feature onto a proxy (our choices)
//
//   - P-01: when the upstream's initialize answer already declares tasks,
//     taskgate passes everything through (no second implementation);
//     otherwise it adds tasks.requests.tools.call and tasks.cancel, and
//     tasks.list only where callers can be told apart (T-76).
//   - P-02: tools/list answers get execution.taskSupport from the tool
//     policy, every other field and nextCursor kept; without it clients
//     would never use tasks (T-08).
//   - P-03: tasks/* requests are answered by taskgate and never forwarded; a
//     task-augmented tools/call goes upstream without params.task but with
//     its _meta (progressToken included), and CreateTaskResult comes back at
//     once as application/json.
//   - P-04: a background runner reads the upstream's JSON or SSE answer
//     (resuming with GET and Last-Event-ID when the upstream drops the
//     connection) and stores the final answer as sent; completed or failed
//     is decided from it.
//   - P-06: tasks/cancel sets cancelled and answers, then sends the upstream
//     notifications/cancelled for its request id; a late upstream answer is
//     dropped.
//   - P-07: taskgate's own upstream requests share the client's upstream
//     session, so their ids come from a namespace the client cannot hit: a
//     "taskgate-" prefix and 128 random bits (L-09).
//
// # Q: questions the 2025-11-25 text leaves open, and taskgate's answers
//
//   - tasks/result of a cancelled task has no outcome to return:
//     taskgate answers -32603, promptly, also to a tasks/result that was
//     waiting when the cancel came.
//   - a JSON-RPC error has no _meta, and T-38 wants it unchanged: the
//     upstream's code, message and data are replayed verbatim, with no
//     related-task _meta added.
//   - an isError tool result makes the task failed, as 2025-11-25 says
//     (T-24), while tasks/result still answers the CallToolResult as a
//     success.
//   - the ttl counts from creation whatever the status; the requested
//     value is clamped to the policy's [min, max], the default applies when
//     none is asked, and the effective value is reported.
//   - a ttl that is no JSON number (a string, a bool) gets the default;
//     a fractional one is rounded; nothing is refused.
//   - tasks belong to an owner (the credential, else the session), not
//     to a session; in-flight tasks fail when their upstream session ends,
//     and terminal results stay readable by the owner.
//   - when the upstream negotiates a version older than 2025-11-25,
//     tasks are not offered (L-05), unless the operator asks taskgate to
//     bridge the version.
//   - a task's messages go to its open tasks/result stream, else to a
//     GET stream of the owner, else wait in a bounded queue.
//   - tasks/list returns the owner's tasks in creation order, a
//     configurable page size (default 50) per page, all statuses, with
//     cursors sealed by an HMAC; a bad cursor is -32602.
//   - tasks/list where tasks.list is not offered (an anonymous caller)
//     is -32601.
//   - tasks/result may be called any number of times, concurrently
//     too; each gets the outcome, and a queued question is delivered on one
//     stream only (H-11).
//   - lastUpdatedAt moves on any change of the task (status or
//     statusMessage), never backwards.
//   - over a limit (the tool's concurrency, the owner's unfinished
//     tasks) the call gets a synchronous -32603 naming the limit, and no task
//     is created.
//
// # E: edge cases of the 2025-11-25 wire
//
//   - E-01: with a legacy upstream the client sees the added tasks
//     capabilities, and the upstream never receives tasks/* or params.task.
//   - E-02: an upstream that declares tasks itself is passed through
//     unchanged (P-01).
//   - E-03: an upstream at an older protocol version gets no tasks.
//   - E-04: tools/list gets execution.taskSupport where it is missing; other
//     fields, outputSchema, _meta and nextCursor are untouched, on every page.
//   - E-05: after notifications/tools/list_changed the list fetched again is
//     rewritten again.
//   - E-06: a caller that cannot be identified is not offered tasks.list, and
//     its tasks/list is -32601.
//   - E-07: a task call on an optional tool gets CreateTaskResult (working,
//     createdAt equal to lastUpdatedAt, ttl, pollInterval) while the upstream
//     still works.
//   - E-08: a task call on a forbidden tool is -32601 and the upstream is not
//     contacted.
//   - E-09: a plain call on a required tool is -32601 and the upstream is not
//     contacted.
//   - E-10: a plain call on an optional tool passes through, no task.
//   - E-11: params.task on another method than tools/call gets the normal
//     answer, no task (T-11).
//   - E-12: params.task {} gets the default ttl, which is reported.
//   - E-13: ttl 0, negative, fractional, a string or huge is clamped or
//     defaulted; the reported ttl is the effective one.
//   - E-14: many concurrent task creations all get distinct, unguessable ids.
//   - E-16: tasks/get of an unknown id is -32602; a known one is flat JSON
//     without related-task _meta.
//   - E-17: when tasks/get's _meta names another task, params.taskId wins.
//   - E-18: tasks/result of a working task waits, then returns the upstream's
//     result unchanged plus related-task _meta, under the tasks/result id.
//   - E-19: tasks/result twice after completion, and twice concurrently while
//     working, gets the same outcome each time.
//   - E-20: an isError upstream result makes the task failed with a
//     statusMessage, and tasks/result answers the CallToolResult.
//   - E-21: an upstream JSON-RPC error makes the task failed, and
//     tasks/result returns the same code, message and data.
//   - E-22: an upstream transport failure (5xx, reset, timeout) makes the
//     task failed, and tasks/result is -32603.
//   - E-23: an upstream SSE answer dropped after a primed event is resumed
//     with GET and Last-Event-ID, and the task still completes (P-04).
//   - E-24: an upstream answering application/json instead of SSE is handled
//     the same.
//   - E-25: a long tasks/result wait is kept alive over SSE, and a client
//     whose stream was cut resumes it with GET and Last-Event-ID and gets the
//     result exactly once.
//   - E-26: tasks/cancel of a working task answers the flat task, cancelled;
//     the upstream gets notifications/cancelled; a late upstream result is
//     ignored; tasks/get stays cancelled (P-06).
//   - E-27: tasks/cancel of a completed, failed or cancelled task is -32602,
//     status unchanged (T-57).
//   - E-28: tasks/cancel of an unknown id is -32602.
//   - E-29: tasks/cancel while a tasks/result waits makes that tasks/result
//     return promptly.
//   - E-30: a cancel during input_required drops the queued questions; a late
//     answer from the client is accepted (202) and harmless.
//   - E-31: a task whose ttl passes while it works is deleted and its
//     upstream call cancelled; tasks/get is then -32602.
//   - E-32: after the ttl of a finished task, get, result and cancel are
//     -32602, and tasks/list no longer shows it.
//   - E-33: notifications/cancelled for the original request id after
//     creation leaves the task alone: tasks are cancelled with tasks/cancel
//     only (T-61).
//   - E-34: an upstream elicitation/create during a task makes it
//     input_required (lastUpdatedAt moves); the relayed request carries
//     related-task _meta and goes on the open tasks/result stream, else a GET
//     stream, else waits in the queue; never on two streams.
//   - E-35: the client's POSTed answer gets 202, goes upstream with the
//     session and protocol-version headers, and the task is working again.
//   - E-36: the same for sampling/createMessage and roots/list; an upstream
//     ping is answered without entering input_required.
//   - E-37: questions and notifications queued before a stream opens are
//     delivered in order, each once.
//   - E-38: progress with the client's progressToken goes on after
//     CreateTaskResult with the same token, increasing values and
//     related-task _meta, and stops at the end (T-48..T-50).
//   - E-39: the upstream's log notifications during a task are relayed with
//     related-task _meta.
//   - E-40: notifications/tasks/status carries the whole task and no
//     related-task _meta; a client that ignores them still gets the outcome
//     by polling.
//   - E-41: a task of owner A is, for owner B, not found (-32602, the same
//     text as for an unknown id) and not listed (T-75).
//   - E-42: floods of task operations and failed lookups are rate limited
//     (T-77).
//   - E-43: a foreign Origin is 403 on the methods taskgate answers itself
//     too, not only on forwarded ones (H-02).
//   - E-44: when the upstream session ends (DELETE, or a 404 upstream) its
//     running tasks fail.
//   - E-45: taskgate's upstream request ids never collide with the client's
//     in the same session (P-07).
//   - E-46: over the owner's task limit creation fails synchronously and no
//     task is left behind.
//
// # M: edge cases of the MCP 2026-07-28 wire (tasks extension)
//
// The extension io.modelcontextprotocol/tasks is specified in
// https://github.com/modelcontextprotocol/ext-tasks/blob/main/specification/draft/tasks.md
// (overview: https://modelcontextprotocol.io/extensions/tasks/overview); the
// stateless core it runs on in
// https://modelcontextprotocol.io/specification/2026-07-28/basic/transports/streamable-http,
// https://modelcontextprotocol.io/specification/2026-07-28/server/discover and
// https://modelcontextprotocol.io/specification/2026-07-28/basic/patterns/mrtr.
//
//   - M-02: a request whose _meta protocol version differs from its
//     MCP-Protocol-Version header is 400/-32020; an unsupported version is
//     400/-32022 listing both supported versions; a request without
//     clientCapabilities is 400/-32602.
//   - M-04: without the extension an optional tool runs as a plain call
//     however long it takes, and a required tool is 400/-32021 with
//     data.requiredCapabilities; the upstream is not called.
//   - M-05: a legacy params.task on a 2026 request is ignored: no error, no
//     task for a forbidden tool, and not sent upstream.
//   - M-06: tasks/get through another replica right after CreateTaskResult
//     finds the task.
//   - M-07: tasks/get, tasks/update or tasks/cancel from a client that did
//     not declare the extension is -32021, even for an unknown id (the
//     capability check comes before the lookup); a declaring client's
//     unknown id is -32602.
//   - M-08: an Mcp-Name header that differs from params.taskId is
//     400/-32020, before any lookup.
//   - M-09: tasks/result and tasks/list do not exist on this wire: HTTP 404,
//     -32601.
//   - M-10: an isError upstream result makes the task completed, with the
//     result inline (2026 keeps failed for JSON-RPC errors).
//   - M-11: an upstream JSON-RPC error makes the task failed with that error
//     verbatim and no result; a transport failure fails it with a
//     taskgate -32603.
//   - M-12: a 2025 upstream's -32042 (URL elicitation required) never
//     reaches a 2026 client: a plain call declaring elicitation gets an
//     InputRequiredResult with each URL as a URL-mode elicitation/create
//     (mode, message, url; no elicitationId) and its retry is a new
//     upstream call; without elicitation it is 400/-32021 naming it; a task
//     whose call failed with it reads as failed with -32603, message and
//     data kept.
//   - M-13: an upstream elicitation/create makes the task input_required
//     with one stable key in inputRequests; tasks/update with the answer
//     sends it upstream under the upstream's request id, and the task is
//     working again.
//   - M-14: two concurrent questions get two keys; answering one removes its
//     key at once, and the task completes after the second answer.
//   - M-15: tasks/update with no answers, an unknown or answered key, or on a
//     terminal task is acknowledged and sends nothing upstream.
//   - M-16: a later question gets a new key: keys are never reused within a
//     task.
//   - M-18: tasks/cancel of a working task is acknowledged with an empty
//     result, the task becomes cancelled, the upstream gets
//     notifications/cancelled, and its late result is dropped.
//   - M-19: tasks/cancel of a terminal task is acknowledged and changes
//     nothing (the extension leaves this case open and its conformance suite
//     expects the ack; the 2025 wire answers -32602 for the same task).
//   - M-22: a task created on one wire is read on the other by the same
//     owner, each in its own rendering: an isError result is failed on 2025
//     and completed on 2026, and 2025 tasks/list includes 2026-created tasks.
//   - M-23: another owner's task is not found (-32602).
//   - M-27: an upstream that asks before the task exists gives an
//     InputRequiredResult with a signed requestState and no taskId; the retry
//     with inputResponses and that requestState resumes the held call and
//     gets the task; a tampered, expired or foreign state is refused.
//   - M-29: the errors -32020, -32021 and -32022 always carry the data their
//     schema requires.
//   - M-30: in front of a 2025 upstream, the methods 2026-07-28 removed
//     (initialize, ping, logging/setLevel, resources/subscribe and
//     unsubscribe) and methods neither revision defines are HTTP 404 with
//     -32601 on the 2026 wire, and the upstream's -32601 is HTTP 404 too.
//   - M-31: a plain call (no task) whose 2025 upstream asks for input of a
//     type the request did not declare (elicitation, sampling, roots) is
//     400/-32021 with data.requiredCapabilities naming that capability, and
//     the upstream is told to stop the call.
//   - M-26: subscriptions/listen whose filter names taskIds, from a request
//     that did not declare the extension, is 400/-32021.
//   - M-32: a request that sets _meta logLevel gets the log messages of its
//     upstream call at that level and above on its own response stream,
//     before the response; one without logLevel gets none. In front of a
//     2025 upstream taskgate sets its session to the lowest level and
//     filters per request.
//   - M-33: in front of a 2025 upstream taskgate serves subscriptions/listen:
//     the first message acknowledges the list changes the upstream offers
//     (listChanged) among those asked for, every notification on the
//     stream carries the listen request's id as its subscriptionId, and
//     only the kinds asked for are sent.
//   - M-24: every answer of this wire passes the revision's schemas as the
//     official requester library (ext-tasks) decodes them: resultType
//     "complete" on tasks/get, on the acks and on plain results, "task" only
//     on CreateTaskResult, and a completed task's inline result is a
//     CallToolResult with resultType "complete" (a 2025 upstream's stored
//     result gets it when rendered).
//   - M-34: a plain call whose request carries a progressToken gets the
//     upstream's progress for that token on its own answer (and the log
//     messages of M-32), as an SSE stream, each as it comes and before the
//     result; closing that stream cancels the call at the upstream.
//   - M-35: a request without credentials never meets upstream state that
//     another request created: in front of a 2025 upstream each gets an
//     upstream session of its own, closed when it ends (anonymous.md says
//     why per request); tasks it creates are read through their ids only.
package proxy
