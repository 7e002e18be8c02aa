package redisstore

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// How the Lua scripts are put together. Each script runs atomically on the
// Redis server: no other command interleaves with one. Every key a script
// touches is passed in KEYS and shares one hash tag, so the scripts run on
// Redis Cluster too. Time comes from the server's TIME, never from the
// caller.
//
// A script begins with a clock snippet (nowMS or nowUS) and a key prelude
// that names its KEYS once (roomKeysLua, shardedRoomKeysLua,
// shardKeysLua); the rest of it speaks of kQueue, kState and so on, never
// of KEYS[n]. A one-queue room and a queue shard keep their waiting users
// in keys of the same roles at other KEYS indexes, so queueLua, written
// against the names, serves both.

// nowMS reads the server clock in milliseconds (now).
const nowMS = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// nowUS reads the server clock in ms (now) and µs (nowus).
const nowUS = nowMS + `
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// roomKeysLua names the KEYS every room script takes (Keys.scriptKeys):
//
//	1 cfg  2 seq  3 queue  4 active  5 state  6 seqof  7 stats  8 joinedat
//	9 seen  10 away  11 awayat  12 unarrived  13 done  14 bucket
//
// seen scores each waiting user by their last poll (ms); away holds users
// set aside for not polling, scored by their place, and awayat when their
// chance to return ends; unarrived scores admitted users by the end of
// their arrival window; done scores finished users by when they finished,
// for the retention purge; bucket is the outflow limit's token bucket.
const roomKeysLua = `
local kCfg, kSeq, kQueue, kActive, kState, kSeqof, kStats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local kJoinedat, kSeen, kAway, kAwayat, kUnarrived, kDone, kBucket = KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
`

// shardedRoomKeysLua names the KEYS of a sharded room's own scripts
// (Keys.shardedKeys): the room's, then 15 admstamp, 16 moving,
// 17 movinginfo. admstamp holds the order stamp of each admitted user's
// join, so that a join is admitted once; moving and movinginfo hold
// admissions whose users the shards have not yet let go.
const shardedRoomKeysLua = roomKeysLua + `
local kAdmstamp, kMoving, kMovinginfo = KEYS[15], KEYS[16], KEYS[17]
`

// shardKeysLua names the KEYS of a queue shard's scripts (ShardKeys.list):
//
//	1 cfg  2 seq  3 queue  4 state  5 admseq  6 stats  7 joinedat  8 seen
//	9 away  10 awayat  11 done  12 seqof
//
// The roles are a room's (see roomKeysLua), but queue scores users by
// their order stamp (µs), and admseq holds the admission's seq of a user
// the shard let go to the room.
const shardKeysLua = `
local kCfg, kSeq, kQueue, kState, kAdmseq, kStats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local kJoinedat, kSeen, kAway, kAwayat, kDone, kSeqof = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
`

// queueLua defines what a one-queue room and a queue shard do alike to
// their waiting users (needs a clock snippet and a key prelude first):
// finish, finishFrom, enqueue, comeBack, closeWaiting, closeAll,
// setAside, forget, housekeep and shuffle.
const queueLua = `
local housekeepMS = 1000
-- kInvites holds the used invites (a sorted set scored by each invite's
-- expiry, ms): the last of KEYS in the scripts that use it, joins and
-- stats (Keys.Invites, ShardKeys.Invites); unused elsewhere.
local kInvites = KEYS[#KEYS]
-- joinRefused checks a new join against the room's bounds (shard's, in
-- a sharded room): 'LINEFULL' when the line holds max_waiting users,
-- 'JOINRATE' when the join bucket (max_joins_per_second, one second's
-- worth) is empty; nil when the join may go on, having taken its token.
local function joinRefused()
  local c = redis.call('HMGET', kCfg, 'max_waiting', 'join_rate', 'jtokens', 'jat')
  local maxw = tonumber(c[1] or 0) or 0
  if maxw > 0 and redis.call('ZCARD', kQueue) >= maxw then return 'LINEFULL' end
  local rate = tonumber(c[2] or 0) or 0
  if rate > 0 then
    local tokens = rate
    if c[3] then tokens = math.min(rate, tonumber(c[3]) + math.max(0, now - tonumber(c[4])) * rate / 1000) end
    if tokens < 1 then return 'JOINRATE' end
    redis.call('HSET', kCfg, 'jtokens', tostring(tokens - 1), 'jat', now)
  end
  return nil
end
-- finish puts user in a final state and starts their retention.
local function finish(user, st)
  redis.call('HSET', kState, user, st)
  redis.call('ZADD', kDone, now, user)
end

-- finishFrom takes user out of the sorted sets a and b and puts them in
-- the final state st, counted in stats under the same name.
local function finishFrom(user, st, a, b)
  redis.call('ZREM', a, user)
  redis.call('ZREM', b, user)
  redis.call('HINCRBY', kStats, st, 1)
  finish(user, st)
