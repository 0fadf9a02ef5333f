package taskstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// keys builds every Redis key and channel name the store uses. Nothing else
// in the package spells a key, so the layout below is the whole truth and
// every key of one owner carries the same {owner} hash tag (one Cluster slot,
// so one script may touch them all).
//
// Layout (P = Config.Prefix, default "taskgate"):
//
//	P:{owner}:task:<id>   hash   one task; expires at CreatedAt+TTL
//	P:{owner}:index       zset   member id, score = creation order (ms, strictly increasing);
//	                             a withdrawn id (a failed Create): score = -(refused until, ms)
//	P:{owner}:live        zset   member id, score = task expiry ms; non-terminal tasks created
//	                             with a MaxPerOwner cap only (the hash's cap field says so)
//	P:{owner}:ev:<id>     channel  wake-ups for Watch (not a key)
//	P:{owner}:q:<id>      list   outbound queue, FIFO; element = kind byte + message; expires with the task
//	P:{owner}:in:<id>     list   inbox of client answers, FIFO; expires with the task
//	P:{owner}:lis:<id>    string "1" while a tasks/result stream listens; PX min(mark ttl, task expiry)
//	P:{owner}:res:<id>    string a large outcome (redis_spill.go); the task hash's outcome field then
//	                             holds spilledRaw; expires with the task
//	P:{owner}:ir:<id>     hash   open input requests of the task: key -> request JSON; expires
//	                             with the task, deleted when it ends
//	P:{owner}:sq:<sess>   set    the session's task ids with queued messages; expires a minute
//	                             after the latest such task (stale members pruned by QueuedTasks)
//	P:{owner}:pend:<sess>:<sha256 hex of reqID>
//	                      string task id of a pending server-to-client request; expires with the task
//	P:{owner}:sess:<sess> channel  SessionEvents, payload "q:<id>" or "s:<id>" (not a key)
//	P:{owner}:sl          hash   session -> unix ms until which a replica listens on its
//	                             channel (scripts publish there only then); expires with
//	                             the latest registration
//	P:runners             zset   member runner id, score = its heartbeat deadline (redis_runners.go)
//	P:leases              zset   member "<owner>/<id>", score = a lease deadline: the per-task
//	                             lease entries of earlier versions, drained by Recover
//	                             (nothing adds to it any more)
//	P:tasks               zset   admin index: member "<owner>/<id>", score = CreatedAt ms; every
//	                             task until it expires (AdminList; pruned of members whose
//	                             task is gone by AdminList and Recover)
//	P:id:<id>             string the task's owner (AdminFind); expires with the task
//	P:st:<s>              hash   AdminStats counters of the tasks expiring in the second before
//	                             unix second s: "<status>\x1f<tool>" -> count (redis_stats.go);
//	                             expires a minute after s
//	P:stb                 zset   the seconds s of the P:st:<s> keys (member = score = s)
//	P:sr:<instance>       hash   a store instance's oldest running task per tool: tool -> CreatedAt
//	                             ms; expires 3 s after its latest write
//	P:srs                 zset   member instance, score = until when its P:sr hash counts
//	P:sess:<sha256 hex>   string upstream protocol version of a session
//	P:srec:<sess>         hash   session record: bound credential, closing mark, running
//	                             calls (sessions.go); expires after the binding's ttl or
//	                             its latest call's deadline, whichever is later
//
// <sess> is Task.Session, validated by validSession (it is already a digest
// made by the caller, so it is used as is).
//
// The {owner} hash tag puts all of an owner's keys in one Cluster slot, so
// every per-task script touches one slot. P:leases, P:tasks and P:id:<id>
// are global keys; on a Cluster they are never touched by the same script
// as an owner key (on a single node, Create's script writes them all).
type keys struct{ prefix string }

// owner is the prefix of every key of owner's slot (hash tag {owner}):
// scripts build keys they use rarely from it instead of taking them as
// arguments.
func (k keys) owner(owner string) string { return k.prefix + ":{" + owner + "}:" }

func (k keys) task(owner, id string) string { return k.taskPrefix(owner) + id }

// taskPrefix is the task key without its id. listCmd appends ids to it, which
// stays in the owner's slot because of the hash tag.
func (k keys) taskPrefix(owner string) string { return k.prefix + ":{" + owner + "}:task:" }

func (k keys) index(owner string) string { return k.prefix + ":{" + owner + "}:index" }

func (k keys) live(owner string) string { return k.prefix + ":{" + owner + "}:live" }

func (k keys) events(owner, id string) string { return k.eventsPrefix(owner) + id }

func (k keys) leases() string { return k.prefix + ":leases" }

