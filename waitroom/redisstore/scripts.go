package redisstore

import "github.com/redis/go-redis/v9"

// The Lua scripts. Each runs atomically on the Redis server: no other
// command interleaves with one. Every key a script touches is passed in
// KEYS and shares the room's hash tag, so the scripts run on Redis Cluster
// too. Time comes from the server's TIME, never from the caller.
//
// Common KEYS order: cfg seq queue active state seqof stats joinedat (see
// Keys.scriptKeys).

// nowMS is the Lua snippet that reads the server clock in milliseconds.
const nowMS = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// settleLua defines settle(user): the user's state, after expiring their
// admission if its lease has run out (needs nowMS first). Join, ticket and
// leave settle first, so nobody reads, keeps or releases a slot whose
// lease is over just because no admission pass has reclaimed it yet.
const settleLua = `
-- A lease that has run out is expired now, whether or not an admission
-- pass has reclaimed it yet.
local function settle(user)
  local st = redis.call('HGET', KEYS[5], user)
  if st == 'admitted' then
    local exp = tonumber(redis.call('ZSCORE', KEYS[4], user) or 0)
    if exp <= now then
      redis.call('ZREM', KEYS[4], user)
      redis.call('HSET', KEYS[5], user, 'expired')
      redis.call('HINCRBY', KEYS[7], 'expired', 1)
      return 'expired'
    end
  end
  return st
end
`

// joinScript: KEYS cfg seq queue active state seqof stats joinedat; ARGV
// user. A new ticket records its join time in joinedat.
// Returns {state, rank, seq, lease_expiry_ms, created}.
var joinScript = redis.NewScript(nowMS + settleLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
local user = ARGV[1]
local st = settle(user)
if st == 'waiting' then
  local rank = redis.call('ZRANK', KEYS[3], user)
  return {st, rank or -1, tonumber(redis.call('HGET', KEYS[6], user)), 0, 0}
end
if st == 'admitted' then
  local exp = redis.call('ZSCORE', KEYS[4], user)
  return {st, -1, tonumber(redis.call('HGET', KEYS[6], user)), tonumber(exp or 0), 0}
end
local seq = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[3], seq, user)
redis.call('HSET', KEYS[5], user, 'waiting')
redis.call('HSET', KEYS[6], user, seq)
redis.call('HSET', KEYS[8], user, now)
redis.call('HINCRBY', KEYS[7], 'joined', 1)
return {'waiting', redis.call('ZRANK', KEYS[3], user), seq, 0, 1}
`)

// ticketScript: KEYS cfg seq queue active state seqof stats; ARGV user.
// Returns {state, rank, seq, lease_expiry_ms}.
var ticketScript = redis.NewScript(nowMS + settleLua + `
local user = ARGV[1]
local st = settle(user)
if not st then
  if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
  return redis.error_reply('NOTICKET')
end
local rank = -1
if st == 'waiting' then rank = redis.call('ZRANK', KEYS[3], user) or -1 end
local exp = 0
if st == 'admitted' then exp = tonumber(redis.call('ZSCORE', KEYS[4], user) or 0) end
return {st, rank, tonumber(redis.call('HGET', KEYS[6], user) or 0), exp}
`)

// leaveScript: KEYS cfg seq queue active state seqof stats; ARGV user.
// Returns {state, changed}.
var leaveScript = redis.NewScript(nowMS + settleLua + `
local user = ARGV[1]
local st = settle(user)
if not st then
  if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
  return redis.error_reply('NOTICKET')
end
if st == 'waiting' then
  redis.call('ZREM', KEYS[3], user)
  redis.call('HSET', KEYS[5], user, 'left')
  redis.call('HINCRBY', KEYS[7], 'left', 1)
  return {'left', 1}
end
if st == 'admitted' then
  redis.call('ZREM', KEYS[4], user)
  redis.call('HSET', KEYS[5], user, 'released')
  redis.call('HINCRBY', KEYS[7], 'released', 1)
  return {'released', 1}
end
return {st, 0}
`)

// reclaimScript: KEYS cfg seq queue active state seqof stats.
// Marks every lease that has run out as expired and removes it from the
// room. Returns {expired_count, now_ms}.
var reclaimScript = redis.NewScript(nowMS + `
local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, u in ipairs(gone) do redis.call('HSET', KEYS[5], u, 'expired') end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  redis.call('HINCRBY', KEYS[7], 'expired', #gone)
end
return {#gone, now}
`)

// admitScript is the atomic mode: KEYS cfg seq queue active state seqof
// stats; ARGV max_batch. Reclaims expired leases, counts the room, and
// admits up to capacity minus active users from the head of the queue, all
// in one step: no observer can see the room over capacity, and users enter
// in queue order. Returns {expired_count, now_ms, admitted users...}.
var admitScript = redis.NewScript(nowMS + `
local cfg = redis.call('HMGET', KEYS[1], 'capacity', 'lease_ms')
if not cfg[1] then return redis.error_reply('NOROOM') end
local cap, lease = tonumber(cfg[1]), tonumber(cfg[2])
local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, u in ipairs(gone) do redis.call('HSET', KEYS[5], u, 'expired') end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  redis.call('HINCRBY', KEYS[7], 'expired', #gone)
end
local out = {#gone, now}
local n = math.min(cap - redis.call('ZCARD', KEYS[4]), tonumber(ARGV[1]))
if n > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[3], n)
  for i = 1, #popped, 2 do
    local u = popped[i]
    redis.call('ZADD', KEYS[4], now + lease, u)
    redis.call('HSET', KEYS[5], u, 'admitted')
    out[#out + 1] = u
  end
  if #out > 2 then redis.call('HINCRBY', KEYS[7], 'admitted', #out - 2) end
end
return out
`)

// leaderScript elects the instance that runs naive admission this tick:
// KEYS leader; ARGV instance, ttl_ms. The key is taken when free and
// renewed by its holder, so a live leader keeps leading and a dead one is
// replaced once the key expires. Returns 1 when ARGV[1] leads.
var leaderScript = redis.NewScript(`
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

// statsScript: KEYS cfg seq queue active state seqof stats joinedat.
// Returns {capacity, active, waiting, oldest_wait_ms, counter, value, ...},
// where oldest_wait_ms is how long the head of the queue has waited (-1
// when nobody waits or the head's join time is unknown).
var statsScript = redis.NewScript(nowMS + `
local cap = redis.call('HGET', KEYS[1], 'capacity')
if not cap then return redis.error_reply('NOROOM') end
local oldest = -1
local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if head[1] then
  local j = redis.call('HGET', KEYS[8], head[1])
  if j then oldest = now - tonumber(j) end
end
local out = {tonumber(cap), redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[3]), oldest}
local c = redis.call('HGETALL', KEYS[7])
for i = 1, #c do out[#out + 1] = c[i] end
return out
`)
