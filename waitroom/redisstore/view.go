package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
)

// The room view (waitroom.RoomView) and batched presence
// (waitroom.Toucher).

var _ waitroom.Toucher = (*Store)(nil)

// touchChunk bounds the users of one Touch script (Lua's unpack).
const touchChunk = 1000

// View implements waitroom.Store: one script on the room's keys, or, for a
// sharded room, one pipeline of that script and one per queue shard.
func (s *Store) View(ctx context.Context, room string) (waitroom.RoomView, error) {
	k, err := s.queueShards(ctx, room)
	if err != nil {
		return waitroom.RoomView{}, err
	}
	keys := KeysFor(room).scriptKeys()
	var cmds []*redis.Cmd
	_, err = call(s, ctx, func(ctx context.Context) (struct{}, error) {
		cmds = make([]*redis.Cmd, 0, k+1)
		if k <= 1 {
			c := roomViewScript.Run(ctx, s.client, keys)
			cmds = append(cmds, c)
			return struct{}{}, c.Err()
		}
		_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmds = append(cmds, roomViewScript.EvalSha(ctx, p, keys))
			for i := range k {
				cmds = append(cmds, shardViewScript.EvalSha(ctx, p, ShardKeysFor(room, i).list()))
			}
			return nil
		})
		for i, c := range cmds {
			if err := c.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				if i == 0 {
					cmds[i] = roomViewScript.Run(ctx, s.client, keys)
				} else {
					cmds[i] = shardViewScript.Run(ctx, s.client, ShardKeysFor(room, i-1).list())
				}
			}
		}
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	if err != nil {
		return waitroom.RoomView{}, err
	}
	out, err := cmds[0].Slice()
	if err != nil || len(out) != 8 {
		return waitroom.RoomView{}, fmt.Errorf("redisstore: view: unexpected reply %v (%v)", out, err)
	}
	num := func(v any) int64 {
		n, _ := v.(int64)
		return n
	}
	v := waitroom.RoomView{
		At: time.UnixMilli(num(out[0])).UTC(), Phase: waitroom.Phase(fmt.Sprint(out[1])), Paused: num(out[2]) == 1,
		Waiting: num(out[3]), AdmittedTotal: num(out[4]), DepartedTotal: num(out[5]), Order: num(out[6]), Ordered: num(out[7]) == 1,
	}
	for i, c := range cmds[1:] {
		part, err := c.Slice()
		if err != nil || len(part) != 2 {
			return waitroom.RoomView{}, fmt.Errorf("redisstore: view of shard %d: unexpected reply %v (%v)", i, part, err)
		}
		v.Waiting += num(part[0])
		v.DepartedTotal += num(part[1])
	}
	return v, nil
}

// Touch implements waitroom.Toucher: one script per room (per queue shard
// of a sharded room) for up to touchChunk users, all in one pipeline.
func (s *Store) Touch(ctx context.Context, room string, users []string) ([]string, error) {
	if len(users) == 0 {
		return nil, nil
	}
	k, err := s.queueShards(ctx, room)
	if err != nil {
		return nil, err
	}
	byKeys := map[int][]string{}
	for _, u := range users {
		shard := 0
		if k > 1 {
			shard = ShardOf(u, k)
		}
		byKeys[shard] = append(byKeys[shard], u)
	}
	sc := touchScript
	if k > 1 {
		sc = shardTouchScript
	}
	var keys [][]string
	var args [][]any
	for shard, us := range byKeys {
		ks := KeysFor(room).scriptKeys()
		if k > 1 {
			ks = ShardKeysFor(room, shard).list()
		}
		for len(us) > 0 {
			n := min(len(us), touchChunk)
			a := make([]any, n)
			for i, u := range us[:n] {
				a[i] = u
			}
			keys, args = append(keys, ks), append(args, a)
			us = us[n:]
		}
	}
	cmds, err := call(s, ctx, func(ctx context.Context) ([]*redis.Cmd, error) {
		return s.runAll(ctx, sc, keys, args)
	})
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, c := range cmds {
		out, err := c.StringSlice()
		if err != nil {
			return nil, fmt.Errorf("redisstore: touch: %w", err)
		}
		gone = append(gone, out...)
	}
	return gone, nil
}