// runners is the runner heartbeat zset (its own slot).
func (k keys) runners() string { return k.prefix + ":runners" }

// adminIndex is the cross-owner index (its own slot).
func (k keys) adminIndex() string { return k.prefix + ":tasks" }

// taskOwner maps a task id to its owner (its own slot).
func (k keys) taskOwner(id string) string { return k.prefix + ":id:" + id }

// statBucket, statBuckets, statRunner and statRunners are the AdminStats
// counters (redis_stats.go; global keys, each its own slot).
func (k keys) statBucket(sec int64) string { return k.prefix + ":st:" + strconv.FormatInt(sec, 10) }

func (k keys) statBuckets() string { return k.prefix + ":stb" }

func (k keys) statRunner(inst string) string { return k.prefix + ":sr:" + inst }

func (k keys) statRunners() string { return k.prefix + ":srs" }

func (k keys) queue(owner, id string) string { return k.queuePrefix(owner) + id }

// queuePrefix is the queue key without its id (queuedCmd appends ids).
func (k keys) queuePrefix(owner string) string { return k.prefix + ":{" + owner + "}:q:" }

func (k keys) inbox(owner, id string) string { return k.inboxPrefix(owner) + id }

// inboxPrefix is the inbox key without its id (answerCmd appends the
// pending task id).
func (k keys) inboxPrefix(owner string) string { return k.prefix + ":{" + owner + "}:in:" }

func (k keys) spilled(owner, id string) string { return k.prefix + ":{" + owner + "}:res:" + id }

func (k keys) inputs(owner, id string) string { return k.prefix + ":{" + owner + "}:ir:" + id }

func (k keys) listening(owner, id string) string { return k.prefix + ":{" + owner + "}:lis:" + id }

func (k keys) sessQueued(owner, session string) string { return k.sessQueuedPrefix(owner) + session }

// sessQueuedPrefix is the session's queued-set key without the session;
// scripts append the session read from the task hash.
func (k keys) sessQueuedPrefix(owner string) string { return k.prefix + ":{" + owner + "}:sq:" }

func (k keys) sessListeners(owner string) string { return k.prefix + ":{" + owner + "}:sl" }

func (k keys) sessEvents(owner, session string) string { return k.sessEventsPrefix(owner) + session }

// sessEventsPrefix is the session channel without the session; scripts
// append the session read from the task hash.
func (k keys) sessEventsPrefix(owner string) string { return k.prefix + ":{" + owner + "}:sess:" }

// eventsPrefix is the task channel without its id (answerCmd appends the
// pending task id).
func (k keys) eventsPrefix(owner string) string { return k.prefix + ":{" + owner + "}:ev:" }

// pending names one pending server-to-client request. reqID is raw JSON
// text of any length and content, so it is hashed; session is validated
// (or "") and contains no ':'.
func (k keys) pending(owner, session, reqID string) string {
	sum := sha256.Sum256([]byte(reqID))
	return k.prefix + ":{" + owner + "}:pend:" + session + ":" + hex.EncodeToString(sum[:])
}

// session hashes the session id so raw session ids never appear in Redis.
func (k keys) session(session string) string {
	sum := sha256.Sum256([]byte(session))
	return k.prefix + ":sess:" + hex.EncodeToString(sum[:])
}

func (k keys) sessionRecord(session string) string { return k.prefix + ":srec:" + session }

// leaseMember names a task in the lease zset. IDs never contain '/', so the
// last '/' separates owner and id.
func leaseMember(owner, id string) string { return owner + "/" + id }

func parseLeaseMember(m string) (owner, id string, ok bool) {
	i := strings.LastIndexByte(m, '/')
	if i < 0 {
		return "", "", false
	}
	owner, id = m[:i], m[i+1:]
	return owner, id, validOwner(owner) && validID(id)
}

// validOwner accepts 1..256 printable ASCII bytes without braces, so an
// owner can neither break the {owner} hash tag nor alias another owner's keys.
func validOwner(s string) bool {
	if len(s) == 0 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// validID accepts 1..128 bytes of [A-Za-z0-9_-]; NewID's 32 hex chars qualify.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// validSession accepts what validID accepts: a session key is a digest
// made by the caller, and it becomes part of key and channel names.
func validSession(s string) bool { return validID(s) }

// validPrefix rejects braces (they would hijack the hash tag) and whitespace.
func validPrefix(s string) bool {
	return s != "" && validOwner(s) && !strings.ContainsRune(s, '/')
}

// validEra accepts "" or up to 64 printable ASCII bytes (a revision date
// such as "2025-11-25").
func validEra(s string) bool {
	if len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}
