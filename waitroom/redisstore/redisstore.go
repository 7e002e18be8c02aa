// Package redisstore keeps waiting rooms in Redis: a sorted set of waiting
// users scored by arrival sequence, a sorted set of admitted users scored by
// lease expiry (Redis server time, in milliseconds), and hashes for the
// configuration, each user's state and the counters.
//
// Every key of a room carries the hash tag {room}, so one room lives in one
// Cluster slot and every script runs unchanged on standalone Redis and on
// Redis Cluster (the client is a go-redis UniversalClient). Scripts are sent
// once and then run by SHA (EVALSHA, with EVAL as the fallback after a
// server restart).
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
)

// roomsKey lists every configured room, so that each service instance can
// find the rooms it must run admission for.
const roomsKey = "stampede:rooms"

// MaxBatch bounds how many users one atomic admission script admits, so
// that one script never blocks Redis for long.
const MaxBatch = 1000

// Store is a waitroom.Store on Redis.
type Store struct {
	client redis.UniversalClient
	// users runs the per-user scripts (join, ticket, leave): the client's
	// auto-pipeliner when Config.AutoPipeline is on, else the client.
	users redis.Scripter
}

var _ waitroom.Store = (*Store)(nil)

// Config tunes a Store.
type Config struct {
	// AutoPipeline sends the per-user scripts (join, ticket, leave) of
	// concurrent requests through go-redis automatic pipelining: while one
	// batch is on the wire the next ones queue up and go out together, one
	// write and one read for many scripts instead of one each. Every script
	// still runs atomically on its own; a lone request goes out at once.
	// Admission and the other room-wide commands always use the plain
	// client. The scripts are idempotent, so the auto-pipeliner re-sending
	// one after a broken connection changes nothing. go-redis marks
	// automatic pipelining experimental; turning this off (stampede serve
	// waitroom --autopipeline=false) falls back to one round trip each.
	AutoPipeline bool
}

// DefaultConfig returns the production configuration: auto-pipelining on.
func DefaultConfig() Config { return Config{AutoPipeline: true} }

// Validate reports a configuration error; every Config is valid today, the
// method keeps the house pattern so that New callers need not change when
// a field gains limits.
func (c Config) Validate() error { return nil }

// New returns a Store on client with DefaultConfig. The client's lifetime
// is the caller's; closing it also stops the auto-pipeliner. Should the
// client refuse auto-pipelining (an invalid Options.AutoPipelineOptions),
// the Store runs every script on the plain client; NewWithConfig reports
// that error instead.
func New(client redis.UniversalClient) *Store {
	s, err := NewWithConfig(client, DefaultConfig())
	if err != nil {
		return &Store{client: client, users: client}
	}
	return s
}

// NewWithConfig returns a Store on client configured by cfg.
func NewWithConfig(client redis.UniversalClient, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{client: client, users: client}
	if cfg.AutoPipeline {
		ap, err := client.AutoPipeline()
		if err != nil {
			return nil, fmt.Errorf("redisstore: auto-pipelining: %w", err)
		}
		s.users = ap
	}
	return s, nil
}

// Keys names the Redis keys of one room.
type Keys struct {
	Config, Seq, Queue, Active, State, SeqOf, Stats, Leader string
}

// KeysFor returns room's keys; all share the hash tag {room}.
func KeysFor(room string) Keys {
	p := "{" + room + "}:"
	return Keys{
		Config: p + "cfg", Seq: p + "seq", Queue: p + "queue", Active: p + "active",
		State: p + "state", SeqOf: p + "seqof", Stats: p + "stats", Leader: p + "leader",
	}
}

// scriptKeys is the KEYS list every script takes.
func (k Keys) scriptKeys() []string {
	return []string{k.Config, k.Seq, k.Queue, k.Active, k.State, k.SeqOf, k.Stats}
}

// Configure implements waitroom.Store.
func (s *Store) Configure(ctx context.Context, room string, cfg waitroom.RoomConfig) error {
	// The name becomes the hash tag: anything else could split a room's
	// keys over Cluster slots.
	if err := waitroom.ValidateRoom(room); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	err := s.client.HSet(ctx, KeysFor(room).Config,
		"capacity", cfg.Capacity,
		"lease_ms", cfg.Lease.Milliseconds(),
		"interval_ms", cfg.AdmitInterval.Milliseconds(),
		"mode", string(cfg.Mode)).Err()
	if err != nil {
		return storeError(err)
	}
	if err := s.client.SAdd(ctx, roomsKey, room).Err(); err != nil {
		return storeError(err)
	}
	return nil
}

