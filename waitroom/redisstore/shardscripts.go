package redisstore

// The scripts of a sharded room's queue shards (see shard.go). Every shard
// script takes the shard's keys (see ShardKeys.list):
//
//	1 cfg  2 seq  3 queue  4 state  5 admseq  6 stats  7 joinedat  8 seen
//	9 away  10 awayat  11 done  12 seqof
//
// cfg is the shard's copy of the room's settings it needs (closed,
// closed_message, abandon_ms, retention_ms) plus its own clock mark
// (last: the last stamp it gave) and opened_for. queue scores each waiting
// user by their order stamp (µs), and away keeps it for users set aside.
// state holds what happens in the shard (waiting, away, left, closed,
// abandoned) and 'admitted' for a user the shard let go to the room, whose
// admission's seq is in admseq: from then on the room's keys know the
// user's state.

// nowUS reads the server clock in ms (now) and µs (nowus).
const nowUS = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// shardLua defines finish, settle and view for a shard's users.
const shardLua = `
local function finish(user, st)
  redis.call('HSET', KEYS[4], user, st)
  redis.call('ZADD', KEYS[11], now, user)
end

-- settle: a user away for not polling comes back to their place (they act
-- now) or, past their window, has abandoned it; a closed room closes a
-- waiting ticket.
local function settle(user)
  local st = redis.call('HGET', KEYS[4], user)
  if st == 'away' then
    local dl = tonumber(redis.call('ZSCORE', KEYS[10], user) or 0)
    local sc = redis.call('ZSCORE', KEYS[9], user)
    redis.call('ZREM', KEYS[9], user)
    redis.call('ZREM', KEYS[10], user)
    if dl > now and sc then
      redis.call('ZADD', KEYS[3], sc, user)
      redis.call('HSET', KEYS[4], user, 'waiting')
      st = 'waiting'
    else
      redis.call('HINCRBY', KEYS[6], 'abandoned', 1)
      finish(user, 'abandoned')
      return 'abandoned'
    end
  end
  if st == 'waiting' and redis.call('HGET', KEYS[1], 'closed') == '1' then
    redis.call('ZREM', KEYS[3], user)
    redis.call('ZREM', KEYS[8], user)
    redis.call('HINCRBY', KEYS[6], 'closed', 1)
    finish(user, 'closed')
    return 'closed'
  end
  return st
end

-- view returns {state, rank in this shard, seq, 0, created, message, stamp}.
local function view(user, st, created)
  local rank, msg, stamp = -1, '', 0
  if st == 'waiting' then
    rank = redis.call('ZRANK', KEYS[3], user) or -1
    stamp = tonumber(redis.call('ZSCORE', KEYS[3], user) or 0)
  end
  if st == 'closed' then msg = redis.call('HGET', KEYS[1], 'closed_message') or '' end
  return {st, rank, tonumber(redis.call('HGET', KEYS[12], user) or 0), 0, created, msg, stamp}
end
`