end

-- enqueue puts a new ticket, numbered seq, at place in the queue. Its
-- join time (ms) in joinedat is also the join's generation, which ticket
-- tokens carry: later than the user's previous join's, even within one
-- millisecond, so that no two joins of a user share one.
local function enqueue(user, place, seq)
  redis.call('ZREM', kDone, user)
  redis.call('ZADD', kQueue, place, user)
  redis.call('ZADD', kSeen, now, user)
  redis.call('HSET', kState, user, 'waiting')
  redis.call('HSET', kSeqof, user, seq)
  redis.call('HSET', kJoinedat, user, math.max(now, tonumber(redis.call('HGET', kJoinedat, user) or 0) + 1))
  redis.call('HINCRBY', kStats, 'joined', 1)
end

-- comeBack settles a user away for not polling who acts now: back to
-- their place while their window is open, else they have abandoned it.
-- Returns the new state.
local function comeBack(user)
  local dl = tonumber(redis.call('ZSCORE', kAwayat, user) or 0)
  local place = redis.call('ZSCORE', kAway, user)
  redis.call('ZREM', kAway, user)
  redis.call('ZREM', kAwayat, user)
  if dl > now and place then
    redis.call('ZADD', kQueue, place, user)
    redis.call('HSET', kState, user, 'waiting')
    return 'waiting'
  end
  redis.call('HINCRBY', kStats, 'abandoned', 1)
  finish(user, 'abandoned')
  return 'abandoned'
end