// Config implements waitroom.Store.
func (s *Store) Config(ctx context.Context, room string) (waitroom.RoomConfig, error) {
	vals, err := s.client.HMGet(ctx, KeysFor(room).Config, "capacity", "lease_ms", "interval_ms", "mode").Result()
	if err != nil {
		return waitroom.RoomConfig{}, storeError(err)
	}
	if vals[0] == nil {
		return waitroom.RoomConfig{}, waitroom.ErrNoRoom
	}
	num := func(v any) int64 {
		n, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
		return n
	}
	return waitroom.RoomConfig{
		Capacity:      int(num(vals[0])),
		Lease:         time.Duration(num(vals[1])) * time.Millisecond,
		AdmitInterval: time.Duration(num(vals[2])) * time.Millisecond,
		Mode:          waitroom.Mode(fmt.Sprint(vals[3])),
	}, nil
}

// DeleteRoom removes a room and every key it has. Instances stop admitting
// for it at their next room refresh. Users still in it are forgotten.
func (s *Store) DeleteRoom(ctx context.Context, room string) error {
	k := KeysFor(room)
	if err := s.client.SRem(ctx, roomsKey, room).Err(); err != nil {
		return storeError(err)
	}
	// One slot, so one DEL works on Cluster too.
	if err := s.client.Del(ctx, k.Config, k.Seq, k.Queue, k.Active, k.State, k.SeqOf, k.Stats, k.Leader).Err(); err != nil {
		return storeError(err)
	}
	return nil
}

// Rooms lists every configured room.
func (s *Store) Rooms(ctx context.Context) ([]string, error) {
	rooms, err := s.client.SMembers(ctx, roomsKey).Result()
	if err != nil {
		return nil, storeError(err)
	}
	return rooms, nil
}

// Join implements waitroom.Store.
func (s *Store) Join(ctx context.Context, room, user string) (waitroom.Ticket, error) {
	res, err := joinScript.Run(ctx, s.users, KeysFor(room).scriptKeys(), user).Slice()
	if err != nil {
		return waitroom.Ticket{}, storeError(err)
	}
	t, err := ticketFrom(room, user, res)
	if err == nil && len(res) > 4 {
		created, _ := res[4].(int64)
		t.Created = created == 1
	}
	return t, err
}

// Ticket implements waitroom.Store.
func (s *Store) Ticket(ctx context.Context, room, user string) (waitroom.Ticket, error) {
	res, err := ticketScript.Run(ctx, s.users, KeysFor(room).scriptKeys(), user).Slice()
	if err != nil {
		return waitroom.Ticket{}, storeError(err)
	}
	return ticketFrom(room, user, res)
}

// Leave implements waitroom.Store.
func (s *Store) Leave(ctx context.Context, room, user string) (waitroom.Ticket, error) {
	res, err := leaveScript.Run(ctx, s.users, KeysFor(room).scriptKeys(), user).Slice()
	if err != nil {
		return waitroom.Ticket{}, storeError(err)
	}
	if len(res) != 2 {
		return waitroom.Ticket{}, fmt.Errorf("redisstore: leave: unexpected reply %v", res)
	}
	return waitroom.Ticket{Room: room, User: user, State: waitroom.State(fmt.Sprint(res[0])), Position: -1}, nil
}

// ticketFrom decodes {state, rank, seq, lease_expiry_ms, ...}.
func ticketFrom(room, user string, res []any) (waitroom.Ticket, error) {
	if len(res) < 4 {
		return waitroom.Ticket{}, fmt.Errorf("redisstore: unexpected reply %v", res)
	}
	t := waitroom.Ticket{Room: room, User: user, State: waitroom.State(fmt.Sprint(res[0]))}
	t.Position, _ = res[1].(int64)
	t.Seq, _ = res[2].(int64)
	if ms, _ := res[3].(int64); ms > 0 {
		t.LeaseExpires = time.UnixMilli(ms).UTC()
	}
	return t, nil
}

// Admit implements waitroom.Store.
func (s *Store) Admit(ctx context.Context, room string, mode waitroom.Mode, instance string) (waitroom.AdmitResult, error) {
	var (
		res waitroom.AdmitResult
		err error
	)
	switch mode {
	case waitroom.ModeAtomic:
		res, err = s.admitAtomic(ctx, room)
	case waitroom.ModeNaive:
		res, err = s.admitNaive(ctx, room)
	case waitroom.ModeLeader:
		res, err = s.admitLeader(ctx, room, instance)
	case waitroom.ModeOptimistic:
		res, err = s.admitOptimistic(ctx, room)
	default:
		return res, fmt.Errorf("redisstore: unknown admission mode %q", mode)
	}
	if err != nil {
		return res, storeError(err)
	}
	return res, nil
}

