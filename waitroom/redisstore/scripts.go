package redisstore

// The scripts of a one-queue room (see lua.go for how they are put
// together). Every one takes the room's KEYS (roomKeysLua).

// roomHelpersLua defines what a room's scripts share beyond queueLua:
// settle, view, reclaim and bucketTokens.
const roomHelpersLua = `
-- settle(user) returns the user's state after applying what time and the
-- room's settings decided since the last admission pass: a run-out lease
-- or arrival window ends the admission, a closed room closes a waiting
-- ticket, and a user away for not polling comes back to their place (they
-- are acting now) or, past their window, has abandoned it.
local function settle(user)
  local st = redis.call('HGET', kState, user)
  if st == 'admitted' then
    local exp = tonumber(redis.call('ZSCORE', kActive, user) or 0)
    local due = tonumber(redis.call('ZSCORE', kUnarrived, user) or 0)
    local noshow = due > 0 and due <= now
    if exp <= now or noshow then
      finishFrom(user, 'expired', kActive, kUnarrived)
      if noshow and exp > now then redis.call('HINCRBY', kStats, 'noshow', 1) end
      return 'expired'
    end
  elseif st == 'away' then
    st = comeBack(user)
  end
  return closeWaiting(user, st)
end

-- view returns {state, rank, seq, lease_expiry_ms, created, message,
-- generation[, admitted, departed]}: the generation is the join's time in
-- joinedat (0 when unknown: a sharded room's shard knows it); a waiting
-- user's view adds the room's marks (see roomViewScript). A caller that
-- knows a waiting user's rank passes it as known; otherwise ZRANK finds it
-- (the embedded server sorts the whole queue for that).
local function view(user, st, created, known)
  local rank, exp, msg = -1, 0, ''
  if st == 'waiting' then rank = known or redis.call('ZRANK', kQueue, user) or -1 end
  if st == 'admitted' then exp = tonumber(redis.call('ZSCORE', kActive, user) or 0) end
  if st == 'closed' then msg = redis.call('HGET', kCfg, 'closed_message') or '' end
  local out = {st, rank, tonumber(redis.call('HGET', kSeqof, user) or 0), exp, created, msg,
    tonumber(redis.call('HGET', kJoinedat, user) or 0)}
  if rank >= 0 then
    local m = redis.call('HMGET', kStats, 'admitted', 'left', 'closed', 'setaside')
    out[8] = tonumber(m[1] or 0)
    out[9] = tonumber(m[2] or 0) + tonumber(m[3] or 0) + tonumber(m[4] or 0)
  end
  return out
end

-- reclaim ends every run-out lease and, when batch > 0, up to batch
-- admissions whose user has not arrived within the arrival window
-- (no-shows). Returns how many admissions ended.
local function reclaim(batch)
  local gone = redis.call('ZRANGEBYSCORE', kActive, '-inf', now)
  for _, u in ipairs(gone) do
    redis.call('ZREM', kUnarrived, u)
    finish(u, 'expired')
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', kActive, '-inf', now) end
  local noshows = 0
  if batch > 0 then
    local late = redis.call('ZRANGEBYSCORE', kUnarrived, '-inf', now, 'LIMIT', 0, batch)
    for _, u in ipairs(late) do
      redis.call('ZREM', kUnarrived, u)
      if redis.call('ZREM', kActive, u) == 1 then
        finish(u, 'expired')
        noshows = noshows + 1
      end
    end
  end
  local expired = #gone + noshows
  if expired > 0 then redis.call('HINCRBY', kStats, 'expired', expired) end
  if noshows > 0 then redis.call('HINCRBY', kStats, 'noshow', noshows) end
  return expired
end

-- bucketTokens returns the outflow bucket's tokens now, for rate
-- admissions a minute (> 0).
local function bucketTokens(rate)
  local burst = math.max(1, rate / 60)
  local b = redis.call('HMGET', kBucket, 'tokens', 'at')
  if not b[1] then return burst end
  return math.min(burst, tonumber(b[1]) + (now - tonumber(b[2])) * rate / 60000)
end
`

// roomLua is the start of every room script that needs the clock and
// the helpers.
const roomLua = nowMS + roomKeysLua + queueLua + roomHelpersLua

