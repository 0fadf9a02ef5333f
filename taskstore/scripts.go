package taskstore

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Hash fields of a task (P:{owner}:task:<id>). Times and durations are
// decimal milliseconds.
const (
	fStatus  = "status"  // Status
	fMsg     = "msg"     // status message
	fCreated = "created" // CreatedAt, unix ms
	fUpdated = "updated" // UpdatedAt (lastUpdatedAt), unix ms
	fTTL     = "ttl"     // TTL ms
	fPoll    = "poll"    // PollInterval ms
	fTool    = "tool"    // tool name
	fUpID    = "upid"    // upstream JSON-RPC id, raw JSON text
	fRunner  = "runner"  // runner process id
	fSess    = "sess"    // Task.Session ("" for none)
	fEra     = "era"     // Task.Era ("" for unknown)
	fLease   = "lease"   // lease deadline, unix ms; removed when terminal
	fOutKind = "okind"   // OutcomeKind; absent until finished
	fOut     = "out"     // outcome raw bytes; absent until finished
)

// metaFields are the fields every script returns and decodeTask reads, in
// this order. The Lua prelude's F table is generated from it.
var metaFields = []string{fStatus, fMsg, fCreated, fUpdated, fTTL, fPoll, fTool, fUpID, fRunner, fSess, fEra}

// outcomeFields is metaFields plus the outcome (Outcome's one HMGET).
var outcomeFields = append(append([]string(nil), metaFields...), fOutKind, fOut)

// luaPrelude is shared by the scripts:
//   - F: metaFields; meta(k) = HMGET k F... (v[1] false when the task is
//     missing; v[10] is the session, false for a task stored before it existed)
//   - expiry(v): created+ttl, unix ms
//   - alive(v, now): task exists and now < expiry(v) (T-30; the Redis TTL
//     removes it at the same instant, this makes the cut-off exact even when a
//     backend expires lazily)
//   - terminal(s): completed, failed or cancelled (T-23)
//   - extend(k, at, now): make k live until about unix ms at: PEXPIREAT at
//     unless k already lives until at least at - TOL. The callers round at
//     up to a multiple of keepStep, so the creates of one step find the
//     expiry set and skip the PEXPIREAT; TOL (keepStep/2) absorbs the time
//     between "now" on the replica's clock and the script's run on the
//     server's (PTTL counts from the server's clock), which would otherwise
//     make every script that runs a millisecond late re-issue it. Uses
//     PTTL rather than PEXPIREAT NX/GT so it also runs on Redis < 7.
//   - ms(x): integer ms as a decimal string (Lua numbers would print as
//     1.7e+12 on gopher-lua).
//   - keepUntil(at): at rounded up to a multiple of keepStep (for extend).
//   - spub(reg, ch, sess, payload, now): publish payload on the session
//     channel ch..sess, but only if the listener registry reg (a hash:
//     session -> unix ms until which some replica listens) says a replica
//     listens; a PUBLISH nobody receives still costs Redis (and on a
//     Cluster is sent to every node).
//   - announce(set, ch, sess, id, keep, now, reg): if sess is set, add id to
//     the session's queued set (set..sess, kept until keep) and spub "q:<id>".
//   - trim(k, excess): drop the excess oldest "p" elements of queue k, then
//     the oldest "n" ones, never "r"; returns how many were dropped.
var luaPrelude = `
local F = {` + luaStrings(metaFields) + `}
local function meta(k) return redis.call("HMGET", k, unpack(F)) end
local function expiry(v) return tonumber(v[3]) + tonumber(v[5]) end
local function alive(v, now) return v[1] and (expiry(v) > now) end
local function terminal(s) return s == "completed" or s == "failed" or s == "cancelled" end
local function ms(x) return string.format("%d", x) end
local STEP = ` + strconv.FormatInt(keepStep.Milliseconds(), 10) + `
local function keepUntil(at) return math.ceil(at / STEP) * STEP end
local TOL = ` + strconv.FormatInt(keepStep.Milliseconds()/2, 10) + `
local function extend(k, at, now)
  local p = redis.call("PTTL", k)
  if p < 0 or now + p < at - TOL then redis.call("PEXPIREAT", k, ms(at)) end
end
local function spub(reg, ch, sess, payload, now)
  local u = redis.call("HGET", reg, sess)
  if u and tonumber(u) > now then redis.call("PUBLISH", ch .. sess, payload) end
end
local function announce(set, ch, sess, id, keep, now, reg)
  if not sess or sess == "" then return end
  redis.call("SADD", set .. sess, id)
  extend(set .. sess, keep, now)
  spub(reg, ch, sess, "q:" .. id, now)
end
local function trim(k, excess)
  local marked = 0
  for _, cls in ipairs({"p", "n"}) do
    local off = 0
    while marked < excess do
      local r = redis.call("LRANGE", k, off, off + 63)
      for i = 1, #r do
        if string.sub(r[i], 1, 1) == cls then
          redis.call("LSET", k, off + i - 1, "")
          marked = marked + 1
          if marked == excess then break end
        end
      end
      if #r < 64 then break end
      off = off + #r
    end
  end
  if marked > 0 then redis.call("LREM", k, marked, "") end
  return marked
end
local function reply(code, v)
  local r = {code}
  for i = 1, #F do r[i + 1] = v[i] end
  return r
end
`

func luaStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = `"` + s + `"`
	}
	return strings.Join(q, ", ")
}

// Codes returned by the scripts (first element of the reply array).
const (
	codeOK        = 1
	codeNotFound  = 0  // missing or expired
	codeTerminal  = -1 // already terminal (or, for createCmd, id exists)
	codeLimit     = -2 // createCmd: owner over MaxPerOwner
	codeLeaseLive = -2 // terminateCmd: lease not expired before the cutoff
)

// createCmd stores a new working task and counts the owner's live tasks.
//
// KEYS[1] task hash, KEYS[2] owner index zset, KEYS[3] owner live zset.
// ARGV[1] id, ARGV[2] now ms, ARGV[3] expires-at ms (now+ttl),
// ARGV[4] keep-until ms for the index and live zsets, ARGV[5] max live tasks
// (0 = no cap), ARGV[6] lease deadline ms, ARGV[7] ttl ms, ARGV[8] poll ms,
// ARGV[9] tool, ARGV[10] upstream id, ARGV[11] runner, ARGV[12] status
// message, ARGV[13] task key prefix P:{owner}:task: (same slot), ARGV[14]
// session ("" for none), ARGV[15] era.
// Optional, on a single node (not Cluster), where every key is reachable
// from one script: KEYS[4] the lease zset, KEYS[5] the admin index P:tasks,
// KEYS[6] the owner-by-id key P:id:<id>, ARGV[16] the member "<owner>/<id>"
// (of the lease zset and the admin index) and ARGV[17] the owner (the
// work of leaseAddCmd twice and a SET, done only when the task is stored).
//
// Returns {1} stored, {-1} id exists, {-2} owner at MaxPerOwner (nothing
// written). With a cap, once the live zset reaches it, members whose expiry
// passed are dropped (without a cap they stay until the zset's own TTL);
// if still at the cap, members whose task hash is gone (expired on the
// server's clock, evicted) are dropped too before the count is final. The index score is now, or the current highest score + 1 when
// that is not below now, so creation order is strict per owner and a task
// created while a client pages always sorts after the pages already read.
var createCmd = redis.NewScript(luaPrelude + `
local now = tonumber(ARGV[2])
if redis.call("EXISTS", KEYS[1]) == 1 then return {-1} end
local max = tonumber(ARGV[5])
if max > 0 and redis.call("ZCARD", KEYS[3]) >= max then
  redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", ARGV[2])
  if redis.call("ZCARD", KEYS[3]) >= max then
    local ids = redis.call("ZRANGE", KEYS[3], 0, -1)
    for i = 1, #ids do
      if redis.call("EXISTS", ARGV[13] .. ids[i]) == 0 then redis.call("ZREM", KEYS[3], ids[i]) end
    end
    if redis.call("ZCARD", KEYS[3]) >= max then return {-2} end
  end
end
local score = now
local top = redis.call("ZRANGE", KEYS[2], -1, -1, "WITHSCORES")
if top[2] and tonumber(top[2]) >= score then score = tonumber(top[2]) + 1 end
redis.call("HSET", KEYS[1], "status", "working", "msg", ARGV[12], "created", ARGV[2], "updated", ARGV[2],
  "ttl", ARGV[7], "poll", ARGV[8], "tool", ARGV[9], "upid", ARGV[10], "runner", ARGV[11], "lease", ARGV[6],
  "sess", ARGV[14], "era", ARGV[15])
redis.call("PEXPIREAT", KEYS[1], ARGV[3])
redis.call("ZADD", KEYS[2], ms(score), ARGV[1])
redis.call("ZADD", KEYS[3], ARGV[3], ARGV[1])
local keep = tonumber(ARGV[4])
extend(KEYS[2], keep, now)
extend(KEYS[3], keep, now)
if KEYS[4] then
  redis.call("ZADD", KEYS[4], ARGV[6], ARGV[16])
  extend(KEYS[4], keep, now)
  redis.call("ZADD", KEYS[5], ARGV[2], ARGV[16])
  extend(KEYS[5], keep, now)
  redis.call("SET", KEYS[6], ARGV[17], "PXAT", ARGV[3])
end
return {1}
`)

