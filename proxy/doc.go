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
// Intercepted: what an era of the wire serves itself (see below):
// initialize and tools/list answers rewritten in their own framing
// (package capability), tools/call checked against the tool policy
// (package policy) and, as a task, run in the background; tasks/*
// answered from the store (package taskstore) and never forwarded; a
// client's answer to a question of a task's upstream call routed to that
// task's runner; GET streams of sessions at 2025-11-25 merged with the
// session's task messages.
//
// # Package map
//
//   - proxy (this package): the front. ServeFastHTTP checks what the front
//     owns (method, ambiguous identity headers, Origin, path, the session's
//     binding to its credential), parses a POST's envelope and asks the
//     eras in order; pass-through (passthrough.go, rewrite.go), identity
//     (owner.go, sessions.go), protocol-version bridging (versions.go),
//     request logs and metrics, tracing, and the composition (eras.go).
//   - proxy/wire: the seam. The envelope, the method table, the JSON-RPC
//     writer, the Era and Call interfaces, wire.Front (what the front
//     gives the eras) and the Runner the engine calls.
//   - proxy/wire/v20251125, proxy/wire/v20260728: the eras, one package
//     per protocol revision; each owns its column of the method table, its
//     parsing and rendering and its side of a background call.
//   - proxy/engine: the task engine, wire-neutral.
//   - proxy/upstream, proxy/sse, proxy/sysconn, proxy/tracing,
//     proxy/stdio, proxy/admin: the upstream client, SSE, direct socket
//     calls, spans, a stdio upstream in process, the admin API.
//
// # Tasks
//
// The task engine (package proxy/engine) creates, runs, waits for, lists
// and cancels tasks and routes their messages; the eras are the wire in
// front of it, and the engine's upstream is wire.Runner, which leaves what
// varies by era to the job's wire.Call. Creating a task is one store
// round trip; the CreateTaskResult goes back at once and a runner
// goroutine performs the upstream call on a connection of its own pool,
// so that tasks/cancel, the policy timeout, the task's ttl and shutdown
// can abort it by closing that connection. The runner holds a lease in the
// store and renews it; any replica fails tasks whose runner vanished. The
// upstream's final answer is stored raw; each era renders it its own way
// (wire.Classify decides the 2025-11-25 status).
//
// # Eras
//
// The same endpoint serves MCP 2025-11-25 (package v20251125: tasks in
// the core protocol, per session) and MCP 2026-07-28 (package v20260728:
// tasks as the extension io.modelcontextprotocol/tasks on a stateless
// wire). The era is decided per request: the 2026 era recognises its
// requests by their params._meta and MCP-Protocol-Version header and
// comes first; everything else is the 2025 era's or passes through. The
// same stored task is read, cancelled and listed on either wire by the
// same owner. Package wire says what a third era must implement.
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
