package taskstore

import (
	"slices"
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
	fCap     = "cap"     // "1" when the task is counted in the owner's live zset (MaxPerOwner)
	fAux     = "aux"     // "1" once the task ever had a queue, inbox, listening mark or input request
)

// metaFields are the fields every script returns and decodeTask reads, in
// this order. The Lua prelude's F table is generated from it.
var metaFields = []string{fStatus, fMsg, fCreated, fUpdated, fTTL, fPoll, fTool, fUpID, fRunner, fSess, fEra}

// outcomeFields is metaFields plus the outcome (Outcome's one HMGET).
var outcomeFields = append(append([]string(nil), metaFields...), fOutKind, fOut)

// Lua helpers. A script is its body with, in front, only the helpers it
// calls (lua): the hot scripts (create, terminate, update, renew) define
// none and spell their few steps out, so a call runs no code that defines
// tables or functions first. The helpers:
//   - meta(k) = HMGET k <metaFields> "aux" (v[1] false when the task is
//     missing; v[10] the session; v[12] the aux mark: "1" once the task
//     ever had a queue, inbox, listening mark or input request, so that
//     the end of a task without them touches none of those keys)
//   - expiry(v): created+ttl, unix ms
//   - alive(v, now): task exists and now < expiry(v) (T-30; the Redis TTL
//     removes it at the same instant, this makes the cut-off exact even when a
//     backend expires lazily)
//   - terminal(s): completed, failed or cancelled (T-23)
//   - ms(x): integer ms as a decimal string (Lua numbers would print as
//     1.7e+12 on gopher-lua).
//   - mark(k, v): set the aux mark of task hash k unless v has it
//   - extend(k, at, now): make k live until about unix ms at: PEXPIREAT at
//     unless k already lives until at least at - TOL (TOL = keepStep/2
//     absorbs the time between "now" on the replica's clock and the
//     server's). Uses PTTL rather than PEXPIREAT GT so it also runs on
//     Redis < 7.
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
//   - reply(code, v): {code, v[1..#metaFields]}
var luaHelpers = map[string]string{
	"meta":     `local function meta(k) return redis.call("HMGET", k, ` + luaStrings(metaFields) + `, "aux") end`,
	"expiry":   `local function expiry(v) return tonumber(v[3]) + tonumber(v[5]) end`,
	"alive":    `local function alive(v, now) return v[1] and (tonumber(v[3]) + tonumber(v[5]) > now) end`,
	"terminal": `local function terminal(s) return s == "completed" or s == "failed" or s == "cancelled" end`,
	"ms":       `local function ms(x) return string.format("%d", x) end`,
	"mark":     `local function mark(k, v) if not v[12] then redis.call("HSET", k, "aux", "1") end end`,
	"keepUntil": `local function keepUntil(at) local step = ` + strconv.FormatInt(keepStep.Milliseconds(), 10) +
		` return math.ceil(at / step) * step end`,
	"extend": `local function extend(k, at, now)
  local p = redis.call("PTTL", k)
  if p < 0 or now + p < at - ` + strconv.FormatInt(keepStep.Milliseconds()/2, 10) + ` then redis.call("PEXPIREAT", k, string.format("%d", at)) end
end`,
	"spub": `local function spub(reg, ch, sess, payload, now)
  local u = redis.call("HGET", reg, sess)
  if u and tonumber(u) > now then redis.call("PUBLISH", ch .. sess, payload) end
end`,
	"announce": `local function announce(set, ch, sess, id, keep, now, reg)
  if not sess or sess == "" then return end
  redis.call("SADD", set .. sess, id)
  extend(set .. sess, keep, now)
  spub(reg, ch, sess, "q:" .. id, now)
end`,
	"trim": `local function trim(k, excess)
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
end`,
	"reply": `local function reply(code, v)
  local r = {code}
  for i = 1, ` + strconv.Itoa(len(metaFields)) + ` do r[i + 1] = v[i] end
  return r
end`,
}