// leaseAddCmd adds a member to a global zset (the lease zset, the admin
// index: their own slots, so it is pipelined next to createCmd rather than
// run inside it) and keeps the zset until keep-until.
//
// KEYS[1] zset. ARGV[1] member "<owner>/<id>", ARGV[2] score (lease deadline
// ms, creation ms), ARGV[3] keep-until ms (task expiry + slack), ARGV[4] now ms.
// Returns 1.
var leaseAddCmd = redis.NewScript(luaPrelude + `
redis.call("ZADD", KEYS[1], ARGV[2], ARGV[1])
extend(KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[4]))
return 1
`)

// updateCmd moves a non-terminal task between working and input_required
// and/or sets its message; lastUpdatedAt moves (never backwards) only when
// something changed, and then a wake-up is published on the task's
// channel and, if the task has a session, "s:<id>" on the session channel.
//
// KEYS[1] task hash. ARGV[1] status ("" keeps), ARGV[2] message ("" keeps),
// ARGV[3] now ms, ARGV[4] event channel, ARGV[5] session channel prefix
// P:{owner}:sess:, ARGV[6] id, ARGV[7] session listener registry
// P:{owner}:sl (spub).
// Returns {1, meta...} after the update, {0} missing or expired, {-1} terminal.
var updateCmd = redis.NewScript(luaPrelude + `
local now = tonumber(ARGV[3])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
local changed = false
if ARGV[1] ~= "" and ARGV[1] ~= v[1] then v[1] = ARGV[1]; changed = true end
if ARGV[2] ~= "" and ARGV[2] ~= v[2] then v[2] = ARGV[2]; changed = true end
if changed then
  v[4] = ms(math.max(now, tonumber(v[4])))
  redis.call("HSET", KEYS[1], "status", v[1], "msg", v[2], "updated", v[4])
  redis.call("PUBLISH", ARGV[4], "u")
  if v[10] and v[10] ~= "" then spub(ARGV[7], ARGV[5], v[10], "s:" .. ARGV[6], now) end
end
return reply(1, v)
`)

