package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/stampede-lab/stampede/waitroom"
)

// Verifiable fairness (see waitroom/fairness.go and docs/waitroom.md): the
// seed of the pre-queue's draw lives in the room's configuration hash
// (fair_seed, fair_commit, and fair_for, the opening it was picked for);
// the admission log is the list {room}:log, one entry a line, appended by
// the admission script in the same step as the admissions it records. The
// log grows by one entry per admission (about 150 bytes) plus one per
// opening, and goes with the room.

var _ waitroom.FairnessStore = (*Store)(nil)

// fairLua defines the admission log and the draw for the admission script
// (needs roomLua first; KEYS[15] is the log, ARGV[3] the room's name):
// logInit, logAppend, logAdmitted and draw.
const fairLua = `
local kLog = KEYS[15]
local logN, logPrev
local function int(x) return string.format('%.0f', tonumber(x)) end
-- logInit reads the log's length and head once per script; an empty log
-- begins with the room's name.
local logAppend
local function logInit()
  if logN then return end
  logN = redis.call('LLEN', kLog)
  logPrev = string.rep('0', 40)
  if logN > 0 then
    logPrev = string.sub(redis.call('LINDEX', kLog, -1), -40)
  else
    logAppend('begin ' .. int(now) .. ' ' .. ARGV[3])
  end
end
-- logAppend appends the entry whose fields after SEQ are body, chained to
-- the previous one: the line is "SEQ body PREV HASH", HASH the SHA-1 of
-- "SEQ body PREV". Returns the entry's seq.
logAppend = function(body)
  logInit()
  logN = logN + 1
  local line = int(logN) .. ' ' .. body .. ' ' .. logPrev
  logPrev = redis.sha1hex(line)
  redis.call('RPUSH', kLog, line .. ' ' .. logPrev)
  return logN
end
-- logAdmitted logs the admissions of one pass (popped: ZPOPMIN's reply,
-- the users already in active): "admit TIME PASS USERHASH PLACE HELD CAP
-- RETURNS", PASS the seq of the pass's first admission.
local function logAdmitted(popped, cap, abandon)
  if #popped == 0 then return end
  logInit()
  local held = redis.call('ZCARD', kActive) - #popped / 2
  local pass = int(logN + 1)
  local ret = '0'
  if abandon > 0 then ret = '1' end
  for i = 1, #popped, 2 do
    held = held + 1
    logAppend('admit ' .. int(now) .. ' ' .. pass .. ' ' .. redis.sha1hex(ARGV[3] .. ':' .. popped[i]) .. ' ' ..
      int(popped[i + 1]) .. ' ' .. int(held) .. ' ' .. int(cap) .. ' ' .. ret)
  end
end
-- draw orders the pre-queue once per opening (opens, recorded as
-- opened_for): each user's key is SHA-1("seed:userhash"), userhash
-- SHA-1("room:user"); the users sorted by key take the pre-queue's own
-- places (scores) in ascending order, so that everyone who joins later
-- stays behind them, and their seqof follows. The seed is the one picked
-- for this opening (fair_for), else fallback, logged without a
-- commitment. Logs "open TIME DRAWN FIRST LAST COMMITMENT". Returns how
-- many were drawn.
local function draw(opens, fallback)
  local f = redis.call('HMGET', kCfg, 'fair_for', 'fair_seed', 'fair_commit')
  local seed, commit = f[2], f[3]
  if tonumber(f[1] or 0) ~= opens or not seed then
    seed, commit = fallback, '-'
    redis.call('HSET', kCfg, 'fair_seed', seed, 'fair_commit', commit, 'fair_for', int(opens))
  end
  local q = redis.call('ZRANGE', kQueue, 0, -1, 'WITHSCORES')
  local users, scores, keys = {}, {}, {}
  for i = 1, #q, 2 do
    users[#users + 1] = q[i]
    scores[#scores + 1] = q[i + 1]
    keys[q[i]] = redis.sha1hex(seed .. ':' .. redis.sha1hex(ARGV[3] .. ':' .. q[i]))
  end
  table.sort(users, function(a, b) return keys[a] < keys[b] end)
  for i = 1, #users do
    redis.call('ZADD', kQueue, scores[i], users[i])
    redis.call('HSET', kSeqof, users[i], scores[i])
  end
  redis.call('HSET', kCfg, 'opened_for', opens)
  local first, last = 0, 0
  if #users > 0 then first, last = scores[1], scores[#scores] end
  logAppend('open ' .. int(now) .. ' ' .. #users .. ' ' .. int(first) .. ' ' .. int(last) .. ' ' .. commit)
  return #users
end
`

