// Package capability rewrites the two upstream responses through which a
// legacy MCP server tells clients what it can do, so that clients see the
// tasks feature of MCP 2025-11-25 that taskgate adds in front of it.
//
// [RewriteInitialize] adds the server "tasks" capability to an initialize
// result (spec P-01, T-01, T-02) and, when asked to, bridges an older
// negotiated protocol version to [ProtocolVersion] (Q-12, L-05).
// [RewriteToolsList] sets execution.taskSupport on every tool of a tools/list
// result (P-02, T-08..T-10).
//
// Both functions are pure: they do no I/O, keep no state and are safe for
// concurrent use. They work on the raw bytes of one JSON-RPC response and
// edit them in place of a full decode: member order, whitespace and the bytes
// of every value they do not change are kept as the upstream sent them, and
// large values such as tool schemas are never decoded. Keys are matched
// exactly (case-sensitive, after unescaping), and a duplicate key in any
// object the rewrite inspects is refused with [ErrMalformed], because peers
// disagree on which duplicate wins and a hidden second "tasks" or "name"
// would let the upstream and the client see different documents.
//
// On [ErrMalformed] the caller forwards the original bytes unchanged; for
// tools/list that leaves every tool at the default taskSupport "forbidden",
// so clients do not use tasks (fail closed).
//
// The IDs cited in this package (T-08, P-01, ...) are defined in the
// glossary of package proxy's documentation (proxy/doc.go).
package capability