// luaOrder is the order helpers are defined in (each after those it calls).
var luaOrder = []string{"meta", "expiry", "alive", "terminal", "ms", "mark", "keepUntil", "extend", "spub", "announce", "trim", "reply"}

// lua returns a script: the helpers body calls (and those they call), in
// dependency order, then body.
func lua(body string) string {
	used := body
	var defs []string
	for i := len(luaOrder) - 1; i >= 0; i-- {
		name := luaOrder[i]
		if strings.Contains(used, name+"(") {
			defs = append(defs, luaHelpers[name])
			used += luaHelpers[name]
		}
	}
	slices.Reverse(defs)
	return strings.Join(append(defs, body), "\n")
}

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

// createCmd stores a new working task.
//
// KEYS[1] task hash P:{owner}:task:<id>, KEYS[2] owner index zset
// P:{owner}:index, KEYS[3] owner live zset P:{owner}:live.
// ARGV[1] id, ARGV[2] now ms, ARGV[3] expires-at ms (now+ttl), ARGV[4]
// keep-until ms for the index and live zsets, or "0" when this replica
// already extended them that far (keepCache), ARGV[5] max live tasks (0 =
// no cap: the live zset is not touched), ARGV[6] lease deadline ms,
// ARGV[7] ttl ms, ARGV[8] poll ms, ARGV[9] tool, ARGV[10] upstream id,
// ARGV[11] runner, ARGV[12] status message, ARGV[13] task key prefix
// P:{owner}:task: (same slot), ARGV[14] session ("" for none), ARGV[15]
// era.
// Optional, with a cap on a single node (not Cluster), where every key is
// reachable from one script: KEYS[4] the admin index P:tasks and KEYS[5]
// the owner-by-id key P:id:<id>, ARGV[16] the member "<owner>/<id>",
// ARGV[17] the owner, ARGV[18] keep-until ms of the admin index or "0"
// (the work of zaddKeepCmd and a SET, done only when the task is stored,
// so a create refused at the cap leaves no admin entry). Without a cap
// Create pipelines those two writes next to this script as plain
// commands (ZADD NX, SET NX): a command a script runs costs Redis the
// call from Lua on top of the command, and commandstats counts its time
// twice (in EVALSHA's and in its own line).
//
// Returns 1 stored, -1 id exists (still in the owner's index; nothing
// written), -2 owner at MaxPerOwner (nothing written). With a cap, once
// the live zset reaches it, members whose expiry passed are dropped, then
// members whose task is gone or terminal (Finish and Cancel remove their
// member only when the task was counted) before the count is final. The
// index score is now, or the current highest score + 1 when that is not
// below now, so creation order is strict per owner and a task created
// while a client pages always sorts after the pages already read. A key's
// expiry is only ever extended (PTTL first: another replica may have set a
// later one). The hash's cap field is written only for a counted task.
var createCmd = redis.NewScript(`
local max = tonumber(ARGV[5])
if max > 0 and redis.call("ZCARD", KEYS[3]) >= max then
  redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", ARGV[2])
  if redis.call("ZCARD", KEYS[3]) >= max then
    local ids = redis.call("ZRANGE", KEYS[3], 0, -1)
    for i = 1, #ids do
      local st = redis.call("HGET", ARGV[13] .. ids[i], "status")
      if not st or st == "completed" or st == "failed" or st == "cancelled" then redis.call("ZREM", KEYS[3], ids[i]) end
    end
    if redis.call("ZCARD", KEYS[3]) >= max then return -2 end
  end
end
local score = ARGV[2]
local top = redis.call("ZRANGE", KEYS[2], -1, -1, "WITHSCORES")
if top[2] and tonumber(top[2]) >= tonumber(score) then score = string.format("%d", tonumber(top[2]) + 1) end
-- The index holds every id of the owner whose task may still exist (and
-- withdrawCmd's tombstones), so adding the id only if absent is the
-- existence check.
if redis.call("ZADD", KEYS[2], "NX", score, ARGV[1]) == 0 then return -1 end
if max > 0 then
  redis.call("HSET", KEYS[1], "status", "working", "msg", ARGV[12], "created", ARGV[2], "updated", ARGV[2],
    "ttl", ARGV[7], "poll", ARGV[8], "tool", ARGV[9], "upid", ARGV[10], "runner", ARGV[11], "lease", ARGV[6],
    "sess", ARGV[14], "era", ARGV[15], "cap", "1")
  redis.call("ZADD", KEYS[3], ARGV[3], ARGV[1])
else
  redis.call("HSET", KEYS[1], "status", "working", "msg", ARGV[12], "created", ARGV[2], "updated", ARGV[2],
    "ttl", ARGV[7], "poll", ARGV[8], "tool", ARGV[9], "upid", ARGV[10], "runner", ARGV[11], "lease", ARGV[6],
    "sess", ARGV[14], "era", ARGV[15])
end
redis.call("PEXPIREAT", KEYS[1], ARGV[3])
if ARGV[4] ~= "0" or KEYS[4] then
  local now = tonumber(ARGV[2])
  local tol = ` + strconv.FormatInt(keepStep.Milliseconds()/2, 10) + `
  local function extend(k, at)
    if at == 0 then return end
    local p = redis.call("PTTL", k)
    if p < 0 or now + p < at - tol then redis.call("PEXPIREAT", k, string.format("%d", at)) end
  end
  extend(KEYS[2], tonumber(ARGV[4]))
  if max > 0 then extend(KEYS[3], tonumber(ARGV[4])) end
  if KEYS[4] then
    redis.call("ZADD", KEYS[4], ARGV[2], ARGV[16])
    extend(KEYS[4], tonumber(ARGV[18]))
    redis.call("SET", KEYS[5], ARGV[17], "PXAT", ARGV[3])
  end
end
return 1
`)

