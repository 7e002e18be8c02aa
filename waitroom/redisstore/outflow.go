package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/stampede-lab/stampede/waitroom"
)

var _ waitroom.OutflowStore = (*Store)(nil)

// setOutflowScript: KEYS cfg; ARGV per_minute, reason. Sets the room's
// adaptive outflow (outflow_now, outflow_why) stamped with the server's
// clock (outflow_at: the admission script ignores it waitroom.OutflowLapse
// later). Returns 1, or the NOROOM error.
var setOutflowScript = newScript(nowMS + `
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOROOM') end
redis.call('HSET', KEYS[1], 'outflow_now', ARGV[1], 'outflow_why', ARGV[2], 'outflow_at', now)
return 1
`)

// outflowScript: KEYS cfg. Returns {per_minute, reason}: 0 and ” when
// no fresh adaptive outflow is set.
var outflowScript = newScript(nowMS + `
local c = redis.call('HMGET', KEYS[1], 'capacity', 'outflow_now', 'outflow_why', 'outflow_at')
if not c[1] then return redis.error_reply('NOROOM') end
if not c[2] or now - tonumber(c[4]) > 3000 then return {0, ''} end
return {tonumber(c[2]), c[3] or ''}
`)

// SetOutflow implements waitroom.OutflowStore.
func (s *Store) SetOutflow(ctx context.Context, room string, perMinute int, reason string) error {
	return call0(s, ctx, func(ctx context.Context) error {
		return setOutflowScript.Run(ctx, s.client, []string{KeysFor(room).Config}, perMinute, reason).Err()
	})
}

// Outflow implements waitroom.OutflowStore.
func (s *Store) Outflow(ctx context.Context, room string) (int, string, error) {
	out, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return outflowScript.Run(ctx, s.client, []string{KeysFor(room).Config}).Slice()
	})
	if err != nil {
		return 0, "", err
	}
	if len(out) != 2 {
		return 0, "", fmt.Errorf("redisstore: outflow: unexpected reply %v", out)
	}
	n, _ := strconv.Atoi(fmt.Sprint(out[0]))
	return n, fmt.Sprint(out[1]), nil
}
