package redisstore

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each runs atomically on the Redis server: no other
// command interleaves with one. Every key a script touches is passed in
// KEYS and shares the room's hash tag, so the scripts run on Redis Cluster
// too. Time comes from the server's TIME, never from the caller.
//
// Every script takes the same KEYS (see Keys.scriptKeys):
//
//	1 cfg  2 seq  3 queue  4 active  5 state  6 seqof  7 stats  8 joinedat
//	9 seen  10 away  11 awayat  12 unarrived  13 done  14 bucket
//
// seen scores each waiting user by their last poll (ms); away holds users
// set aside for not polling, scored by their place (seq), and awayat when
// their chance to return ends; unarrived scores admitted users by the end
// of their arrival window; done scores finished users by when they
// finished, for the retention purge; bucket is the outflow limit's token
// bucket.

// nowMS is the Lua snippet that reads the server clock in milliseconds.
const nowMS = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// commonLua defines the helpers every user script shares (needs nowMS
// first): finish, restore and settle.
const commonLua = `
-- finish puts user in a final state and starts their retention.
local function finish(user, st)
  redis.call('HSET', KEYS[5], user, st)
  redis.call('ZADD', KEYS[13], now, user)
end

-- settle(user) returns the user's state after applying what time and the
-- room's settings decided since the last admission pass: a run-out lease
-- or arrival window ends the admission, a closed room closes a waiting
-- ticket, and a user away for not polling comes back to their place (they
-- are acting now) or, past their window, has abandoned it.
local function settle(user)
  local st = redis.call('HGET', KEYS[5], user)
  if st == 'admitted' then
    local exp = tonumber(redis.call('ZSCORE', KEYS[4], user) or 0)
    local due = tonumber(redis.call('ZSCORE', KEYS[12], user) or 0)
    local noshow = due > 0 and due <= now
    if exp <= now or noshow then
      redis.call('ZREM', KEYS[4], user)
      redis.call('ZREM', KEYS[12], user)
      redis.call('HINCRBY', KEYS[7], 'expired', 1)
      if noshow and exp > now then redis.call('HINCRBY', KEYS[7], 'noshow', 1) end
      finish(user, 'expired')
      return 'expired'
    end
  elseif st == 'away' then
    local dl = tonumber(redis.call('ZSCORE', KEYS[11], user) or 0)
    local seq = redis.call('ZSCORE', KEYS[10], user)
    redis.call('ZREM', KEYS[10], user)
    redis.call('ZREM', KEYS[11], user)
    if dl > now and seq then
      redis.call('ZADD', KEYS[3], seq, user)
      redis.call('HSET', KEYS[5], user, 'waiting')
      st = 'waiting'
    else
      redis.call('HINCRBY', KEYS[7], 'abandoned', 1)
      finish(user, 'abandoned')
      return 'abandoned'
    end
  end
  if st == 'waiting' and redis.call('HGET', KEYS[1], 'closed') == '1' then
    redis.call('ZREM', KEYS[3], user)
    redis.call('ZREM', KEYS[9], user)
    redis.call('HINCRBY', KEYS[7], 'closed', 1)
    finish(user, 'closed')
    return 'closed'
  end
  return st
end

-- view returns {state, rank, seq, lease_expiry_ms, created, message}.
local function view(user, st, created)
  local rank, exp, msg = -1, 0, ''
  if st == 'waiting' then rank = redis.call('ZRANK', KEYS[3], user) or -1 end
  if st == 'admitted' then exp = tonumber(redis.call('ZSCORE', KEYS[4], user) or 0) end
  if st == 'closed' then msg = redis.call('HGET', KEYS[1], 'closed_message') or '' end
  return {st, rank, tonumber(redis.call('HGET', KEYS[6], user) or 0), exp, created, msg}
end
`