// withdrawCmd takes back the id of a task whose Create failed after its
// createCmd may have reached Redis (a timeout, a lost connection, a failed
// WAIT): the caller was told no task exists, so none may be stored or
// listed, whether createCmd already ran or runs later (a stalled Redis runs
// what it read once it is free again). It deletes the task hash and the
// id's live entry and leaves the id in the owner's index as a tombstone
// scored -(hold-until ms): createCmd's ZADD NX then refuses the id, and
// listCmd, which reads scores from 0 up, never sees it. Expired tombstones
// (score >= -now) are dropped here; the rest go with the index.
//
// KEYS[1] task hash P:{owner}:task:<id>, KEYS[2] owner index P:{owner}:index,
// KEYS[3] owner live zset P:{owner}:live. ARGV[1] id, ARGV[2] now ms,
// ARGV[3] hold-until ms, ARGV[4] keep-until ms for the index as createCmd
// gets it ("0": this replica already extended it).
// Optional, on a single node: KEYS[4] the admin index P:tasks, KEYS[5] the
// owner-by-id key P:id:<id>, ARGV[5] the admin member "<owner>/<id>".
//
// Returns 1, or 2 when the index did not exist: the tombstone made it anew
// with expiry max(hold-until, keep-until), and the caller forgets its
// keepCache entry for it. An existing index's expiry is only ever extended,
// to hold-until at least (one without expiry keeps none).
var withdrawCmd = redis.NewScript(`
local now, hold = tonumber(ARGV[2]), tonumber(ARGV[3])
local p = redis.call("PTTL", KEYS[2])
redis.call("DEL", KEYS[1])
redis.call("ZREM", KEYS[3], ARGV[1])
if p ~= -2 then redis.call("ZREMRANGEBYSCORE", KEYS[2], "-" .. ARGV[2], "(0") end
redis.call("ZADD", KEYS[2], "-" .. ARGV[3], ARGV[1])
local at = 0
if p == -2 then
  at = math.max(hold, tonumber(ARGV[4]))
elseif p >= 0 and now + p < hold then
  at = hold
end
if at > 0 then redis.call("PEXPIREAT", KEYS[2], string.format("%d", at)) end
if KEYS[4] then
  redis.call("ZREM", KEYS[4], ARGV[5])
  redis.call("DEL", KEYS[5])
end
if p == -2 then return 2 end
return 1
`)

