// Package taskstore keeps MCP tasks (2025-11-25) and their outcomes.
//
// Store is the interface the proxy uses; Redis implements it over a
// go-redis UniversalClient (standalone, Sentinel or Cluster; see Open), and
// NewEmbedded runs the same code against an in-process miniredis when no
// Redis is configured (DESIGN decision 1).
//
// # Design
//
// Keys come only from keys.go and carry the owner as a Cluster hash tag, so
// each per-task operation is one Lua script on one slot (scripts.go: each
// script's comment is its contract). A task is a hash that expires at
// CreatedAt+TTL whatever its status (T-30); the owner's index zset (for
// List) and live zset (for MaxPerOwner) expire a minute after the latest
// task they hold, and scripts prune their stale members. Every key has a
// TTL. "Now" always comes from Config.Now, passed to scripts as an
// argument; a task whose CreatedAt+TTL has passed by that clock is treated
// as gone even if the backend has not yet expired the key.
//
// Create, Get, Update, Finish, Cancel, Outcome and Renew are one network
// round trip each. Status changes happen only in scripts, which refuse to
// leave a terminal status (T-23, T-59).
//
// A running task has a lease: its deadline is kept in the task hash (the
// authority) and mirrored in one global zset P:leases so Recover can find
// expired ones. P:leases lives in its own slot, so it is written in the same
// pipeline as the owner-slot script (go-redis splits pipelines per node on
// Cluster). Recover fails a task only if the hash's lease is still expired
// inside the script, so a concurrent Renew wins and concurrent Recovers fail
// each task once.
//
// Wake-ups: every script that changes a task PUBLISHes on the task's
// channel; Watch shares one pub/sub connection per Redis value. The store
// is the source of truth: subscribe first, then re-read.
//
// Task streams (stream.go): messages the upstream sends while a task runs
// wait in the task's queue list until one stream drains them (Drain takes
// the whole list in one script, so a message reaches one stream only). A
// tasks/result stream marks itself with SetListening; without the mark,
// Enqueue also records the task in the session's queued set and publishes
// "q:<id>" on the session channel, which WatchSession (same shared pub/sub)
// turns into SessionEvents. Status changes publish "s:<id>" there too. The
// queue is bounded by dropping progress, then other notifications, never
// requests. Answers to server-to-client requests go through a pending entry
// per (session, request id) to the task's inbox. Terminal status changes
// delete queue, inbox and mark in the same script (T-50). The session is
// read from the task hash inside the scripts, which build the session keys
// from owner-slot prefixes passed as arguments (like listCmd's task keys).
//
// Deviation from the design sketch: the index score is the creation time in
// ms bumped to be strictly increasing per owner (max(now, last+1)), instead
// of the plain creation ms with ties by id. With plain ms a task created
// during paging in the same millisecond as the cursor, with a smaller id,
// would be skipped, breaking T-55 (everything Get can see is listed).
package taskstore