-- sale returns the phase of the room's sale now ('before', 'open',
-- 'between' or 'closed': closed, past closes_at, or past the last
-- window), the capacity and outflow rate in force (cap and rate given for
-- a room without a schedule; a window's own, or outside a window the next
-- one's), whether a join needs an invite, and the first window's start
-- (0 without a schedule). schedule holds "start,end,capacity,rate,invite,
-- interval" per window, ';'-separated, times in ms, end 0 for a window
-- that runs until the next one's start (or for ever, the last).
local function sale(cap, rate)
  local c = redis.call('HMGET', kCfg, 'closed', 'closes_at_ms', 'schedule', 'invite_only')
  local inv = c[4] == '1'
  local closes = tonumber(c[2] or 0) or 0
  local w = {}
  for a, b, wc, wr, wi in string.gmatch(c[3] or '', '(%d+),(%d+),(%d+),(%d+),(%d),%d+') do
    w[#w + 1] = {tonumber(a), tonumber(b), tonumber(wc), tonumber(wr), wi == '1'}
  end
  local first = 0
  if w[1] then first = w[1][1] end
  if c[1] == '1' or (closes > 0 and now >= closes) then return 'closed', cap, rate, inv, first end
  if not w[1] then return 'open', cap, rate, inv, first end
  local phase = 'before'
  for i, x in ipairs(w) do
    local e = x[2]
    if e == 0 and w[i + 1] then e = w[i + 1][1] end
    if now < x[1] then return phase, x[3], x[4], inv or x[5], first end
    if e == 0 or now < e then return 'open', x[3], x[4], inv or x[5], first end
    phase = 'between'
  end
  return 'closed', cap, rate, inv, first
end

-- joinInvite checks a new join against the room's invites, for user with
-- invite (the invite's expiry in ms, or '' for a join without one) while
-- inv says whether the sale takes invited buyers only: an invite whose
-- place was used is refused ('INVITEUSED', counted); a join without one,
-- when one is needed, is refused ('INVITEREQ'). nil: the join may go on.
local function joinInvite(user, invite, inv)
  if invite == '' then
    if inv then return 'INVITEREQ' end
    return nil
  end
  if redis.call('ZSCORE', kInvites, user) then
    redis.call('HINCRBY', kStats, 'invites_refused', 1)
    return 'INVITEUSED'
  end
  return nil
end

-- useInvite records user's invite (expiring at invite ms) as used, and
-- forgets invites expired for over a day.
local function useInvite(user, invite)
  if invite == '' then return end
  redis.call('ZREMRANGEBYSCORE', kInvites, '-inf', now - 86400000)
  redis.call('ZADD', kInvites, tonumber(invite), user)
  redis.call('HINCRBY', kStats, 'invites_used', 1)
end

-- closeWaiting closes the ticket of a user in state st who waits in a
-- closed room. Returns the state after.
local function closeWaiting(user, st)
  if st == 'waiting' and sale(0, 0) == 'closed' then
    finishFrom(user, 'closed', kQueue, kSeen)
    return 'closed'
  end
  return st
end

-- closeAll closes the tickets of up to batch waiting and up to batch away
-- users of a closed room.
local function closeAll(batch)
  local n = 0
  local popped = redis.call('ZPOPMIN', kQueue, batch)
  for i = 1, #popped, 2 do
    redis.call('ZREM', kSeen, popped[i])
    finish(popped[i], 'closed')
    n = n + 1
  end
  local away = redis.call('ZRANGE', kAway, 0, batch - 1)
  for _, u in ipairs(away) do
    redis.call('ZREM', kAway, u)
    redis.call('ZREM', kAwayat, u)
    finish(u, 'closed')
    n = n + 1
  end
  if n > 0 then redis.call('HINCRBY', kStats, 'closed', n) end
end

-- setAside sets aside up to batch waiting users who have not polled for
-- abandon ms (0: never), keeping their place in away for abandon ms more,
-- and gives up for good the places of up to batch users away past their
-- window. Each user set aside is counted in stats as setaside (a
-- departure from the queue, see roomViewLua). Returns whether either
-- step filled its batch.
local function setAside(abandon, batch)
  local full = false
  if abandon > 0 then
    local stale = redis.call('ZRANGEBYSCORE', kSeen, '-inf', now - abandon, 'LIMIT', 0, batch)
    full = #stale >= batch
    for _, u in ipairs(stale) do
      redis.call('ZREM', kSeen, u)
      local place = redis.call('ZSCORE', kQueue, u)
      if place then
        redis.call('ZREM', kQueue, u)
        redis.call('ZADD', kAway, place, u)
        redis.call('ZADD', kAwayat, now + abandon, u)
        redis.call('HSET', kState, u, 'away')
        redis.call('HINCRBY', kStats, 'setaside', 1)
      end
    end
  end
  local over = redis.call('ZRANGEBYSCORE', kAwayat, '-inf', now, 'LIMIT', 0, batch)
  for _, u in ipairs(over) do
    redis.call('ZREM', kAway, u)
    redis.call('ZREM', kAwayat, u)
    finish(u, 'abandoned')
  end
  if #over > 0 then redis.call('HINCRBY', kStats, 'abandoned', #over) end
  return full or #over >= batch
end

-- forget removes up to batch users finished longer than retention ms ago
-- from done and from each hash in hashes. Returns whether it filled the
-- batch.
local function forget(retention, batch, hashes)
  local old = redis.call('ZRANGEBYSCORE', kDone, '-inf', now - retention, 'LIMIT', 0, batch)
  if #old == 0 then return false end
  for _, h in ipairs(hashes) do redis.call('HDEL', h, unpack(old)) end
  redis.call('ZREM', kDone, unpack(old))
  return #old >= batch
end

-- housekeep sets users aside (setAside) and forgets finished ones
-- (forget) at most once every housekeepMS of the server's clock (or a
-- quarter of abandon when shorter), recorded in cfg as hk_at, unless the
-- last round filled a batch (more are due): each reads a sorted set that
-- grows with the crowd or the history by score, which the embedded server
-- does by sorting the whole set.
local function housekeep(abandon, retention, batch, hashes)
  local at = tonumber(redis.call('HGET', kCfg, 'hk_at') or 0)
  local every = housekeepMS
  if abandon > 0 then every = math.min(every, math.floor(abandon / 4)) end
  if now >= at and now - at < every then return end
  local more = setAside(abandon, batch)
  if forget(retention, batch, hashes) then more = true end
  if more then redis.call('HDEL', kCfg, 'hk_at') else redis.call('HSET', kCfg, 'hk_at', now) end
end

-- shuffle puts the pre-queue in random order, once per opening (opens,
-- recorded as opened_for): a Fisher-Yates shuffle driven by a Park-Miller
-- generator seeded by the caller (exact in doubles), the shuffled users
-- taking the pre-queue's own scores in order, so that everyone who joins
-- later stays behind them. With places (a hash), each user's recorded
-- place follows their score. Returns how many were shuffled.
local function shuffle(opens, seed, places)
  local q = redis.call('ZRANGE', kQueue, 0, -1, 'WITHSCORES')
  local users, scores = {}, {}
  for i = 1, #q, 2 do
    users[#users + 1] = q[i]
    scores[#scores + 1] = q[i + 1]
  end
  local x = tonumber(seed)
  for i = #users, 2, -1 do
    x = (x * 16807) % 2147483647
    local j = (x % i) + 1
    users[i], users[j] = users[j], users[i]
  end
  for i = 1, #users do
    redis.call('ZADD', kQueue, scores[i], users[i])
    if places then redis.call('HSET', places, users[i], scores[i]) end
  end
  redis.call('HSET', kCfg, 'opened_for', opens)
  return #users
end
`

// newScript makes a script of src without its comment lines, blank lines
// and indentation: the server parses a script on every EVAL, and an
// embedded server (miniredis) on every EVALSHA too, so the comments, kept
// here for readers, would cost every call. No line of these scripts holds
// code and a comment together, nor a string over several lines.
func newScript(src string) *redis.Script {
	var b strings.Builder
	for line := range strings.SplitSeq(src, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return redis.NewScript(b.String())
}
