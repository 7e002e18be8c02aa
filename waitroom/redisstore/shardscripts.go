package redisstore

// The scripts of a sharded room's queue shards (see shard.go), and of the
// sharded room itself (see lua.go for how they are put together). Every
// shard script takes the shard's keys (shardKeysLua).
//
// cfg is the shard's copy of the room's settings it needs (closed,
// closed_message, abandon_ms, retention_ms) plus its own clock mark
// (last: the last stamp it gave) and opened_for. queue scores each waiting
// user by their order stamp (µs), and away keeps it for users set aside.
// state holds what happens in the shard (waiting, away, left, closed,
// abandoned) and 'admitted' for a user the shard let go to the room, whose
// admission's seq is in admseq: from then on the room's keys know the
// user's state.

// shardLua is the start of the shard scripts that need the clock and the
// helpers: queueLua, settle and view.
const shardLua = nowUS + shardKeysLua + queueLua + `
-- settle: a user away for not polling comes back to their place (they act
-- now) or, past their window, has abandoned it; a closed room closes a
-- waiting ticket.
local function settle(user)
  local st = redis.call('HGET', kState, user)
  if st == 'away' then st = comeBack(user) end
  return closeWaiting(user, st)
end

-- view returns {state, rank in this shard, seq, 0, created, message, stamp,
-- generation (the join's time in joinedat)}.
local function view(user, st, created)
  local rank, msg, stamp = -1, '', 0
  if st == 'waiting' then
    rank = redis.call('ZRANK', kQueue, user) or -1
    stamp = tonumber(redis.call('ZSCORE', kQueue, user) or 0)
  end
  if st == 'closed' then msg = redis.call('HGET', kCfg, 'closed_message') or '' end
  return {st, rank, tonumber(redis.call('HGET', kSeqof, user) or 0), 0, created, msg, stamp,
    tonumber(redis.call('HGET', kJoinedat, user) or 0)}
end

-- unknown is the answer about a user the shard let go to the room (or
-- never saw): {'unknown', generation of the join it let go, or 0}.
local function unknown(user)
  return {'unknown', tonumber(redis.call('HGET', kJoinedat, user) or 0)}
end
`

// shardJoinScript: ARGV user, hint (the caller's latest stamp seen, µs),
// ended (empty: not asked; n: the room says admission n of the user has
// ended; 0: the room has forgotten the user). A user the shard does not know, or whose ticket here is
// finished, joins with a new order stamp max(TIME µs, last + 1, hint + 1):
// unique and rising in the shard, and later than every stamp the caller
// has seen. A user the shard let go to the room joins only when ended
// names that admission; else the answer is {'unknown'}: the caller asks
// the room, then again. ARGV[4] is the invite's expiry in ms for an
// invited join, else empty; KEYS the shard's, then its invites. Returns view.
var shardJoinScript = newScript(shardLua + `
if redis.call('EXISTS', kCfg) == 0 then return redis.error_reply('NOROOM') end
local user = ARGV[1]
local st = settle(user)
if st == 'waiting' then
  redis.call('ZADD', kSeen, now, user)
  return view(user, st, 0)
end
local phase, _, _, inv = sale(0, 0)
if phase == 'closed' then
  if st then return view(user, st, 0) end
  return {'closed', -1, 0, 0, 0, redis.call('HGET', kCfg, 'closed_message') or '', 0}
end
if st == 'admitted' and ARGV[3] ~= '0' and redis.call('HGET', kAdmseq, user) ~= ARGV[3] then return unknown(user) end
local invite = ARGV[4] or ''
local refused = joinInvite(user, invite, inv) or joinRefused()
if refused then return redis.error_reply(refused) end
local stamp = math.max(nowus, tonumber(redis.call('HGET', kCfg, 'last') or 0) + 1, tonumber(ARGV[2]) + 1)
redis.call('HSET', kCfg, 'last', stamp)
enqueue(user, stamp, redis.call('INCR', kSeq))
useInvite(user, invite)
return view(user, 'waiting', 1)
`)

// shardTicketScript: ARGV user. Reading is polling. A user the shard does
// not know is answered {'unknown'} (admitted, or never joined: the room
// knows). Returns view.
var shardTicketScript = newScript(shardLua + `
local user = ARGV[1]
local st = settle(user)
if not st or st == 'admitted' then
  if redis.call('EXISTS', kCfg) == 0 then return redis.error_reply('NOROOM') end
  return unknown(user)
end
if st == 'waiting' then redis.call('ZADD', kSeen, now, user) end
return view(user, st, 0)
`)