// terminateCmd moves a non-terminal task to a terminal status: Finish
// (completed/failed + outcome), Cancel (cancelled, no outcome) and Recover
// (failed + internal outcome, only if the lease expired). It refuses to
// leave a terminal status (T-23, T-57, T-59), so a late outcome after a
// cancel is dropped. The task leaves the owner's live zset (and its
// session's queued set); its inbox, listening mark and open input requests
// are deleted, and so is its outbound queue, except that Finish keeps the
// notifications queued before the end (they precede the result; nothing
// new is queued after it, T-50) and drops queued requests. A wake-up is
// published on the task's channel and, if the task has a session, "s:<id>"
// on the session channel.
//
// KEYS[1] task hash, KEYS[2] owner live zset, KEYS[3] queue, KEYS[4]
// inbox, KEYS[5] listening mark, KEYS[6] open input requests.
// ARGV[1] status, ARGV[2] message (replaces the current one), ARGV[3] now
// ms, ARGV[4] event channel, ARGV[5] outcome kind ("" = store none),
// ARGV[6] outcome raw, ARGV[7] lease cutoff ms (0 = none; else refuse
// unless the task's lease deadline < cutoff), ARGV[8] id, ARGV[9] session
// queued-set prefix P:{owner}:sq:, ARGV[10] session channel prefix,
// ARGV[11] "1" to keep queued notifications (Finish), ARGV[12] session
// listener registry (spub).
// Optional, on a single node (Finish and Cancel; not Cluster, not Recover):
// KEYS[7] the lease zset and ARGV[13] the lease member, removed first
// whatever the outcome (a terminal or missing task needs no lease).
// Returns {1, meta...} after the change, {0} missing or expired,
// {-1} terminal, {-2, lease deadline ms} lease not expired (Recover moves
// the lease entry there).
var terminateCmd = redis.NewScript(luaPrelude + `
if KEYS[7] then redis.call("ZREM", KEYS[7], ARGV[13]) end
local now = tonumber(ARGV[3])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
local cutoff = tonumber(ARGV[7])
if cutoff > 0 then
  local lease = tonumber(redis.call("HGET", KEYS[1], "lease") or "0")
  if lease >= cutoff then return {-2, ms(lease)} end
end
v[1] = ARGV[1]
v[2] = ARGV[2]
v[4] = ms(math.max(now, tonumber(v[4])))
if ARGV[5] ~= "" then
  redis.call("HSET", KEYS[1], "status", v[1], "msg", v[2], "updated", v[4], "okind", ARGV[5], "out", ARGV[6])
else
  redis.call("HSET", KEYS[1], "status", v[1], "msg", v[2], "updated", v[4])
end
redis.call("HDEL", KEYS[1], "lease")
redis.call("ZREM", KEYS[2], ARGV[8])
local kept = 0
if ARGV[11] == "1" then
  -- Finish: notifications queued before the end stay deliverable (they
  -- precede the result); requests are moot once the upstream answered.
  local q = redis.call("LRANGE", KEYS[3], 0, -1)
  if #q > 0 then
    redis.call("DEL", KEYS[3])
    for i = 1, #q do
      if string.sub(q[i], 1, 1) ~= "r" then
        redis.call("RPUSH", KEYS[3], q[i])
        kept = kept + 1
      end
    end
    if kept > 0 then
      local pttl = redis.call("PTTL", KEYS[1])
      if pttl > 0 then redis.call("PEXPIRE", KEYS[3], pttl) end
    end
  end
  redis.call("DEL", KEYS[4], KEYS[5], KEYS[6])
else
  redis.call("DEL", KEYS[3], KEYS[4], KEYS[5], KEYS[6])
end
redis.call("PUBLISH", ARGV[4], "t")
if v[10] and v[10] ~= "" then
  if kept == 0 then redis.call("SREM", ARGV[9] .. v[10], ARGV[8]) end
  spub(ARGV[12], ARGV[10], v[10], "s:" .. ARGV[8], now)
end
return reply(1, v)
`)

// renewCmd extends a non-terminal task's lease deadline.
//
// KEYS[1] task hash. ARGV[1] now ms, ARGV[2] new lease deadline ms.
// Returns {1, status} extended, {-1, status} terminal (not extended),
// {0} missing or expired.
var renewCmd = redis.NewScript(luaPrelude + `
local now = tonumber(ARGV[1])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1, v[1]} end
redis.call("HSET", KEYS[1], "lease", ARGV[2])
return {1, v[1]}
`)

// listCmd reads one page of an owner's tasks in index order and prunes index
// members whose task is missing or expired.
//
// KEYS[1] owner index zset. ARGV[1] task key prefix (P:{owner}:task:; the
// task keys are built from it, same slot by the hash tag), ARGV[2] start
// score (inclusive; "-inf" for the first page), ARGV[3] id of the last task
// of the previous page ("" for none; members with the start score and an id
// <= it are skipped), ARGV[4] page size n, ARGV[5] now ms.
// Returns {more, id1, score1, meta1..., id2, ...}: up to n live tasks, more =
// 1 when at least one further live task exists.
var listCmd = redis.NewScript(luaPrelude + `
local now = tonumber(ARGV[5])
local n = tonumber(ARGV[4])
local afterScore = tonumber(ARGV[2])
local afterID = ARGV[3]
local out = {0}
local stale = {}
local got = 0
local off = 0
local batch = n + 1
if batch < 32 then batch = 32 end
local done = false
while not done do
  local r = redis.call("ZRANGEBYSCORE", KEYS[1], ARGV[2], "+inf", "WITHSCORES", "LIMIT", off, batch)
  for i = 1, #r, 2 do
    local id = r[i]
    local sc = tonumber(r[i + 1])
    if not (afterID ~= "" and sc == afterScore and id <= afterID) then
      local v = meta(ARGV[1] .. id)
      if not alive(v, now) then
        stale[#stale + 1] = id
      elseif got == n then
        out[1] = 1
        done = true
        break
      else
        got = got + 1
        out[#out + 1] = id
        out[#out + 1] = ms(sc)
        for j = 1, #F do out[#out + 1] = v[j] end
      end
    end
  end
  off = off + #r / 2
  if #r / 2 < batch then done = true end
end
for i = 1, #stale do redis.call("ZREM", KEYS[1], stale[i]) end
return out
`)