func (s *Store) admitAtomic(ctx context.Context, room string) (waitroom.AdmitResult, error) {
	out, err := admitScript.Run(ctx, s.client, KeysFor(room).scriptKeys(), MaxBatch).Slice()
	if err != nil {
		return waitroom.AdmitResult{}, err
	}
	res := waitroom.AdmitResult{RoundTrips: 1}
	n, _ := out[0].(int64)
	res.Expired = int(n)
	ms, _ := out[1].(int64)
	res.At = time.UnixMilli(ms).UTC()
	for _, u := range out[2:] {
		res.Admitted = append(res.Admitted, fmt.Sprint(u))
		res.AdmittedAt = append(res.AdmittedAt, res.At)
	}
	return res, nil
}

// reclaim runs the reclaim script and returns the expired count and the
// server time, for the modes that admit in several steps.
func (s *Store) reclaim(ctx context.Context, room string) (int, int64, error) {
	out, err := reclaimScript.Run(ctx, s.client, KeysFor(room).scriptKeys()).Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	return int(out[0]), out[1], nil
}

// capacityAndLease reads the two configuration fields admission needs.
func (s *Store) capacityAndLease(ctx context.Context, k Keys) (int64, int64, error) {
	vals, err := s.client.HMGet(ctx, k.Config, "capacity", "lease_ms").Result()
	if err != nil {
		return 0, 0, err
	}
	if vals[0] == nil {
		return 0, 0, waitroom.ErrNoRoom
	}
	capacity, _ := strconv.ParseInt(fmt.Sprint(vals[0]), 10, 64)
	lease, _ := strconv.ParseInt(fmt.Sprint(vals[1]), 10, 64)
	return capacity, lease, nil
}

// admitNaive is the seed's first design, kept to be measured: count, pop
// the free number, add each, in separate round trips. Two instances between
// the count and the adds both fill the same free slots.
func (s *Store) admitNaive(ctx context.Context, room string) (waitroom.AdmitResult, error) {
	k := KeysFor(room)
	var res waitroom.AdmitResult
	capacity, lease, err := s.capacityAndLease(ctx, k)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	expired, now, err := s.reclaim(ctx, room)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	res.Expired, res.At = expired, time.UnixMilli(now).UTC()
	active, err := s.client.ZCard(ctx, k.Active).Result()
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	free := min(capacity-active, MaxBatch)
	if free <= 0 {
		return res, nil
	}
	popped, at, err := s.popWithTime(ctx, k, free)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	for _, z := range popped {
		user := fmt.Sprint(z.Member)
		if err := s.enter(ctx, k, user, at.UnixMilli()+lease); err != nil {
			return res, err
		}
		res.RoundTrips++
		res.Admitted = append(res.Admitted, user)
		res.AdmittedAt = append(res.AdmittedAt, at)
	}
	return res, nil
}

// popWithTime pops up to n users and reads the server clock in the same
// round trip, just before the pop: the moment these users left the queue.
func (s *Store) popWithTime(ctx context.Context, k Keys, n int64) ([]redis.Z, time.Time, error) {
	var (
		now *redis.TimeCmd
		pop *redis.ZSliceCmd
	)
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		pop = p.ZPopMin(ctx, k.Queue, n)
		return nil
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return pop.Val(), now.Val().UTC().Truncate(time.Millisecond), nil
}

// enter adds one popped user to the room: one round trip.
func (s *Store) enter(ctx context.Context, k Keys, user string, expiresMS int64) error {
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, k.Active, redis.Z{Score: float64(expiresMS), Member: user})
		p.HSet(ctx, k.State, user, string(waitroom.StateAdmitted))
		p.HIncrBy(ctx, k.Stats, "admitted", 1)
		return nil
	})
	return err
}

