// Package taskstore keeps MCP tasks (2025-11-25) and their outcomes.
//
// Store is the interface the proxy uses, the union of its role
// interfaces: Tasks (create, read, change, list), Leases (renew, recover),
// Events (Watch, WatchKinds, WatchSession), Mailboxes (queued messages,
// pending requests, answers), Inputs (a task's open input requests, read
// and answered from any replica), SessionVersions and SessionRecords. Two
// implementations keep
// the same contract, checked by one store suite that runs on both (and on
// miniredis, a real redis-server and a Redis Cluster):
//
//   - Redis (NewRedis) over a go-redis UniversalClient (standalone,
//     Sentinel or Cluster; see Open), for replicas that share tasks.
//   - Embedded (NewEmbedded), native Go in this process's memory: the
//     default when taskgate runs without a Redis. See its doc comment for
//     its layout (owner shards, creation-order index, lease and expiry
//     heaps, channel wake-ups); every operation costs the same whether 0
//     or 10,000 tasks are stored.
//
// The store never parses messages: callers say what a message is
// (MessageKind) when they queue it, and Drain hands the kind back with it
// so Requeue keeps it. Every operation whose context has no deadline is
// bounded by Config.OpTimeout (default DefaultOpTimeout), so callers need
// not wrap each call.
//
// # Shared rules
//
// A task expires at CreatedAt+TTL whatever its status; from then on every
// operation treats it as gone, by the store's clock (Config.Now), to the
// millisecond (MCP 2025-11-25 tasks: a receiver may delete a task after its
// ttl). Status changes refuse to leave a terminal status (completed,
// failed, cancelled: a terminal task never changes again, so a late outcome
// after a cancel is dropped). List returns an owner's tasks in creation
// order, with cursors sealed by an HMAC over owner and position, so a
// tampered or foreign cursor is ErrBadCursor; a task created while a client
// pages sorts after every page already read (creation order is a per-owner
// score max(now, last+1), strictly increasing, rather than the creation ms
// with ties by id: with ties, a task created in the cursor's millisecond
// with a smaller id would be skipped). A running task has a lease its
// runner renews; Recover fails the tasks whose lease expired (any replica,
// each task once).
//
// # Redis layout
//
// Keys come only from keys.go and carry the owner as a Cluster hash tag, so
// each per-task operation is one Lua script on one slot (redis_scripts.go: each
// script's comment is its contract). The task hash expires at
// CreatedAt+TTL; the owner's index zset (for List) and live zset (for
// MaxPerOwner) expire a minute after the latest task they hold (rounded up
// to keepStep, so the creates of one step set no expiry), and scripts prune
// their stale members. Every key has a TTL. "Now" always comes from
// Config.Now, passed to scripts as an argument.
//
// Create, Get, Update, Finish, Cancel, Outcome and Renew are one network
// round trip each, and concurrent operations share round trips: a batcher
// pipelines the commands waiting at the same moment (redis_batch.go).
//
// Cost: a whole task as a client drives it on a 2025 session (create,
// completed, tasks/result on the runner's replica) costs Redis 12
// commands, counted by the server inside scripts too (15 with an owner
// cap), and TestCommandCounts keeps every operation within its budget.
// The scripts define no helpers they do not call (the hot ones none), so a
// call runs only its own steps. What makes it few: no lease entry per task
// (runners have heartbeats, redis_runners.go); the owner's live zset only with a
// MaxPerOwner cap; a task's queue, inbox, listening mark and input
// requests cleaned up at its end only when it had them (the task hash's
// aux mark); long-lived keys (indexes, the runner zset) extended once per
// keepStep per replica (keepCache) rather than checked by every script;
// the owner index's ZADD NX as the id's existence check; and, with
// Config.SessionTaskDelay, task calls recorded on their upstream session
// only when they outlive the delay.
//
// Leases: a task's lease deadline is kept in its hash (the authority;
// Create sets it, Renew moves it). What finds expired ones is kept per
// runner: the runner zset P:runners holds each runner's heartbeat
// deadline, renewed by the store that created the runner's tasks. Recover
// looks for runners whose heartbeat expired, walks the admin index for
// their non-terminal tasks, and fails a task only if the hash's lease is
// still expired inside the script, so a concurrent Renew wins and
// concurrent Recovers fail each task once. A task whose runner still
// beats is that runner's to finish.
//
// Admin index (admin.go, redis_admin.go): every task is in the global zset
// P:tasks (member "<owner>/<id>", score its creation ms) and has an
// owner-by-id key P:id:<id> expiring with it, so operators list tasks
// across owners newest first and find a task's owner from its id without
// scanning the keyspace. Create pipelines both beside its script as plain
// commands (inside it only for a capped create on a single node, so a
// refused create writes neither). Members of expired tasks are removed by
// AdminList when met and by Recover (the oldest ones). AdminStats reads no
// task: it sums counters each store writes every 250 ms
// (redis_stats.go).
//
// Wake-ups: scripts that change a task PUBLISH on the task's channel; Watch
// shares one pub/sub connection per Redis value. A session channel is
// published to only while the owner's listener registry (P:{owner}:sl) says
// a replica listens on it: WatchSession registers there after subscribing,
// and renews the entry every 30 s while it listens. The store is the source
// of truth: subscribe first, then re-read.
//
// Task streams (redis_stream.go): messages the upstream sends while a task runs
// wait in the task's queue list until one stream drains them (Drain takes
// the whole list in one script, so a message reaches one stream only). A
// tasks/result stream marks itself with SetListening; without the mark,
// Enqueue also records the task in the session's queued set and announces
// it on the session channel, which WatchSession turns into SessionEvents.
// Status changes announce there too. The queue is bounded by dropping
// progress, then other notifications, never requests. Answers to
// server-to-client requests go through a pending entry per (session,
// request id) to the task's inbox. Terminal status changes delete queue,
// inbox and mark in the same script (nothing is delivered after the end;
// Finish keeps the notifications queued before it). The session is read
// from the task hash inside the scripts, which build the session keys from
// owner-slot prefixes passed as arguments (like listCmd's task keys).
//
// The IDs cited in this package (T-23, Q-19, ...) are defined in the
// glossary of package proxy's documentation (proxy/doc.go).
package taskstore