// Task streams (stream.go). Queue elements are the kind byte ("p", "n",
// "r") followed by the message; "" is never an element, trim uses it as a
// tombstone.

// enqueueCmd appends a message to a live, non-terminal task's queue, trims
// the queue to max and wakes listeners: always the task's channel ("m");
// unless a tasks/result stream listens, also the session (announce).
//
// KEYS[1] task hash, KEYS[2] queue, KEYS[3] listening mark.
// ARGV[1] now ms, ARGV[2] kind ("p", "n" or "r"), ARGV[3] message,
// ARGV[4] max queue length (0 = unbounded), ARGV[5] task channel,
// ARGV[6] session queued-set prefix P:{owner}:sq:, ARGV[7] session channel
// prefix P:{owner}:sess:, ARGV[8] id, ARGV[9] slack ms for the queued set,
// ARGV[10] session listener registry (spub).
// Returns {1, dropped} queued, {0} missing or expired, {-1} terminal
// (nothing queued). The queue expires with the task.
var enqueueCmd = redis.NewScript(luaPrelude + `
local now = tonumber(ARGV[1])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
local exp = expiry(v)
local n = redis.call("RPUSH", KEYS[2], ARGV[2] .. ARGV[3])
-- Every path that creates the queue sets its expiry, so only a new queue
-- needs one.
if n == 1 then redis.call("PEXPIREAT", KEYS[2], ms(exp)) end
local dropped = 0
local max = tonumber(ARGV[4])
if max > 0 and n > max then dropped = trim(KEYS[2], n - max) end
redis.call("PUBLISH", ARGV[5], "m")
if redis.call("EXISTS", KEYS[3]) == 0 then
  announce(ARGV[6], ARGV[7], v[10], ARGV[8], keepUntil(exp + tonumber(ARGV[9])), now, ARGV[10])
end
return {1, dropped}
`)

// drainCmd takes the whole queue and removes the task from its session's
// queued set. A missing task has whatever its queue holds (normally
// nothing: the queue expires with it).
//
// KEYS[1] queue, KEYS[2] task hash. ARGV[1] session queued-set prefix,
// ARGV[2] id.
// Returns the elements, FIFO.
var drainCmd = redis.NewScript(`
local r = redis.call("LRANGE", KEYS[1], 0, -1)
if #r > 0 then redis.call("DEL", KEYS[1]) end
local sess = redis.call("HGET", KEYS[2], "sess")
if sess and sess ~= "" then redis.call("SREM", ARGV[1] .. sess, ARGV[2]) end
return r
`)

// requeueCmd puts elements back at the head of a live, non-terminal task's
// queue, in order, and wakes listeners like enqueueCmd (no trimming).
//
// KEYS[1] task hash, KEYS[2] queue, KEYS[3] listening mark.
// ARGV[1] now ms, ARGV[2] task channel, ARGV[3] session queued-set prefix,
// ARGV[4] session channel prefix, ARGV[5] id, ARGV[6] slack ms,
// ARGV[7] session listener registry (spub), ARGV[8..] elements (kind byte +
// message), oldest first.
// Returns {1} requeued, {0} missing or expired, {-1} terminal.
var requeueCmd = redis.NewScript(luaPrelude + `
local now = tonumber(ARGV[1])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
local exp = expiry(v)
for i = #ARGV, 8, -1 do redis.call("LPUSH", KEYS[2], ARGV[i]) end
redis.call("PEXPIREAT", KEYS[2], ms(exp))
redis.call("PUBLISH", ARGV[2], "m")
if redis.call("EXISTS", KEYS[3]) == 0 then
  announce(ARGV[3], ARGV[4], v[10], ARGV[5], keepUntil(exp + tonumber(ARGV[6])), now, ARGV[7])
end
return {1}
`)

// listenCmd sets or clears a task's listening mark. Clearing it while the
// queue still holds messages of a live, non-terminal task announces them to
// the session, so they are not stranded when a tasks/result stream closes.
//
// KEYS[1] task hash, KEYS[2] listening mark, KEYS[3] queue.
// ARGV[1] now ms, ARGV[2] mark ttl ms (<= 0 clears), ARGV[3] session
// queued-set prefix, ARGV[4] session channel prefix, ARGV[5] id, ARGV[6]
// slack ms, ARGV[7] session listener registry (spub).
// Returns {1} done, {0} missing or expired (setting only; clearing always
// succeeds). The mark lives min(ttl, task expiry - now).
var listenCmd = redis.NewScript(luaPrelude + `
local now = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local v = meta(KEYS[1])
if ttl <= 0 then
  redis.call("DEL", KEYS[2])
  if alive(v, now) and not terminal(v[1]) and redis.call("LLEN", KEYS[3]) > 0 then
    announce(ARGV[3], ARGV[4], v[10], ARGV[5], keepUntil(expiry(v) + tonumber(ARGV[6])), now, ARGV[7])
  end
  return {1}
end
if not alive(v, now) then return {0} end
local left = expiry(v) - now
if ttl > left then ttl = left end
redis.call("SET", KEYS[2], "1", "PX", ms(ttl))
return {1}
`)