// joinScript: ARGV user. A new ticket records its join time in joinedat
// and its first poll in seen. Returns view.
var joinScript = newScript(nowMS + commonLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
local user = ARGV[1]
local st = settle(user)
if st == 'waiting' then
  redis.call('ZADD', KEYS[9], now, user)
  return view(user, st, 0)
end
if st == 'admitted' then return view(user, st, 0) end
if redis.call('HGET', KEYS[1], 'closed') == '1' then
  if st then return view(user, st, 0) end
  return {'closed', -1, 0, 0, 0, redis.call('HGET', KEYS[1], 'closed_message') or ''}
end
local seq = redis.call('INCR', KEYS[2])
redis.call('ZREM', KEYS[13], user)
redis.call('ZADD', KEYS[3], seq, user)
redis.call('ZADD', KEYS[9], now, user)
redis.call('HSET', KEYS[5], user, 'waiting')
redis.call('HSET', KEYS[6], user, seq)
redis.call('HSET', KEYS[8], user, now)
redis.call('HINCRBY', KEYS[7], 'joined', 1)
return view(user, 'waiting', 1)
`)

// ticketScript: ARGV user, arrive (1: an admitted user reading counts as
// arrived). Reading is polling: a waiting user's last poll is recorded.
// Returns view.
var ticketScript = newScript(nowMS + commonLua + `
local user = ARGV[1]
local st = settle(user)
if not st then
  if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
  return redis.error_reply('NOTICKET')
end
if st == 'waiting' then redis.call('ZADD', KEYS[9], now, user) end
if st == 'admitted' and ARGV[2] == '1' then redis.call('ZREM', KEYS[12], user) end
return view(user, st, 0)
`)

// leaveScript: ARGV user. Returns {state, changed}.
var leaveScript = newScript(nowMS + commonLua + `
local user = ARGV[1]
local st = settle(user)
if not st then
  if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
  return redis.error_reply('NOTICKET')
end
if st == 'waiting' then
  redis.call('ZREM', KEYS[3], user)
  redis.call('ZREM', KEYS[9], user)
  redis.call('HINCRBY', KEYS[7], 'left', 1)
  finish(user, 'left')
  return {'left', 1}
end
if st == 'admitted' then
  redis.call('ZREM', KEYS[4], user)
  redis.call('ZREM', KEYS[12], user)
  redis.call('HINCRBY', KEYS[7], 'released', 1)
  finish(user, 'released')
  return {'released', 1}
end
return {st, 0}
`)

// updateScript sets configuration fields of an existing room: KEYS cfg;
// ARGV field, value, .... Returns 1, or the NOROOM error.
var updateScript = newScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`)

// reclaimScript: marks every lease that has run out as expired and
// removes it from the room, for the lab's multi-step modes. Returns
// {expired_count, now_ms}.
var reclaimScript = newScript(nowMS + commonLua + `
local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, u in ipairs(gone) do
  redis.call('ZREM', KEYS[12], u)
  finish(u, 'expired')
end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  redis.call('HINCRBY', KEYS[7], 'expired', #gone)
end
return {#gone, now}
`)