// seedScript picks the seed of a room's opening: KEYS cfg; ARGV seed,
// commitment. A room with an opening (opens_at_ms, or its schedule's
// first window's start) that has no seed for
// it yet, and has not opened under it, takes this one. Returns 1 when it
// did.
var seedScript = newScript(`
local c = redis.call('HMGET', KEYS[1], 'opens_at_ms', 'fair_for', 'opened_for', 'schedule')
local opens = tonumber(c[1] or 0)
-- A room with a schedule opens at its first window's start.
if opens == 0 and c[4] then opens = tonumber(string.match(c[4], '^(%d+)') or 0) end
if opens == 0 or tonumber(c[2] or 0) == opens or tonumber(c[3] or 0) == opens then return 0 end
redis.call('HSET', KEYS[1], 'fair_seed', ARGV[1], 'fair_commit', ARGV[2], 'fair_for', string.format('%.0f', opens))
return 1
`)

// fairnessScript: KEYS cfg, log. Returns {seed or ”, commitment or ”,
// log length, log head or ”, queue_shards}; the seed only once the
// pre-queue of its opening has been drawn.
var fairnessScript = newScript(`
local c = redis.call('HMGET', KEYS[1], 'capacity', 'fair_seed', 'fair_commit', 'fair_for', 'opened_for', 'queue_shards')
if not c[1] then return redis.error_reply('NOROOM') end
local seed = ''
if c[4] and c[4] == c[5] then seed = c[2] end
local n = redis.call('LLEN', KEYS[2])
local head = ''
if n > 0 then head = string.sub(redis.call('LINDEX', KEYS[2], -1), -40) end
return {seed, c[3] or '', n, head, tonumber(c[6] or 0)}
`)

// newSeed returns a fresh seed (32 bytes from the system's CSPRNG, in
// hex).
func newSeed() string {
	b := make([]byte, waitroom.SeedHexLen/2)
	_, _ = rand.Read(b) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b)
}

// pickSeed gives room's opening a seed of its own if it has none (see
// seedScript).
func (s *Store) pickSeed(ctx context.Context, room string) error {
	seed := newSeed()
	return call0(s, ctx, func(ctx context.Context) error {
		return seedScript.Run(ctx, s.client, []string{KeysFor(room).Config}, seed, waitroom.Commitment(seed)).Err()
	})
}

// Fairness implements waitroom.FairnessStore.
func (s *Store) Fairness(ctx context.Context, room string) (waitroom.Fairness, error) {
	k := KeysFor(room)
	out, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return fairnessScript.Run(ctx, s.client, []string{k.Config, k.Log}).Slice()
	})
	if err != nil {
		return waitroom.Fairness{}, err
	}
	if len(out) != 5 {
		return waitroom.Fairness{}, fmt.Errorf("redisstore: fairness: unexpected reply %v", out)
	}
	f := waitroom.Fairness{Seed: fmt.Sprint(out[0]), Commitment: fmt.Sprint(out[1]), LogHead: fmt.Sprint(out[3])}
	f.LogLength, _ = out[2].(int64)
	shards, _ := out[4].(int64)
	f.Verifiable = shards <= 1
	if f.LogHead == "" {
		f.LogHead = waitroom.ZeroHash
	}
	return f, nil
}

// AdmissionLog implements waitroom.FairnessStore: one LRANGE.
func (s *Store) AdmissionLog(ctx context.Context, room string, from int64, limit int) ([]string, error) {
	return call(s, ctx, func(ctx context.Context) ([]string, error) {
		return s.client.LRange(ctx, KeysFor(room).Log, from-1, from-1+int64(limit)-1).Result()
	})
}
