package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

var _ waitroom.AdmissionStore = (*Store)(nil)

// admissionLua defines held(user, seq): the user's state after settling,
// and whether it is the admission numbered seq that holds a slot now (needs
// roomLua first). A user re-admitted after leaving has a new
// seq, so an old admission never matches the new one.
const admissionLua = `
local function held(user, seq)
  local st = settle(user)
  if st ~= 'admitted' then return st, false end
  local cur = tonumber(redis.call('HGET', kSeqof, user) or 0)
  return st, cur == seq
end
`

// releaseAdmissionScript: KEYS as every script; ARGV user, seq.
// Releases user's slot only while admission seq holds it.
// Returns {state, seq, lease_expiry_ms, released}.
var releaseAdmissionScript = newScript(roomLua + admissionLua + `
local user, seq = ARGV[1], tonumber(ARGV[2])
local st, ok = held(user, seq)
if not st then
  if redis.call('EXISTS', kCfg) == 0 then return redis.error_reply('NOROOM') end
  return redis.error_reply('NOTICKET')
end
local cur = tonumber(redis.call('HGET', kSeqof, user) or 0)
if not ok then return {st, cur, 0, 0} end
finishFrom(user, 'released', kActive, kUnarrived)
return {'released', cur, 0, 1}
`)

// touchAdmissionScript: KEYS as every script; ARGV user, seq, until_ms.
// While admission seq holds a slot, moves its lease end to
// min(now + lease, until_ms) when that is later than the current end
// (the lease only ever grows). A check of a holding admission is the
// user's arrival (see RoomConfig.Arrival). Returns {state, seq, lease_expiry_ms}.
var touchAdmissionScript = newScript(roomLua + admissionLua + `
local user, seq, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local st, ok = held(user, seq)
if not st then
  if redis.call('EXISTS', kCfg) == 0 then return redis.error_reply('NOROOM') end
  return redis.error_reply('NOTICKET')
end
local cur = tonumber(redis.call('HGET', kSeqof, user) or 0)
if not ok then return {st, cur, 0} end
redis.call('ZREM', kUnarrived, user)
local exp = tonumber(redis.call('ZSCORE', kActive, user) or 0)
local lease = tonumber(redis.call('HGET', kCfg, 'lease_ms') or 0)
local want = math.min(now + lease, cap)
if want > exp then
  redis.call('ZADD', kActive, 'XX', want, user)
  exp = want
end
return {st, cur, exp}
`)

// ReleaseAdmission implements waitroom.AdmissionStore: it releases user's
// slot in one script only while the admission numbered seq holds it.
func (s *Store) ReleaseAdmission(ctx context.Context, room, user string, seq int64) (waitroom.Ticket, bool, error) {
	res, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return releaseAdmissionScript.Run(ctx, s.users, KeysFor(room).scriptKeys(), user, seq).Slice()
	})
	if err != nil {
		return waitroom.Ticket{}, false, err
	}
	if len(res) != 4 {
		return waitroom.Ticket{}, false, fmt.Errorf("redisstore: release admission: unexpected reply %v", res)
	}
	t, err := ticketFrom(room, user, []any{res[0], int64(-1), res[1], res[2], int64(0), ""})
	released, _ := res[3].(int64)
	return t, released == 1, err
}

// TouchAdmission implements waitroom.AdmissionStore: while the admission
// numbered seq holds user's slot, its lease slides to now plus the room's
// lease, never past until.
func (s *Store) TouchAdmission(ctx context.Context, room, user string, seq int64, until time.Time) (waitroom.Ticket, error) {
	res, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return touchAdmissionScript.Run(ctx, s.users, KeysFor(room).scriptKeys(), user, seq, until.UnixMilli()).Slice()
	})
	if err != nil {
		return waitroom.Ticket{}, err
	}
	if len(res) != 3 {
		return waitroom.Ticket{}, fmt.Errorf("redisstore: touch admission: unexpected reply %v", res)
	}
	return ticketFrom(room, user, []any{res[0], int64(-1), res[1], res[2], int64(0), ""})
}