// admitScript is the atomic admission pass: ARGV max_batch, seed (a
// random integer in [1, 2^31-2] for the pre-queue shuffle). In one step it
//
//  1. reclaims run-out leases, and admissions whose user has not arrived
//     within the arrival window (no-shows);
//  2. in a closed room, closes the tickets of up to max_batch waiting (or
//     away) users;
//  3. sets aside up to max_batch waiting users who have not polled for
//     abandon_ms (their place kept in away), and gives up for good the
//     places of those away past their window;
//  4. forgets up to max_batch users finished for longer than the retention;
//  5. unless the room is paused, closed or not yet open: shuffles the
//     pre-queue at the first pass after opening, then admits up to the free
//     capacity, max_batch and the outflow bucket's whole tokens, from the
//     head of the queue.
//
// No observer can see the room over capacity, and users enter in queue
// order. Returns {expired_count, now_ms, shuffled, admitted users...}.
var admitScript = newScript(nowMS + commonLua + `
local c = redis.call('HMGET', KEYS[1], 'capacity', 'lease_ms', 'rate_per_min', 'opens_at_ms', 'paused',
  'closed', 'abandon_ms', 'arrival_ms', 'retention_ms', 'opened_for')
if not c[1] then return redis.error_reply('NOROOM') end
local cap, lease = tonumber(c[1]), tonumber(c[2])
local rate, opens = tonumber(c[3] or 0), tonumber(c[4] or 0)
local paused, closed = c[5] == '1', c[6] == '1'
local abandon, arrival = tonumber(c[7] or 0), tonumber(c[8] or 0)
local retention = tonumber(c[9] or 86400000)
local batch = tonumber(ARGV[1])

-- 1. Leases run out, and no-shows.
local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, u in ipairs(gone) do
  redis.call('ZREM', KEYS[12], u)
  finish(u, 'expired')
end
if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now) end
local expired = #gone
local late = redis.call('ZRANGEBYSCORE', KEYS[12], '-inf', now, 'LIMIT', 0, batch)
local noshows = 0
for _, u in ipairs(late) do
  redis.call('ZREM', KEYS[12], u)
  if redis.call('ZREM', KEYS[4], u) == 1 then
    finish(u, 'expired')
    noshows = noshows + 1
  end
end
expired = expired + noshows
if expired > 0 then redis.call('HINCRBY', KEYS[7], 'expired', expired) end
if noshows > 0 then redis.call('HINCRBY', KEYS[7], 'noshow', noshows) end

-- 2. A closed room tells its waiting users.
if closed then
  local n = 0
  local popped = redis.call('ZPOPMIN', KEYS[3], batch)
  for i = 1, #popped, 2 do
    redis.call('ZREM', KEYS[9], popped[i])
    finish(popped[i], 'closed')
    n = n + 1
  end
  local away = redis.call('ZRANGE', KEYS[10], 0, batch - 1)
  for _, u in ipairs(away) do
    redis.call('ZREM', KEYS[10], u)
    redis.call('ZREM', KEYS[11], u)
    finish(u, 'closed')
    n = n + 1
  end
  if n > 0 then redis.call('HINCRBY', KEYS[7], 'closed', n) end
end

-- 3. Users who stopped polling lose their place, kept aside for a while.
if abandon > 0 then
  local stale = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now - abandon, 'LIMIT', 0, batch)
  for _, u in ipairs(stale) do
    redis.call('ZREM', KEYS[9], u)
    local seq = redis.call('ZSCORE', KEYS[3], u)
    if seq then
      redis.call('ZREM', KEYS[3], u)
      redis.call('ZADD', KEYS[10], seq, u)
      redis.call('ZADD', KEYS[11], now + abandon, u)
      redis.call('HSET', KEYS[5], u, 'away')
    end
  end
end
local over = redis.call('ZRANGEBYSCORE', KEYS[11], '-inf', now, 'LIMIT', 0, batch)
for _, u in ipairs(over) do
  redis.call('ZREM', KEYS[10], u)
  redis.call('ZREM', KEYS[11], u)
  finish(u, 'abandoned')
end
if #over > 0 then redis.call('HINCRBY', KEYS[7], 'abandoned', #over) end

-- 4. Retention: forget users finished long enough ago.
local old = redis.call('ZRANGEBYSCORE', KEYS[13], '-inf', now - retention, 'LIMIT', 0, batch)
if #old > 0 then
  redis.call('HDEL', KEYS[5], unpack(old))
  redis.call('HDEL', KEYS[6], unpack(old))
  redis.call('HDEL', KEYS[8], unpack(old))
  redis.call('ZREM', KEYS[13], unpack(old))
end

local out = {expired, now, 0}
if paused or closed or (opens > 0 and now < opens) then return out end

-- 5a. The pre-queue, once, in random order: a Fisher-Yates shuffle driven
-- by a Park-Miller generator seeded by the caller (exact in doubles), the
-- shuffled users taking the pre-queue's own scores in order, so that
-- everyone who joins later stays behind them.
if opens > 0 and tonumber(c[10] or 0) ~= opens then
  local q = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  local users, scores = {}, {}
  for i = 1, #q, 2 do
    users[#users + 1] = q[i]
    scores[#scores + 1] = q[i + 1]
  end
  local x = tonumber(ARGV[2])
  for i = #users, 2, -1 do
    x = (x * 16807) % 2147483647
    local j = (x % i) + 1
    users[i], users[j] = users[j], users[i]
  end
  for i = 1, #users do
    redis.call('ZADD', KEYS[3], scores[i], users[i])
    redis.call('HSET', KEYS[6], users[i], scores[i])
  end
  redis.call('HSET', KEYS[1], 'opened_for', opens)
  out[3] = #users
end

-- 5b. Admission, within capacity, batch and the outflow bucket.
local n = math.min(cap - redis.call('ZCARD', KEYS[4]), batch)
local tokens, burst
if rate > 0 and n > 0 then
  burst = math.max(1, rate / 60)
  local b = redis.call('HMGET', KEYS[14], 'tokens', 'at')
  tokens = burst
  if b[1] then tokens = math.min(burst, tonumber(b[1]) + (now - tonumber(b[2])) * rate / 60000) end
  n = math.min(n, math.floor(tokens))
end
if n > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[3], n)
  for i = 1, #popped, 2 do
    local u = popped[i]
    redis.call('ZADD', KEYS[4], now + lease, u)
    redis.call('HSET', KEYS[5], u, 'admitted')
    redis.call('ZREM', KEYS[9], u)
    if arrival > 0 then redis.call('ZADD', KEYS[12], now + arrival, u) end
    out[#out + 1] = u
  end
  if #out > 3 then redis.call('HINCRBY', KEYS[7], 'admitted', #out - 3) end
end
if tokens then
  redis.call('HSET', KEYS[14], 'tokens', tostring(tokens - (#out - 3)), 'at', now)
end
return out
`)

// leaderScript elects the instance that runs naive admission this tick:
// KEYS leader; ARGV instance, ttl_ms. The key is taken when free and
// renewed by its holder, so a live leader keeps leading and a dead one is
// replaced once the key expires. Returns 1 when ARGV[1] leads.
var leaderScript = newScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// statsScript returns {capacity, active, waiting, oldest_wait_ms, away,
// counter, value, ...}, where oldest_wait_ms is how long the head of the
// queue has waited (-1 when nobody waits or the head's join time is
// unknown).
var statsScript = newScript(nowMS + `
local cap = redis.call('HGET', KEYS[1], 'capacity')
if not cap then return redis.error_reply('NOROOM') end
local oldest = -1
local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if head[1] then
  local j = redis.call('HGET', KEYS[8], head[1])
  if j then oldest = now - tonumber(j) end
end
local out = {tonumber(cap), redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[3]), oldest, redis.call('ZCARD', KEYS[10])}
local c = redis.call('HGETALL', KEYS[7])
for i = 1, #c do out[#out + 1] = c[i] end
return out
`)

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