// admitLeader runs naive admission only on the elected instance. The
// election key lives for two admit intervals and its holder renews it on
// every pass, so one instance leads while it is alive.
func (s *Store) admitLeader(ctx context.Context, room, instance string) (waitroom.AdmitResult, error) {
	k := KeysFor(room)
	interval, err := s.client.HGet(ctx, k.Config, "interval_ms").Int64()
	if errors.Is(err, redis.Nil) {
		return waitroom.AdmitResult{RoundTrips: 1}, waitroom.ErrNoRoom
	}
	if err != nil {
		return waitroom.AdmitResult{RoundTrips: 1}, err
	}
	leads, err := leaderScript.Run(ctx, s.client, []string{k.Leader}, instance, 2*interval).Int64()
	if err != nil {
		return waitroom.AdmitResult{RoundTrips: 2}, err
	}
	if leads != 1 {
		return waitroom.AdmitResult{RoundTrips: 2, Skipped: true}, nil
	}
	res, err := s.admitNaive(ctx, room)
	res.RoundTrips += 2
	return res, err
}

// admitOptimistic is the seed's leaderless design, kept to be measured: pop
// one user, add them, count; over capacity, undo and put the user back with
// their original score. Between the add and the undo the room is over
// capacity.
func (s *Store) admitOptimistic(ctx context.Context, room string) (waitroom.AdmitResult, error) {
	k := KeysFor(room)
	var res waitroom.AdmitResult
	capacity, lease, err := s.capacityAndLease(ctx, k)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	expired, now, err := s.reclaim(ctx, room)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	res.Expired, res.At = expired, time.UnixMilli(now).UTC()
	for range MaxBatch {
		popped, at, err := s.popWithTime(ctx, k, 1)
		res.RoundTrips++
		if err != nil || len(popped) == 0 {
			return res, err
		}
		user := fmt.Sprint(popped[0].Member)
		if err := s.client.ZAdd(ctx, k.Active, redis.Z{Score: float64(at.UnixMilli() + lease), Member: user}).Err(); err != nil {
			return res, err
		}
		res.RoundTrips++
		active, err := s.client.ZCard(ctx, k.Active).Result()
		res.RoundTrips++
		if err != nil {
			return res, err
		}
		if active > capacity {
			// Over: undo and restore the user at their place in line.
			_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.ZRem(ctx, k.Active, user)
				p.ZAdd(ctx, k.Queue, popped[0])
				return nil
			})
			res.RoundTrips++
			return res, err
		}
		_, err = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, k.State, user, string(waitroom.StateAdmitted))
			p.HIncrBy(ctx, k.Stats, "admitted", 1)
			return nil
		})
		res.RoundTrips++
		if err != nil {
			return res, err
		}
		res.Admitted = append(res.Admitted, user)
		res.AdmittedAt = append(res.AdmittedAt, at)
	}
	return res, nil
}

// NextExpiry implements waitroom.Store.
func (s *Store) NextExpiry(ctx context.Context, room string) (time.Time, bool, error) {
	zs, err := s.client.ZRangeWithScores(ctx, KeysFor(room).Active, 0, 0).Result()
	if err != nil {
		return time.Time{}, false, storeError(err)
	}
	if len(zs) == 0 {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(int64(zs[0].Score)).UTC(), true, nil
}

// Stats implements waitroom.Store: one round trip.
func (s *Store) Stats(ctx context.Context, room string) (waitroom.RoomStats, error) {
	k := KeysFor(room)
	var (
		capacity      *redis.StringCmd
		active, queue *redis.IntCmd
		counters      *redis.MapStringStringCmd
	)
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		capacity = p.HGet(ctx, k.Config, "capacity")
		active = p.ZCard(ctx, k.Active)
		queue = p.ZCard(ctx, k.Queue)
		counters = p.HGetAll(ctx, k.Stats)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return waitroom.RoomStats{}, waitroom.ErrNoRoom
	}
	if err != nil {
		return waitroom.RoomStats{}, storeError(err)
	}
	c := counters.Val()
	n := func(name string) int64 { v, _ := strconv.ParseInt(c[name], 10, 64); return v }
	capN, _ := capacity.Int64()
	return waitroom.RoomStats{
		Capacity: capN, Active: active.Val(), Waiting: queue.Val(),
		JoinedTotal: n("joined"), AdmittedTotal: n("admitted"), ReleasedTotal: n("released"),
		ExpiredTotal: n("expired"), LeftTotal: n("left"),
	}, nil
}

// storeError turns script errors into the domain's errors and anything
// else into an unavailable error.
func storeError(err error) error {
	var wr *waitroom.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &wr), errors.Is(err, waitroom.ErrNoRoom), errors.Is(err, waitroom.ErrNoTicket):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case strings.Contains(err.Error(), "NOROOM"):
		return waitroom.ErrNoRoom
	case strings.Contains(err.Error(), "NOTICKET"):
		return waitroom.ErrNoTicket
	default:
		return waitroom.Unavailable(err)
	}
}
