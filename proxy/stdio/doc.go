// Package stdio runs MCP servers that speak stdio (newline-delimited
// JSON-RPC on stdin and stdout: `npx @modelcontextprotocol/server-…`, `uvx
// …`, Go binaries) and serves them to taskgate's proxy as one MCP
// Streamable HTTP endpoint.
//
// # Design
//
// A Server listens on an in-process listener (fasthttputil.InmemoryListener);
// the proxy reaches it through proxy.Config.Dial, which every upstream
// connection of the proxy uses (pass-through relay, rewritten initialize and
// tools/list answers, task calls, messages to the upstream, the readiness
// check). So everything the proxy does for an HTTP upstream — tasks and
// their leases, policy, protocol-version bridging, SSE and GET streams,
// related-task routing of questions and answers — works for a stdio server
// unchanged, with no second code path in the proxy. The price is one HTTP
// exchange over an in-memory pipe per message (about 5 µs and no
// allocation, BenchmarkInmemoryHop), small beside the pipe hop to the child
// and the child's own work (BenchmarkCall; the README compares whole calls
// with the same server over HTTP). The alternative — an upstream interface implemented
// directly by this package — needs the proxy's upstream client behind one
// interface first; when it is, a stdio implementation can replace the
// in-process hop without changing this package's process model.
//
// # Process model
//
// A stdio server serves one client, so each client session gets its own
// child process: it starts at initialize (that request has no
// Mcp-Session-Id; the answer carries a fresh random one) and ends with the
// session: a DELETE (after the session's last call in flight, so a running
// task finishes), IdleTimeout without a call in flight, an open GET stream
// or traffic, a crash, or Close. At most MaxChildren run at once; an
// initialize over the limit gets HTTP 503 with a JSON-RPC error. A child
// that does not answer initialize within InitTimeout is killed. Children
// run in their own process group with the environment taskgate was given
// plus Config.Env; stopping one closes its stdin, waits StopGrace, sends
// SIGTERM to the group, waits StopGrace, then sends SIGKILL. On Linux a
// child also gets SIGKILL when taskgate dies without stopping it.
//
// When a child exits on its own, every call in flight gets a JSON-RPC error
// naming the exit status (a task's runner stores it as the task's failure),
// the session ends (its id then gets HTTP 404, so the client initializes
// again and gets a new child), and the exit is logged. The child's stderr
// is logged line by line (cut at 4 KiB, rate-limited), marked with the
// session's log label, never its id.
//
// # Messages
//
// Client messages are written as one line each (newlines of pretty-printed
// JSON, which can only be whitespace, become spaces). The child's lines are
// parsed (a line over MaxLineSize, invalid JSON or a non-JSON-RPC line is
// dropped and logged without its content; an over-long answer fails its
// call when its id is among its first bytes) and routed as described on
// session: responses by id to their request's answer, which is JSON when
// the response comes alone and SSE when anything precedes it; progress by
// token; the child's requests and log messages to the one request in
// flight, else to the GET stream; other notifications to the GET stream.
// notifications/cancelled from the client is written to the child and ends
// the named request's answer. Batches of notifications and responses are
// written element by element; batched requests are refused.
//
// Ids are not rewritten: one child belongs to one session, so the client's
// ids cannot collide with another client's. A request whose id is already
// in flight in the session is refused. Config.Shared is the exception: one
// child for all sessions, with ids and progress tokens rewritten (see
// shared.go for what keeps answers apart).
package stdio