// zaddKeepCmd adds a member to a global zset (the admin index, the runner
// zset: their own slots, so on a Cluster it is pipelined next to the
// owner's script rather than run inside it) and keeps the zset until
// keep-until (only ever extending its expiry).
//
// KEYS[1] zset. ARGV[1] member, ARGV[2] score, ARGV[3] keep-until ms or
// "0" (this replica already extended it that far), ARGV[4] now ms.
// Returns 1.
var zaddKeepCmd = redis.NewScript(`
redis.call("ZADD", KEYS[1], ARGV[2], ARGV[1])
local at = tonumber(ARGV[3])
if at > 0 then
  local p = redis.call("PTTL", KEYS[1])
  if p < 0 or tonumber(ARGV[4]) + p < at then redis.call("PEXPIREAT", KEYS[1], ARGV[3]) end
end
return 1
`)

// updateCmd moves a non-terminal task between working and input_required
// and/or sets its message; lastUpdatedAt moves (never backwards) only when
// something changed, and then a wake-up is published on the task's
// channel and, if the task has a session, "s:<id>" on the session channel
// (only while the session listener registry says a replica listens there).
//
// KEYS[1] task hash. ARGV[1] status ("" keeps), ARGV[2] message ("" keeps),
// ARGV[3] now ms, ARGV[4] event channel, ARGV[5] session channel prefix
// P:{owner}:sess:, ARGV[6] id, ARGV[7] session listener registry
// P:{owner}:sl.
// Returns {1, meta..., previous status} after the update, {0} missing or
// expired, {-1} terminal.
var updateCmd = redis.NewScript(`
local now = tonumber(ARGV[3])
local v = redis.call("HMGET", KEYS[1], ` + luaStrings(metaFields) + `)
if not v[1] or tonumber(v[3]) + tonumber(v[5]) <= now then return {0} end
if v[1] == "completed" or v[1] == "failed" or v[1] == "cancelled" then return {-1} end
local changed = false
local was = v[1]
if ARGV[1] ~= "" and ARGV[1] ~= v[1] then v[1] = ARGV[1]; changed = true end
if ARGV[2] ~= "" and ARGV[2] ~= v[2] then v[2] = ARGV[2]; changed = true end
if changed then
  v[4] = string.format("%d", math.max(now, tonumber(v[4])))
  redis.call("HSET", KEYS[1], "status", v[1], "msg", v[2], "updated", v[4])
  redis.call("PUBLISH", ARGV[4], "u")
  if v[10] and v[10] ~= "" then
    local u = redis.call("HGET", ARGV[7], v[10])
    if u and tonumber(u) > now then redis.call("PUBLISH", ARGV[5] .. v[10], "s:" .. ARGV[6]) end
  end
end
return {1, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], was}
`)