// joinScript: ARGV user, invite (the invite's expiry in ms for an invited
// join, else empty); KEYS the room's, then invites. A new ticket records its
// join time in joinedat and its first poll in seen. Returns view.
var joinScript = newScript(roomLua + `
if redis.call('EXISTS', kCfg) == 0 then return redis.error_reply('NOROOM') end
local user = ARGV[1]
local st = settle(user)
if st == 'waiting' then
  redis.call('ZADD', kSeen, now, user)
  return view(user, st, 0)
end
if st == 'admitted' then return view(user, st, 0) end
local phase, _, _, inv = sale(0, 0)
if phase == 'closed' then
  if st then return view(user, st, 0) end
  return {'closed', -1, 0, 0, 0, redis.call('HGET', kCfg, 'closed_message') or ''}
end
local invite = ARGV[2] or ''
local refused = joinInvite(user, invite, inv) or joinRefused()
if refused then return redis.error_reply(refused) end
local seq = redis.call('INCR', kSeq)
enqueue(user, seq, seq)
useInvite(user, invite)
-- A new ticket's place is the room's newest number, above every place in
-- the queue (a user who comes back returns to an older one): it is last.
return view(user, 'waiting', 1, redis.call('ZCARD', kQueue) - 1)
`)

// ticketScript: ARGV user, arrive (1: an admitted user reading counts as
// arrived). Reading is polling: a waiting user's last poll is recorded.
// Returns view.
var ticketScript = newScript(roomLua + `
local user = ARGV[1]
local st = settle(user)
if not st then
  if redis.call('EXISTS', kCfg) == 0 then return redis.error_reply('NOROOM') end
  return redis.error_reply('NOTICKET')
end
if st == 'waiting' then redis.call('ZADD', kSeen, now, user) end
if st == 'admitted' and ARGV[2] == '1' then redis.call('ZREM', kUnarrived, user) end
return view(user, st, 0)
`)

