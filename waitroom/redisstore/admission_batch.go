package redisstore

import (
	"context"
	"fmt"

	"github.com/stampede-lab/stampede/waitroom"
)

var _ waitroom.BatchAdmissionStore = (*Store)(nil)

// maxTouchBatch bounds the admissions of one touchAdmissionsScript call
// (Lua's unpack takes a few thousand values); a longer batch takes more
// calls.
const maxTouchBatch = 1000

// touchAdmissionsScript: KEYS as every script; ARGV user, seq, until_ms
// for each admission (until_ms 0: only checked). It does for all of them
// what touchAdmissionScript does for one, with a constant number of
// commands whatever their number: each admission holds its slot while the
// user is admitted under that seq, the lease has not run out and the
// arrival window has not passed; the lease of each holding one with an
// until_ms slides to min(now + lease, until_ms) when that is later (one
// ZADD for all), and its user has arrived (one ZREM). An admission whose
// lease or arrival window is over is reported expired and left to the
// admission pass. Returns {state, seq, lease_expiry_ms} for each, state ”
// for a user without a ticket.
var touchAdmissionsScript = newScript(nowMS + roomKeysLua + `
local lease = redis.call('HGET', kCfg, 'lease_ms')
if not lease then return redis.error_reply('NOROOM') end
lease = tonumber(lease)
local n = #ARGV / 3
local users = {}
for i = 1, n do users[i] = ARGV[3 * i - 2] end
local states = redis.call('HMGET', kState, unpack(users))
local seqs = redis.call('HMGET', kSeqof, unpack(users))
local exps = redis.call('ZMSCORE', kActive, unpack(users))
local dues = redis.call('ZMSCORE', kUnarrived, unpack(users))
local out, slide, arrived = {}, {}, {}
for i = 1, n do
  local st, cur = states[i] or '', tonumber(seqs[i] or 0)
  local exp, due = tonumber(exps[i] or 0), tonumber(dues[i] or 0)
  local seq, cap = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  if st == 'admitted' and (exp <= now or (due > 0 and due <= now)) then st = 'expired' end
  if st ~= 'admitted' then exp = 0 end
  if st == 'admitted' and cur == seq and cap > 0 then
    if due > 0 then arrived[#arrived + 1] = users[i] end
    local want = math.min(now + lease, cap)
    if want > exp then
      slide[#slide + 1] = want
      slide[#slide + 1] = users[i]
      exp = want
    end
  end
  out[3 * i - 2], out[3 * i - 1], out[3 * i] = st, cur, exp
end
if #arrived > 0 then redis.call('ZREM', kUnarrived, unpack(arrived)) end
if #slide > 0 then redis.call('ZADD', kActive, 'XX', unpack(slide)) end
return out
`)

// TouchAdmissions implements waitroom.BatchAdmissionStore: one script
// call for up to maxTouchBatch admissions.
func (s *Store) TouchAdmissions(ctx context.Context, room string, touches []waitroom.AdmissionTouch) ([]waitroom.Ticket, error) {
	out := make([]waitroom.Ticket, 0, len(touches))
	keys := KeysFor(room).scriptKeys()
	for len(touches) > 0 {
		part := touches[:min(len(touches), maxTouchBatch)]
		touches = touches[len(part):]
		args := make([]any, 0, 3*len(part))
		for _, t := range part {
			var until int64
			if !t.Until.IsZero() {
				until = max(1, t.Until.UnixMilli())
			}
			args = append(args, t.User, t.Seq, until)
		}
		res, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
			return touchAdmissionsScript.Run(ctx, s.users, keys, args...).Slice()
		})
		if err != nil {
			return nil, err
		}
		if len(res) != 3*len(part) {
			return nil, fmt.Errorf("redisstore: touch admissions: %d values for %d admissions", len(res), len(part))
		}
		for i, t := range part {
			if st, _ := res[3*i].(string); st == "" {
				out = append(out, waitroom.Ticket{Room: room, User: t.User})
				continue
			}
			tk, err := ticketFrom(room, t.User, []any{res[3*i], int64(-1), res[3*i+1], res[3*i+2], int64(0), ""})
			if err != nil {
				return nil, err
			}
			out = append(out, tk)
		}
	}
	return out, nil
}