// queuedCmd lists a session's tasks whose queue is not empty and prunes the
// others (drained by a Drain that raced, or expired).
//
// KEYS[1] session queued set. ARGV[1] queue key prefix P:{owner}:q: (the
// queue keys are built from it, same slot by the hash tag).
// Returns the task ids.
var queuedCmd = redis.NewScript(`
local ids = redis.call("SMEMBERS", KEYS[1])
local out = {}
for i = 1, #ids do
  if redis.call("LLEN", ARGV[1] .. ids[i]) > 0 then
    out[#out + 1] = ids[i]
  else
    redis.call("SREM", KEYS[1], ids[i])
  end
end
return out
`)

// addPendingCmd records which task a pending server-to-client request
// belongs to; the entry expires with the task.
//
// KEYS[1] task hash, KEYS[2] pending key. ARGV[1] now ms, ARGV[2] id.
// Returns {1} recorded, {0} missing or expired, {-1} terminal.
var addPendingCmd = redis.NewScript(luaPrelude + `
local now = tonumber(ARGV[1])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
redis.call("SET", KEYS[2], ARGV[2], "PX", ms(expiry(v) - now))
return {1}
`)

// answerCmd consumes a pending request and hands the client's response to
// the task: appended to its inbox (expiring with the task) and "a"
// published on its channel. For a task that became terminal meanwhile the
// answer is accepted and dropped (nobody will read it).
//
// KEYS[1] pending key. ARGV[1] now ms, ARGV[2] response, ARGV[3] task key
// prefix P:{owner}:task:, ARGV[4] inbox prefix P:{owner}:in:, ARGV[5] task
// channel prefix P:{owner}:ev: (keys built from the pending entry's task
// id, same slot by the hash tag).
// Returns {1, id} taken, {0} not pending (or its task is gone; the entry is
// removed then too).
var answerCmd = redis.NewScript(luaPrelude + `
local id = redis.call("GET", KEYS[1])
if not id then return {0} end
redis.call("DEL", KEYS[1])
local now = tonumber(ARGV[1])
local v = meta(ARGV[3] .. id)
if not alive(v, now) then return {0} end
if not terminal(v[1]) then
  local ib = ARGV[4] .. id
  redis.call("RPUSH", ib, ARGV[2])
  redis.call("PEXPIREAT", ib, ms(expiry(v)))
  redis.call("PUBLISH", ARGV[5] .. id, "a")
end
return {1, id}
`)

// takeCmd takes a whole list (TakeAnswers: the inbox).
//
// KEYS[1] list. Returns its elements, FIFO.
var takeCmd = redis.NewScript(`
local r = redis.call("LRANGE", KEYS[1], 0, -1)
if #r > 0 then redis.call("DEL", KEYS[1]) end
return r
`)

// sessListenCmd records that this replica listens on a session channel
// until a given time (the registry spub consults), and prunes expired
// entries once the registry holds more than 32.
//
// KEYS[1] session listener registry P:{owner}:sl (hash: session -> unix ms).
// ARGV[1] now ms, ARGV[2] listen-until ms, ARGV[3] keep-until ms (rounded
// to keepStep, >= listen-until), ARGV[4..] sessions.
// Returns 1.
var sessListenCmd = redis.NewScript(luaPrelude + `
local now = tonumber(ARGV[1])
local untilMS = tonumber(ARGV[2])
for i = 4, #ARGV do
  local cur = tonumber(redis.call("HGET", KEYS[1], ARGV[i]) or "0")
  if cur < untilMS then redis.call("HSET", KEYS[1], ARGV[i], ARGV[2]) end
end
extend(KEYS[1], tonumber(ARGV[3]), now)
if redis.call("HLEN", KEYS[1]) > 32 then
  local all = redis.call("HGETALL", KEYS[1])
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) <= now then redis.call("HDEL", KEYS[1], all[i]) end
  end
end
return 1
`)
