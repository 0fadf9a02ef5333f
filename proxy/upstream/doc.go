// Package upstream is taskgate's one client of its upstream MCP server: the
// only code that dials it. Every exchange with the upstream goes through a
// Client:
//
//   - pass-through (Relay): a request taskgate does not intercept is sent
//     as it came on a pooled connection and its answer relayed to the
//     client, streamed piece by piece, or in one write when it has already
//     arrived whole;
//   - rewritten answers (Do): initialize, tools/list and server/discover,
//     whose answers taskgate edits, go through a fasthttp.HostClient;
//   - background calls (RoundTrip): task calls, their resumed streams, GET
//     streams and the requests of bridged sessions, each on a connection of
//     a pool of its own that is closed to abort the call;
//   - messages to the upstream (Post, Delete, DeleteSession): answers and
//     notifications taskgate relays or sends itself, and the end of
//     sessions;
//   - health checks (Ping).
//
// The Client owns the connection pools, the TLS configuration of an https
// upstream, the idle and lifetime limits on reads, the sockets' direct
// system calls (package sysconn), the removal of hop-by-hop headers, and
// the mapping of transport errors to an HTTP status and a message for the
// client (StatusFor, FailureMessage). Callers depend on the Transport
// interface, which a test can wrap to inject faults and which an upstream
// reached some other way could implement.
//
// # Connections
//
// Every connection is opened by one dial function: a TCP dial of the URL's
// host, or Options.Dial (an in-process upstream such as a stdio server run
// by package proxy/stdio). Reads are bounded per read (StreamIdleTimeout)
// and per answer (StreamMaxLifetime) by a connection wrapper, never by
// fasthttp's whole-body timeouts, which would cut long SSE streams. A
// request is never replayed once it may have reached the upstream: a
// tools/call must not run twice. Pooled connections are reused only while
// younger than IdleConn, which is kept below the upstream's own idle limit:
// a request written on a connection the upstream is closing fails although
// the upstream never saw it.
//
// # Write holding
//
// On a sysconn connection the write of a pass-through request is held
// (sysconn.Conn.WriteLater) and sent by the read of its answer, which
// follows at once: one system call less per request.
//
// All methods of a Client are safe for concurrent use. A Relayed stream and
// a Call belong to one goroutine at a time.
package upstream