// shardLeaveScript: ARGV user. Returns {state, changed}, or {'unknown'}
// for a user the shard does not know.
var shardLeaveScript = newScript(shardLua + `
local user = ARGV[1]
local st = settle(user)
if not st or st == 'admitted' then
  if redis.call('EXISTS', kCfg) == 0 then return redis.error_reply('NOROOM') end
  return unknown(user)
end
if st == 'waiting' then
  finishFrom(user, 'left', kQueue, kSeen)
  return {'left', 1}
end
return {st, 0}
`)

// shardPeekScript is a shard's part of an admission pass: ARGV heads,
// max_batch, shuffle (the room's opens_at in ms when the pre-queue may be
// shuffled now, else 0), seed, hint (the admitter's latest stamp seen). It
// closes waiting users of a closed room, sets aside users who stopped
// polling and abandons those away too long, forgets users finished longer
// than the retention ago (each step at most max_batch users; the last two
// at most once every HousekeepInterval, see housekeep), shuffles the
// pre-queue once, and raises the shard's clock mark to at least now and
// the hint: every later join here is stamped after the mark. Returns
// {shuffled, mark, user, stamp, ...} for up to heads users at the head of
// the queue.
var shardPeekScript = newScript(shardLua + `
local c = redis.call('HMGET', kCfg, 'closed', 'abandon_ms', 'retention_ms', 'opened_for')
if not c[3] then return redis.error_reply('NOROOM') end
local closed, abandon, retention = sale(0, 0) == 'closed', tonumber(c[2] or 0), tonumber(c[3])
local heads, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
if closed then closeAll(batch) end
housekeep(abandon, retention, batch, {kState, kAdmseq, kSeqof, kJoinedat})
local out = {0}
local opens = ARGV[3]
if opens ~= '0' and c[4] ~= opens then out[1] = shuffle(opens, ARGV[4], nil) end
local last = tonumber(redis.call('HGET', kCfg, 'last') or 0)
local mark = math.max(last, nowus, tonumber(ARGV[5]))
if mark > last then redis.call('HSET', kCfg, 'last', mark) end
out[2] = mark
if heads > 0 then
  local h = redis.call('ZRANGE', kQueue, 0, heads - 1, 'WITHSCORES')
  for i = 1, #h do out[#out + 1] = h[i] end
end
return out
`)

// shardFinalizeScript lets admitted users go to the room: ARGV user,
// stamp, seq, .... A user still waiting with that stamp leaves the queue
// and is marked admitted with the admission's seq (its join time stays in
// joinedat: the join's generation), kept for the lease and
// the retention after (a join then asks the room); a user marked so already, or
// forgotten since, was let go by an earlier call. Returns, per user, 1 when
// the admission stands, or 0 when the user left, closed, was set aside or
// joined again meanwhile: the room must undo that admission.
var shardFinalizeScript = newScript(nowUS + shardKeysLua + `
local lease = tonumber(redis.call('HGET', kCfg, 'lease_ms') or 0)
local out = {}
for i = 1, #ARGV, 3 do
  local u, stamp, seq = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local st = redis.call('HGET', kState, u)
  local ok = 0
  if not st or (st == 'admitted' and redis.call('HGET', kAdmseq, u) == seq) then
    ok = 1
  elseif st == 'waiting' and tonumber(redis.call('ZSCORE', kQueue, u) or -1) == stamp then
    redis.call('ZREM', kQueue, u)
    redis.call('ZREM', kSeen, u)
    redis.call('HSET', kState, u, 'admitted')
    redis.call('HSET', kAdmseq, u, seq)
    redis.call('ZADD', kDone, now + lease, u)
    ok = 1
  end
  out[#out + 1] = ok
end
return out
`)

// shardStatsScript (KEYS the shard's, then invites) returns {waiting,
// away, oldest_join_ms (-1: none), counter, value, ..., 'invites_held', n}.
var shardStatsScript = newScript(shardKeysLua + `
local kInvites = KEYS[#KEYS]
if redis.call('EXISTS', kCfg) == 0 then return redis.error_reply('NOROOM') end
local oldest = -1
local head = redis.call('ZRANGE', kQueue, 0, 0)
if head[1] then oldest = tonumber(redis.call('HGET', kJoinedat, head[1]) or -1) end
local out = {redis.call('ZCARD', kQueue), redis.call('ZCARD', kAway), oldest}
local c = redis.call('HGETALL', kStats)
for i = 1, #c do out[#out + 1] = c[i] end
out[#out + 1] = 'invites_held'
out[#out + 1] = redis.call('ZCARD', kInvites)
return out
`)