// leaveScript: ARGV user. Returns {state, changed}.
var leaveScript = newScript(roomLua + `
local user = ARGV[1]
local st = settle(user)
if not st then
  if redis.call('EXISTS', kCfg) == 0 then return redis.error_reply('NOROOM') end
  return redis.error_reply('NOTICKET')
end
if st == 'waiting' then
  finishFrom(user, 'left', kQueue, kSeen)
  return {'left', 1}
end
if st == 'admitted' then
  finishFrom(user, 'released', kActive, kUnarrived)
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
var reclaimScript = newScript(roomLua + `
return {reclaim(0), now}
`)

// admitScript is the atomic admission pass: KEYS the room's and its log;
// ARGV max_batch, seed (a fresh one, for an opening that has none: see
// fairLua's draw), room. In one step it
//
//  1. reclaims run-out leases, and admissions whose user has not arrived
//     within the arrival window (no-shows);
//  2. in a closed room, closes the tickets of up to max_batch waiting (or
//     away) users;
//  3. sets aside up to max_batch waiting users who have not polled for
//     abandon_ms (their place kept in away), and gives up for good the
//     places of those away past their window;
//  4. forgets up to max_batch users finished for longer than the retention
//     (3 and 4 at most once every HousekeepInterval while no batch fills);
//  5. unless the room is paused, closed (or past closes_at, or past its
//     last window), not yet open or between two windows of its schedule:
//     draws the pre-queue's order at the first pass after opening (the
//     first window's start, with a schedule), then admits up to the free
//     capacity, max_batch and the outflow bucket's whole tokens, from the
//     head of the queue, appending each admission to the log. With a
//     schedule the window in force sets the capacity and the outflow; a
//     fresh adaptive outflow lowers it further.
//
// No observer can see the room over capacity, and users enter in queue
// order. Returns {expired_count, now_ms, shuffled, admitted users...}.
var admitScript = newScript(roomLua + fairLua + `
local c = redis.call('HMGET', kCfg, 'capacity', 'lease_ms', 'rate_per_min', 'opens_at_ms', 'paused',
  'closed', 'abandon_ms', 'arrival_ms', 'retention_ms', 'opened_for')
if not c[1] then return redis.error_reply('NOROOM') end
local cap, lease = tonumber(c[1]), tonumber(c[2])
local rate, opens = tonumber(c[3] or 0), tonumber(c[4] or 0)
local paused, closed = c[5] == '1', c[6] == '1'
local abandon, arrival = tonumber(c[7] or 0), tonumber(c[8] or 0)
local retention = tonumber(c[9] or 86400000)
local batch = tonumber(ARGV[1])
local phase, wcap, wrate, _, first = sale(cap, rate)
closed = phase == 'closed'
if opens == 0 then opens = first end

-- 1. Leases run out, and no-shows.
local expired = reclaim(batch)
-- 2. A closed room tells its waiting users.
if closed then closeAll(batch) end
-- 3. Users who stopped polling lose their place, kept aside for a while,
-- and 4. retention: forget users finished long enough ago (once a second).
housekeep(abandon, retention, batch, {kState, kSeqof, kJoinedat})

local out = {expired, now, 0}
if paused or closed or phase ~= 'open' or (opens > 0 and now < opens) then return out end
cap, rate = wcap, wrate
-- The adaptive outflow (outflow.go), below the limit while it is fresh.
local adapt = redis.call('HMGET', kCfg, 'outflow_now', 'outflow_at')
if rate > 0 and adapt[1] and now - tonumber(adapt[2]) <= 3000 then rate = math.min(rate, tonumber(adapt[1])) end

-- 5a. The pre-queue, once, in the order its seed draws.
if opens > 0 and tonumber(c[10] or 0) ~= opens then out[3] = draw(opens, ARGV[2]) end

-- 5b. Admission, within capacity, batch and the outflow bucket.
local n = math.min(cap - redis.call('ZCARD', kActive), batch)
local tokens
if rate > 0 and n > 0 then
  tokens = bucketTokens(rate)
  n = math.min(n, math.floor(tokens))
end
if n > 0 then
  local popped = redis.call('ZPOPMIN', kQueue, n)
  for i = 1, #popped, 2 do
    local u = popped[i]
    redis.call('ZADD', kActive, now + lease, u)
    redis.call('HSET', kState, u, 'admitted')
    redis.call('ZREM', kSeen, u)
    if arrival > 0 then redis.call('ZADD', kUnarrived, now + arrival, u) end
    out[#out + 1] = u
  end
  logAdmitted(popped, cap, abandon)
  if #out > 3 then redis.call('HINCRBY', kStats, 'admitted', #out - 3) end
end
if tokens then
  redis.call('HSET', kBucket, 'tokens', tostring(tokens - (#out - 3)), 'at', now)
end
return out
`)

// statsScript (KEYS the room's, then invites) returns {capacity, active,
// waiting, oldest_wait_ms, away, counter, value, ..., 'invites_held', n}, where oldest_wait_ms is how long the head of the
// queue has waited (-1 when nobody waits or the head's join time is
// unknown).
var statsScript = newScript(nowMS + roomKeysLua + `
local kInvites = KEYS[#KEYS]
local cap = redis.call('HGET', kCfg, 'capacity')
if not cap then return redis.error_reply('NOROOM') end
local oldest = -1
local head = redis.call('ZRANGE', kQueue, 0, 0)
if head[1] then
  local j = redis.call('HGET', kJoinedat, head[1])
  if j then oldest = now - tonumber(j) end
end
local out = {tonumber(cap), redis.call('ZCARD', kActive), redis.call('ZCARD', kQueue), oldest, redis.call('ZCARD', kAway)}
local c = redis.call('HGETALL', kStats)
for i = 1, #c do out[#out + 1] = c[i] end
out[#out + 1] = 'invites_held'
out[#out + 1] = redis.call('ZCARD', kInvites)
return out
`)

// roomViewLua reads a room's view (waitroom.RoomView) from its
// configuration and counters: {now_ms, phase, paused, waiting, admitted,
// departed, order, ordered}. departed counts users who left the queue
// other than by admission (left, closed, set aside). order is the opening
// whose draw fixes the queue's order (opens_at, else the first window's
// start; 0 for none), and ordered 1 when that draw is done.
const roomViewLua = `
local c = redis.call('HMGET', kCfg, 'capacity', 'paused', 'opens_at_ms', 'opened_for')
if not c[1] then return redis.error_reply('NOROOM') end
local phase, _, _, _, first = sale(0, 0)
local order = tonumber(c[3] or 0) or 0
if order == 0 then order = first end
local m = redis.call('HMGET', kStats, 'admitted', 'left', 'closed', 'setaside')
local ordered = 0
if order == 0 or tonumber(c[4] or 0) == order then ordered = 1 end
return {now, phase, c[2] == '1' and 1 or 0, redis.call('ZCARD', kQueue), tonumber(m[1] or 0),
  tonumber(m[2] or 0) + tonumber(m[3] or 0) + tonumber(m[4] or 0), order, ordered}
`

// roomViewScript: KEYS the room's. Returns roomViewLua's answer.
var roomViewScript = newScript(nowMS + roomKeysLua + queueLua + roomViewLua)

// touchLua records the polls of ARGV users answered outside the store:
// one HMGET of their states, a user away comes back (comeBack), and one
// ZADD of seen for every waiting one. Returns the users neither waiting
// nor away.
const touchLua = `
local st = redis.call('HMGET', kState, unpack(ARGV))
local seen, gone = {}, {}
for i, u in ipairs(ARGV) do
  local s = st[i]
  if s == 'away' then s = comeBack(u) end
  if s == 'waiting' then
    seen[#seen + 1] = now
    seen[#seen + 1] = u
  else
    gone[#gone + 1] = u
  end
end
if #seen > 0 then redis.call('ZADD', kSeen, unpack(seen)) end
return gone
`

// touchScript: KEYS the room's; ARGV users. Returns touchLua's answer.
var touchScript = newScript(roomLua + touchLua)