// terminateCmd moves a non-terminal task to a terminal status: Finish
// (completed/failed + outcome), Cancel (cancelled, no outcome) and Recover
// (failed + internal outcome, only if the lease expired). It refuses to
// leave a terminal status (T-23, T-57, T-59), so a late outcome after a
// cancel is dropped. A task counted in the owner's live zset (field cap)
// leaves it. A task that ever had a queue, inbox, listening mark or input
// requests (field aux) has them cleaned up: inbox, mark and input requests
// deleted, and its outbound queue too, except that Finish keeps the
// notifications queued before the end (they precede the result; nothing
// new is queued after it, T-50) and drops queued requests; without them
// the task leaves its session's queued set. A task without (the common
// case) costs one HMGET, one HSET and the wake-ups: "t" published on the
// task's channel and, if the task has a session, "s:<id>" on the session
// channel while a replica listens there.
//
// KEYS[1] task hash. ARGV[1] status, ARGV[2] message (replaces the
// current one), ARGV[3] now ms, ARGV[4] outcome kind ("" = store none),
// ARGV[5] outcome raw, ARGV[6] lease cutoff ms (0 = none; else refuse
// unless the task's lease deadline < cutoff), ARGV[7] id, ARGV[8] "1" to
// keep queued notifications (Finish), ARGV[9] the owner's key prefix
// P:{owner}: (keys.owner). The other keys (live zset, queue, inbox,
// listening mark, input requests, session queued set, listener registry)
// and the channels are built from it, in the task's slot by the hash tag,
// and only when used: every argument costs the call, the common case uses
// only the task channel.
// Returns {1, meta..., previous status} after the change, {0} missing or
// expired, {-1} terminal, {-2, lease deadline ms} lease not expired
// (Recover).
var terminateCmd = redis.NewScript(`
local now = tonumber(ARGV[3])
local v = redis.call("HMGET", KEYS[1], ` + luaStrings(metaFields) + `, "lease", "cap", "aux")
if not v[1] or tonumber(v[3]) + tonumber(v[5]) <= now then return {0} end
if v[1] == "completed" or v[1] == "failed" or v[1] == "cancelled" then return {-1} end
local cutoff = tonumber(ARGV[6])
if cutoff > 0 then
  local lease = tonumber(v[12] or "0")
  if lease >= cutoff then return {-2, string.format("%d", lease)} end
end
local was = v[1]
v[1] = ARGV[1]
v[2] = ARGV[2]
if tonumber(v[4]) < now then v[4] = ARGV[3] end
if ARGV[4] ~= "" then
  redis.call("HSET", KEYS[1], "status", v[1], "msg", v[2], "updated", v[4], "okind", ARGV[4], "out", ARGV[5])
else
  redis.call("HSET", KEYS[1], "status", v[1], "msg", v[2], "updated", v[4])
end
local p, id = ARGV[9], ARGV[7]
if v[13] == "1" then redis.call("ZREM", p .. "live", id) end
local sess = v[10] and v[10] ~= ""
if v[14] == "1" then
  local kept = 0
  local q = p .. "q:" .. id
  if ARGV[8] == "1" then
    -- Finish: notifications queued before the end stay deliverable (they
    -- precede the result); requests are moot once the upstream answered.
    local r = redis.call("LRANGE", q, 0, -1)
    if #r > 0 then
      redis.call("DEL", q)
      for i = 1, #r do
        if string.sub(r[i], 1, 1) ~= "r" then
          redis.call("RPUSH", q, r[i])
          kept = kept + 1
        end
      end
      if kept > 0 then
        local pttl = redis.call("PTTL", KEYS[1])
        if pttl > 0 then redis.call("PEXPIRE", q, pttl) end
      end
    end
    redis.call("DEL", p .. "in:" .. id, p .. "lis:" .. id, p .. "ir:" .. id)
  else
    redis.call("DEL", q, p .. "in:" .. id, p .. "lis:" .. id, p .. "ir:" .. id)
  end
  if kept == 0 and sess then redis.call("SREM", p .. "sq:" .. v[10], id) end
end
redis.call("PUBLISH", p .. "ev:" .. id, "t")
if sess then
  local u = redis.call("HGET", p .. "sl", v[10])
  if u and tonumber(u) > now then redis.call("PUBLISH", p .. "sess:" .. v[10], "s:" .. id) end
end
return {1, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], was}
`)

// renewCmd extends a non-terminal task's lease deadline.
//
// KEYS[1] task hash. ARGV[1] now ms, ARGV[2] new lease deadline ms.
// Returns {1, status} extended, {-1, status} terminal (not extended),
// {0} missing or expired.
var renewCmd = redis.NewScript(`
local v = redis.call("HMGET", KEYS[1], "status", "created", "ttl")
if not v[1] or tonumber(v[2]) + tonumber(v[3]) <= tonumber(ARGV[1]) then return {0} end
if v[1] == "completed" or v[1] == "failed" or v[1] == "cancelled" then return {-1, v[1]} end
redis.call("HSET", KEYS[1], "lease", ARGV[2])
return {1, v[1]}
`)

