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
// read it. JSON is read and edited by package capability/jsonx, SSE read and
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
// 2025 upstream with its sessions bound to a credential and the request's
// declared capabilities, and the private sessions of requests without
// credentials), modern_cancel.go (notifications/cancelled of a running
// bridged call). The engine's upstream calls
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
// Comments and test names cite requirements and decisions by short IDs
// (T-17, E-14, M-02); GLOSSARY.md beside this file defines each of them.
package proxy
