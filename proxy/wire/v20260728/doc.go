// Package v20260728 serves the wire of MCP 2026-07-28, where tasks are the
// extension io.modelcontextprotocol/tasks on a stateless wire: no
// initialize and no sessions; each request names its protocol version and
// its client's capabilities in params._meta, and opts into tasks by
// declaring the extension there. It serves this wire on the same endpoint
// and from the same task store as package v20251125, in front of
// upstreams of either revision: the two client eras times the two upstream
// eras live here.
//
// Files: wire.go (the classifier of 2026-era requests, tools/call),
// era.go (the era's column of the method table, wire.Era and wire.Call),
// tasks.go (task creation with its promote window, tasks/get,
// tasks/update, tasks/cancel, the signed requestState), call.go (the
// questions of a running call, answers from any replica, the retries of a
// 2026 upstream), upstream.go (the upstream's era, the bridge to a 2025
// upstream with its sessions bound to a credential and the request's
// declared capabilities, and the private sessions of requests without
// credentials), cancel.go (notifications/cancelled of a running bridged
// call), listen.go (subscriptions/listen), urlelicit.go (URL
// elicitation). Package schema renders the revision's shapes; it is pure.
package v20260728