// listCmd reads one page of an owner's tasks in index order and prunes index
// members whose task is missing or expired.
//
// KEYS[1] owner index zset. ARGV[1] task key prefix (P:{owner}:task:; the
// task keys are built from it, same slot by the hash tag), ARGV[2] start
// score (inclusive; "0" for the first page: withdrawCmd's tombstones score
// below 0 and are never read here), ARGV[3] id of the last task
// of the previous page ("" for none; members with the start score and an id
// <= it are skipped), ARGV[4] page size n, ARGV[5] now ms.
// Returns {more, id1, score1, meta1..., id2, ...}: up to n live tasks, more =
// 1 when at least one further live task exists.
var listCmd = redis.NewScript(lua(`
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
        for j = 1, ` + strconv.Itoa(len(metaFields)) + ` do out[#out + 1] = v[j] end
      end
    end
  end
  off = off + #r / 2
  if #r / 2 < batch then done = true end
end
for i = 1, #stale do redis.call("ZREM", KEYS[1], stale[i]) end
return out
`))

// Task streams (redis_stream.go). Queue elements are the kind byte ("p", "n",
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
var enqueueCmd = redis.NewScript(lua(`
local now = tonumber(ARGV[1])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
local exp = expiry(v)
local n = redis.call("RPUSH", KEYS[2], ARGV[2] .. ARGV[3])
-- Every path that creates the queue sets its expiry, so only a new queue
-- needs one.
if n == 1 then
  redis.call("PEXPIREAT", KEYS[2], ms(exp))
  mark(KEYS[1], v)
end
local dropped = 0
local max = tonumber(ARGV[4])
if max > 0 and n > max then dropped = trim(KEYS[2], n - max) end
redis.call("PUBLISH", ARGV[5], "m")
if redis.call("EXISTS", KEYS[3]) == 0 then
  announce(ARGV[6], ARGV[7], v[10], ARGV[8], keepUntil(exp + tonumber(ARGV[9])), now, ARGV[10])
end
return {1, dropped}
`))

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
var requeueCmd = redis.NewScript(lua(`
local now = tonumber(ARGV[1])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
local exp = expiry(v)
for i = #ARGV, 8, -1 do redis.call("LPUSH", KEYS[2], ARGV[i]) end
redis.call("PEXPIREAT", KEYS[2], ms(exp))
mark(KEYS[1], v)
redis.call("PUBLISH", ARGV[2], "m")
if redis.call("EXISTS", KEYS[3]) == 0 then
  announce(ARGV[3], ARGV[4], v[10], ARGV[5], keepUntil(exp + tonumber(ARGV[6])), now, ARGV[7])
end
return {1}
`))

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
var listenCmd = redis.NewScript(lua(`
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
mark(KEYS[1], v)
return {1}
`))

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
var addPendingCmd = redis.NewScript(lua(`
local now = tonumber(ARGV[1])
local v = meta(KEYS[1])
if not alive(v, now) then return {0} end
if terminal(v[1]) then return {-1} end
redis.call("SET", KEYS[2], ARGV[2], "PX", ms(expiry(v) - now))
return {1}
`))

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
var answerCmd = redis.NewScript(lua(`
local id = redis.call("GET", KEYS[1])
if not id then return {0} end
redis.call("DEL", KEYS[1])
local now = tonumber(ARGV[1])
local v = meta(ARGV[3] .. id)
if not alive(v, now) then return {0} end
if not terminal(v[1]) then
  local ib = ARGV[4] .. id
  if redis.call("RPUSH", ib, ARGV[2]) == 1 then mark(ARGV[3] .. id, v) end
  redis.call("PEXPIREAT", ib, ms(expiry(v)))
  redis.call("PUBLISH", ARGV[5] .. id, "a")
end
return {1, id}
`))

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
var sessListenCmd = redis.NewScript(lua(`
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
`))