// shardJoinScript: ARGV user, hint (the caller's latest stamp seen, µs),
// ended (empty: not asked; n: the room says admission n of the user has
// ended; 0: the room has forgotten the user). A user the shard does not know, or whose ticket here is
// finished, joins with a new order stamp max(TIME µs, last + 1, hint + 1):
// unique and rising in the shard, and later than every stamp the caller
// has seen. A user the shard let go to the room joins only when ended
// names that admission; else the answer is {'unknown'}: the caller asks
// the room, then again. Returns view.
var shardJoinScript = newScript(nowUS + shardLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
local user = ARGV[1]
local st = settle(user)
if st == 'waiting' then
  redis.call('ZADD', KEYS[8], now, user)
  return view(user, st, 0)
end
if redis.call('HGET', KEYS[1], 'closed') == '1' then
  if st then return view(user, st, 0) end
  return {'closed', -1, 0, 0, 0, redis.call('HGET', KEYS[1], 'closed_message') or '', 0}
end
if st == 'admitted' and ARGV[3] ~= '0' and redis.call('HGET', KEYS[5], user) ~= ARGV[3] then return {'unknown'} end
local stamp = math.max(nowus, tonumber(redis.call('HGET', KEYS[1], 'last') or 0) + 1, tonumber(ARGV[2]) + 1)
redis.call('HSET', KEYS[1], 'last', stamp)
local seq = redis.call('INCR', KEYS[2])
redis.call('ZREM', KEYS[11], user)
redis.call('ZADD', KEYS[3], stamp, user)
redis.call('ZADD', KEYS[8], now, user)
redis.call('HSET', KEYS[4], user, 'waiting')
redis.call('HSET', KEYS[12], user, seq)
redis.call('HSET', KEYS[7], user, now)
redis.call('HINCRBY', KEYS[6], 'joined', 1)
return view(user, 'waiting', 1)
`)

// shardTicketScript: ARGV user. Reading is polling. A user the shard does
// not know is answered {'unknown'} (admitted, or never joined: the room
// knows). Returns view.
var shardTicketScript = newScript(nowUS + shardLua + `
local user = ARGV[1]
local st = settle(user)
if not st or st == 'admitted' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
  return {'unknown'}
end
if st == 'waiting' then redis.call('ZADD', KEYS[8], now, user) end
return view(user, st, 0)
`)

// shardLeaveScript: ARGV user. Returns {state, changed}, or {'unknown'}
// for a user the shard does not know.
var shardLeaveScript = newScript(nowUS + shardLua + `
local user = ARGV[1]
local st = settle(user)
if not st or st == 'admitted' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
  return {'unknown'}
end
if st == 'waiting' then
  redis.call('ZREM', KEYS[3], user)
  redis.call('ZREM', KEYS[8], user)
  redis.call('HINCRBY', KEYS[6], 'left', 1)
  finish(user, 'left')
  return {'left', 1}
end
return {st, 0}
`)

// shardPeekScript is a shard's part of an admission pass: ARGV heads,
// max_batch, shuffle (the room's opens_at in ms when the pre-queue may be
// shuffled now, else 0), seed, hint (the admitter's latest stamp seen). It
// closes waiting users of a closed room, sets aside users who stopped
// polling and abandons those away too long, forgets users finished longer
// than the retention ago (each step at most max_batch users), shuffles the
// pre-queue once, and raises the shard's clock mark to at least now and
// the hint: every later join here is stamped after the mark. Returns
// {shuffled, mark, user, stamp, ...} for up to heads users at the head of
// the queue.
var shardPeekScript = newScript(nowUS + shardLua + `
local c = redis.call('HMGET', KEYS[1], 'closed', 'abandon_ms', 'retention_ms', 'opened_for')
if not c[3] then return redis.error_reply('NOROOM') end
local closed, abandon, retention = c[1] == '1', tonumber(c[2] or 0), tonumber(c[3])
local heads, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
if closed then
  local n = 0
  local popped = redis.call('ZPOPMIN', KEYS[3], batch)
  for i = 1, #popped, 2 do
    redis.call('ZREM', KEYS[8], popped[i])
    finish(popped[i], 'closed')
    n = n + 1
  end
  local away = redis.call('ZRANGE', KEYS[9], 0, batch - 1)
  for _, u in ipairs(away) do
    redis.call('ZREM', KEYS[9], u)
    redis.call('ZREM', KEYS[10], u)
    finish(u, 'closed')
    n = n + 1
  end
  if n > 0 then redis.call('HINCRBY', KEYS[6], 'closed', n) end
end
if abandon > 0 then
  local stale = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', now - abandon, 'LIMIT', 0, batch)
  for _, u in ipairs(stale) do
    redis.call('ZREM', KEYS[8], u)
    local sc = redis.call('ZSCORE', KEYS[3], u)
    if sc then
      redis.call('ZREM', KEYS[3], u)
      redis.call('ZADD', KEYS[9], sc, u)
      redis.call('ZADD', KEYS[10], now + abandon, u)
      redis.call('HSET', KEYS[4], u, 'away')
    end
  end
end
local over = redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', now, 'LIMIT', 0, batch)
for _, u in ipairs(over) do
  redis.call('ZREM', KEYS[9], u)
  redis.call('ZREM', KEYS[10], u)
  finish(u, 'abandoned')
end
if #over > 0 then redis.call('HINCRBY', KEYS[6], 'abandoned', #over) end
local old = redis.call('ZRANGEBYSCORE', KEYS[11], '-inf', now - retention, 'LIMIT', 0, batch)
if #old > 0 then
  redis.call('HDEL', KEYS[4], unpack(old))
  redis.call('HDEL', KEYS[5], unpack(old))
  redis.call('HDEL', KEYS[12], unpack(old))
  redis.call('HDEL', KEYS[7], unpack(old))
  redis.call('ZREM', KEYS[11], unpack(old))
end
local out = {0}
local opens = ARGV[3]
if opens ~= '0' and c[4] ~= opens then
  local q = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  local users, scores = {}, {}
  for i = 1, #q, 2 do
    users[#users + 1] = q[i]
    scores[#scores + 1] = q[i + 1]
  end
  local x = tonumber(ARGV[4])
  for i = #users, 2, -1 do
    x = (x * 16807) % 2147483647
    local j = (x % i) + 1
    users[i], users[j] = users[j], users[i]
  end
  for i = 1, #users do redis.call('ZADD', KEYS[3], scores[i], users[i]) end
  redis.call('HSET', KEYS[1], 'opened_for', opens)
  out[1] = #users
end
local last = tonumber(redis.call('HGET', KEYS[1], 'last') or 0)
local mark = math.max(last, nowus, tonumber(ARGV[5]))
if mark > last then redis.call('HSET', KEYS[1], 'last', mark) end
out[2] = mark
if heads > 0 then
  local h = redis.call('ZRANGE', KEYS[3], 0, heads - 1, 'WITHSCORES')
  for i = 1, #h do out[#out + 1] = h[i] end
end
return out
`)

// shardFinalizeScript lets admitted users go to the room: ARGV user,
// stamp, seq, .... A user still waiting with that stamp leaves the queue
// and is marked admitted with the admission's seq, kept for the lease and
// the retention after (a join then asks the room); a user marked so already, or
// forgotten since, was let go by an earlier call. Returns, per user, 1 when
// the admission stands, or 0 when the user left, closed, was set aside or
// joined again meanwhile: the room must undo that admission.
var shardFinalizeScript = newScript(nowUS + `
local lease = tonumber(redis.call('HGET', KEYS[1], 'lease_ms') or 0)
local out = {}
for i = 1, #ARGV, 3 do
  local u, stamp, seq = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local st = redis.call('HGET', KEYS[4], u)
  local ok = 0
  if not st or (st == 'admitted' and redis.call('HGET', KEYS[5], u) == seq) then
    ok = 1
  elseif st == 'waiting' and tonumber(redis.call('ZSCORE', KEYS[3], u) or -1) == stamp then
    redis.call('ZREM', KEYS[3], u)
    redis.call('ZREM', KEYS[8], u)
    redis.call('HSET', KEYS[4], u, 'admitted')
    redis.call('HSET', KEYS[5], u, seq)
    redis.call('HDEL', KEYS[7], u)
    redis.call('ZADD', KEYS[11], now + lease, u)
    ok = 1
  end
  out[#out + 1] = ok
end
return out
`)

// shardStatsScript returns {waiting, away, oldest_join_ms (-1: none),
// counter, value, ...}.
var shardStatsScript = newScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
local oldest = -1
local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if head[1] then oldest = tonumber(redis.call('HGET', KEYS[7], head[1]) or -1) end
local out = {redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[9]), oldest}
local c = redis.call('HGETALL', KEYS[6])
for i = 1, #c do out[#out + 1] = c[i] end
return out
`)

// shardSampleScript returns {count, stamp, ...}: every stamp of the
// shard's queue when it holds at most ARGV[1] users, else ARGV[1] stamps
// at evenly spaced ranks (the first and the last included), for the
// positions of other shards' users.
var shardSampleScript = newScript(`
local n = redis.call('ZCARD', KEYS[3])
local want = tonumber(ARGV[1])
local out = {n}
if n <= want then
  local all = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  for i = 2, #all, 2 do out[#out + 1] = all[i] end
  return out
end
for i = 0, want - 1 do
  local r = math.floor(i * (n - 1) / (want - 1))
  local z = redis.call('ZRANGE', KEYS[3], r, r, 'WITHSCORES')
  out[#out + 1] = z[2]
end
return out
`)

// The room's scripts for a sharded room take the room's script keys
// followed by 15 admstamp, 16 moving, 17 movinginfo (see
// Keys.shardedKeys): admstamp holds the order stamp of each admitted
// user's join, so that a join is admitted once; moving and movinginfo
// hold admissions whose users the shards have not yet let go.

// roomPrepScript opens a sharded room's admission pass: ARGV max_batch,
// stale_ms. It forgets users finished longer than the retention ago, as
// the one-queue pass does, and counts the free places (run-out leases
// count as free: the admit script reclaims them). Returns {0, now_ms,
// admit (0 or 1), free, shuffle (opens_at ms
// when the pre-queue may be shuffled now, else 0), closed, stale moving
// user, info, ...}.
var roomPrepScript = newScript(nowMS + commonLua + `
local c = redis.call('HMGET', KEYS[1], 'capacity', 'lease_ms', 'rate_per_min', 'opens_at_ms', 'paused',
  'closed', 'retention_ms', 'opened_for')
if not c[1] then return redis.error_reply('NOROOM') end
local cap = tonumber(c[1])
local rate, opens = tonumber(c[3] or 0), tonumber(c[4] or 0)
local paused, closed = c[5] == '1', c[6] == '1'
local retention = tonumber(c[7] or 86400000)
local batch = tonumber(ARGV[1])
local old = redis.call('ZRANGEBYSCORE', KEYS[13], '-inf', now - retention, 'LIMIT', 0, batch)
if #old > 0 then
  redis.call('HDEL', KEYS[5], unpack(old))
  redis.call('HDEL', KEYS[6], unpack(old))
  redis.call('HDEL', KEYS[15], unpack(old))
  redis.call('ZREM', KEYS[13], unpack(old))
end
local out = {0, now, 0, 0, 0, 0}
if closed then out[6] = 1 end
local stale = redis.call('ZRANGEBYSCORE', KEYS[16], '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, batch)
if paused or closed or (opens > 0 and now < opens) then
  for _, u in ipairs(stale) do out[#out + 1] = u; out[#out + 1] = redis.call('HGET', KEYS[17], u) or '' end
  return out
end
out[3] = 1
if opens > 0 and tonumber(c[8] or 0) ~= opens then out[5] = opens end
local n = math.min(cap - redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf'), batch)
if rate > 0 and n > 0 then
  local burst = math.max(1, rate / 60)
  local b = redis.call('HMGET', KEYS[14], 'tokens', 'at')
  local tokens = burst
  if b[1] then tokens = math.min(burst, tonumber(b[1]) + (now - tonumber(b[2])) * rate / 60000) end
  n = math.min(n, math.floor(tokens))
end
out[4] = math.max(n, 0)
for _, u in ipairs(stale) do out[#out + 1] = u; out[#out + 1] = redis.call('HGET', KEYS[17], u) or '' end
return out
`)

// reclaimLua ends run-out leases, and admissions whose user has not
// arrived within the arrival window (at most batch of those), as the
// one-queue pass does; it sets expired.
const reclaimLua = `
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
`

// roomAdmitScript reclaims run-out leases and no-shows (reclaimLua), then
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
var roomAdmitScript = newScript(nowMS + commonLua + `
local c = redis.call('HMGET', KEYS[1], 'capacity', 'lease_ms', 'rate_per_min', 'arrival_ms', 'paused', 'closed')
if not c[1] then return redis.error_reply('NOROOM') end
local batch = tonumber(ARGV[3])
` + reclaimLua + `
local out = {now, expired}
if c[5] == '1' or c[6] == '1' then return out end
local cap, lease, rate, arrival = tonumber(c[1]), tonumber(c[2]), tonumber(c[3] or 0), tonumber(c[4] or 0)
if ARGV[2] ~= '0' then redis.call('HSET', KEYS[1], 'opened_for', ARGV[2]) end
local n = cap - redis.call('ZCARD', KEYS[4])
local tokens, burst
if rate > 0 and n > 0 then
  burst = math.max(1, rate / 60)
  local b = redis.call('HMGET', KEYS[14], 'tokens', 'at')
  tokens = burst
  if b[1] then tokens = math.min(burst, tonumber(b[1]) + (now - tonumber(b[2])) * rate / 60000) end
  n = math.min(n, math.floor(tokens))
end
local tol = tonumber(ARGV[1])
local maxstamp = tonumber(redis.call('HGET', KEYS[7], 'max_stamp') or 0)
local inversions = 0
local admitted = 0
for i = 4, #ARGV, 3 do
  if admitted >= n then break end
  local u, stamp, shard = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HGET', KEYS[15], u) ~= stamp and redis.call('HGET', KEYS[5], u) ~= 'admitted' then
    local seq = redis.call('INCR', KEYS[2])
    redis.call('ZADD', KEYS[4], now + lease, u)
    redis.call('HSET', KEYS[5], u, 'admitted')
    redis.call('HSET', KEYS[6], u, seq)
    redis.call('HSET', KEYS[15], u, stamp)
    redis.call('ZREM', KEYS[13], u)
    if arrival > 0 then redis.call('ZADD', KEYS[12], now + arrival, u) end
    redis.call('ZADD', KEYS[16], now, u)
    redis.call('HSET', KEYS[17], u, stamp .. ' ' .. shard .. ' ' .. seq)
    local s = tonumber(stamp)
    if s < maxstamp - tol then inversions = inversions + 1 end
    if s > maxstamp then maxstamp = s end
    admitted = admitted + 1
    out[#out + 1] = u
    out[#out + 1] = seq
  end
end
if admitted > 0 then
  redis.call('HINCRBY', KEYS[7], 'admitted', admitted)
  redis.call('HSET', KEYS[7], 'max_stamp', maxstamp)
end
if inversions > 0 then redis.call('HINCRBY', KEYS[7], 'inversions', inversions) end
if tokens then
  redis.call('HSET', KEYS[14], 'tokens', tostring(tokens - admitted), 'at', now)
end
return out
`)

// roomSettleScript ends the moving record of admissions the shards have
// answered: ARGV user, stamp, ok (1: the shard let the user go; 0: the
// user left the queue meanwhile, so the admission is undone), .... Returns
// the number undone.
var roomSettleScript = newScript(`
local undone = 0
for i = 1, #ARGV, 3 do
  local u, stamp, ok = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if ok == '0' and redis.call('HGET', KEYS[15], u) == stamp and redis.call('HGET', KEYS[5], u) == 'admitted' then
    redis.call('ZREM', KEYS[4], u)
    redis.call('ZREM', KEYS[12], u)
    redis.call('HDEL', KEYS[5], u)
    redis.call('HDEL', KEYS[6], u)
    redis.call('HDEL', KEYS[15], u)
    undone = undone + 1
  end
  local info = redis.call('HGET', KEYS[17], u)
  if info and string.sub(info, 1, #stamp + 1) == stamp .. ' ' then
    redis.call('ZREM', KEYS[16], u)
    redis.call('HDEL', KEYS[17], u)
  end
end
if undone > 0 then redis.call('HINCRBY', KEYS[7], 'admitted', -undone) end
return undone
`)

// timeScript returns the server's TIME, run on the node of KEYS[1].
var timeScript = newScript(`return redis.call('TIME')`)