// shardSampleScript returns {count, stamp, ...}: every stamp of the
// shard's queue when it holds at most ARGV[1] users, else ARGV[1] stamps
// at evenly spaced ranks (the first and the last included), for the
// positions of other shards' users.
var shardSampleScript = newScript(shardKeysLua + `
local n = redis.call('ZCARD', kQueue)
local want = tonumber(ARGV[1])
local out = {n}
if n <= want then
  local all = redis.call('ZRANGE', kQueue, 0, -1, 'WITHSCORES')
  for i = 2, #all, 2 do out[#out + 1] = all[i] end
  return out
end
for i = 0, want - 1 do
  local r = math.floor(i * (n - 1) / (want - 1))
  local z = redis.call('ZRANGE', kQueue, r, r, 'WITHSCORES')
  out[#out + 1] = z[2]
end
return out
`)

// shardedRoomLua is the start of a sharded room's own scripts that need
// the clock and the helpers (shardedRoomKeysLua names their KEYS).
const shardedRoomLua = nowMS + shardedRoomKeysLua + queueLua + roomHelpersLua

// roomPrepScript opens a sharded room's admission pass: ARGV max_batch,
// stale_ms. It forgets users finished longer than the retention ago, as
// the one-queue pass does, and counts the free places (run-out leases
// count as free: the admit script reclaims them). Returns {0, now_ms,
// admit (0 or 1), free, shuffle (opens_at ms
// when the pre-queue may be shuffled now, else 0), closed, stale moving
// user, info, ...}.
var roomPrepScript = newScript(shardedRoomLua + `
local c = redis.call('HMGET', kCfg, 'capacity', 'lease_ms', 'rate_per_min', 'opens_at_ms', 'paused',
  'closed', 'retention_ms', 'opened_for')
if not c[1] then return redis.error_reply('NOROOM') end
local cap = tonumber(c[1])
local rate, opens = tonumber(c[3] or 0), tonumber(c[4] or 0)
local paused, closed = c[5] == '1', c[6] == '1'
local retention = tonumber(c[7] or 86400000)
local batch = tonumber(ARGV[1])
local phase, wcap, wrate, _, first = sale(cap, rate)
closed = phase == 'closed'
cap, rate = wcap, wrate
if opens == 0 then opens = first end
forget(retention, batch, {kState, kSeqof, kAdmstamp})
local out = {0, now, 0, 0, 0, 0}
if closed then out[6] = 1 end
local stale = redis.call('ZRANGEBYSCORE', kMoving, '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, batch)
if paused or closed or phase ~= 'open' or (opens > 0 and now < opens) then
  for _, u in ipairs(stale) do out[#out + 1] = u; out[#out + 1] = redis.call('HGET', kMovinginfo, u) or '' end
  return out
end
out[3] = 1
if opens > 0 and tonumber(c[8] or 0) ~= opens then out[5] = opens end
local n = math.min(cap - redis.call('ZCOUNT', kActive, '(' .. now, '+inf'), batch)
if rate > 0 and n > 0 then n = math.min(n, math.floor(bucketTokens(rate))) end
out[4] = math.max(n, 0)
for _, u in ipairs(stale) do out[#out + 1] = u; out[#out + 1] = redis.call('HGET', kMovinginfo, u) or '' end
return out
`)

// roomAdmitScript reclaims run-out leases and no-shows (reclaim), then
// admits candidates of a sharded room, in the order given (the earliest
// order stamps first), within the free capacity and the outflow bucket:
// ARGV tolerance_us, opened (opens_at ms shuffled by this pass, else 0),
// max_batch, then user, stamp, shard, .... Reclaiming here, not in the
// prepare step, makes the pass's expiries and admissions one atomic step. A candidate whose join was
// admitted already (admstamp) is skipped. Each admission gets a new
// sequence number (the admission token's seq) and is recorded as moving
// until the shard lets the user go. An admitted stamp earlier than the
// latest admitted stamp by more than the tolerance counts as an inversion.
// Returns {now_ms, expired, user, seq, ...}.
var roomAdmitScript = newScript(shardedRoomLua + `
local c = redis.call('HMGET', kCfg, 'capacity', 'lease_ms', 'rate_per_min', 'arrival_ms', 'paused', 'closed')
if not c[1] then return redis.error_reply('NOROOM') end
local batch = tonumber(ARGV[3])
local expired = reclaim(batch)
local out = {now, expired}
local phase, cap, rate = sale(tonumber(c[1]), tonumber(c[3] or 0))
if c[5] == '1' or phase ~= 'open' then return out end
local lease, arrival = tonumber(c[2]), tonumber(c[4] or 0)
if ARGV[2] ~= '0' then redis.call('HSET', kCfg, 'opened_for', ARGV[2]) end
local n = cap - redis.call('ZCARD', kActive)
local tokens
if rate > 0 and n > 0 then
  tokens = bucketTokens(rate)
  n = math.min(n, math.floor(tokens))
end
local tol = tonumber(ARGV[1])
local maxstamp = tonumber(redis.call('HGET', kStats, 'max_stamp') or 0)
local inversions = 0
local admitted = 0
for i = 4, #ARGV, 3 do
  if admitted >= n then break end
  local u, stamp, shard = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HGET', kAdmstamp, u) ~= stamp and redis.call('HGET', kState, u) ~= 'admitted' then
    local seq = redis.call('INCR', kSeq)
    redis.call('ZADD', kActive, now + lease, u)
    redis.call('HSET', kState, u, 'admitted')
    redis.call('HSET', kSeqof, u, seq)
    redis.call('HSET', kAdmstamp, u, stamp)
    redis.call('ZREM', kDone, u)
    if arrival > 0 then redis.call('ZADD', kUnarrived, now + arrival, u) end
    redis.call('ZADD', kMoving, now, u)
    redis.call('HSET', kMovinginfo, u, stamp .. ' ' .. shard .. ' ' .. seq)
    local s = tonumber(stamp)
    if s < maxstamp - tol then inversions = inversions + 1 end
    if s > maxstamp then maxstamp = s end
    admitted = admitted + 1
    out[#out + 1] = u
    out[#out + 1] = seq
  end
end
if admitted > 0 then
  redis.call('HINCRBY', kStats, 'admitted', admitted)
  redis.call('HSET', kStats, 'max_stamp', maxstamp)
end
if inversions > 0 then redis.call('HINCRBY', kStats, 'inversions', inversions) end
if tokens then
  redis.call('HSET', kBucket, 'tokens', tostring(tokens - admitted), 'at', now)
end
return out
`)

// roomSettleScript ends the moving record of admissions the shards have
// answered: ARGV user, stamp, ok (1: the shard let the user go; 0: the
// user left the queue meanwhile, so the admission is undone), .... Returns
// the number undone.
var roomSettleScript = newScript(shardedRoomKeysLua + `
local undone = 0
for i = 1, #ARGV, 3 do
  local u, stamp, ok = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if ok == '0' and redis.call('HGET', kAdmstamp, u) == stamp and redis.call('HGET', kState, u) == 'admitted' then
    redis.call('ZREM', kActive, u)
    redis.call('ZREM', kUnarrived, u)
    redis.call('HDEL', kState, u)
    redis.call('HDEL', kSeqof, u)
    redis.call('HDEL', kAdmstamp, u)
    undone = undone + 1
  end
  local info = redis.call('HGET', kMovinginfo, u)
  if info and string.sub(info, 1, #stamp + 1) == stamp .. ' ' then
    redis.call('ZREM', kMoving, u)
    redis.call('HDEL', kMovinginfo, u)
  end
end
if undone > 0 then redis.call('HINCRBY', kStats, 'admitted', -undone) end
return undone
`)

// timeScript returns the server's TIME, run on the node of KEYS[1].
var timeScript = newScript(`return redis.call('TIME')`)

// shardViewScript (KEYS the shard's) returns a shard's part of its room's
// view: {waiting, departed} (departed: left, closed and set aside here).
var shardViewScript = newScript(shardKeysLua + `
local m = redis.call('HMGET', kStats, 'left', 'closed', 'setaside')
return {redis.call('ZCARD', kQueue), tonumber(m[1] or 0) + tonumber(m[2] or 0) + tonumber(m[3] or 0)}
`)

// shardTouchScript: KEYS the shard's; ARGV users of the shard. Returns
// touchLua's answer.
var shardTouchScript = newScript(shardLua + touchLua)
