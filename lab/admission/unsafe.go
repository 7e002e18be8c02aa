package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// The admission modes the lab compares. Only waitroom.ModeAtomic (the
// store's own Admit) is safe with several instances; the others are the
// older designs, kept here to be measured and never reachable from the
// waiting room itself.
const (
	// ModeNaive counts the room, pops the free number of users and adds
	// them, in separate round trips. Two instances admitting at once can
	// both see the same free slots: the room overfills.
	ModeNaive waitroom.Mode = "naive"
	// ModeLeader runs ModeNaive only on the instance that wins a per-tick
	// SET NX PX election.
	ModeLeader waitroom.Mode = "leader"
	// ModeOptimistic pops one user, adds them to the room, counts, and
	// undoes the admission when the count is over capacity. The room can be
	// over capacity for the moment between the add and the undo.
	ModeOptimistic waitroom.Mode = "optimistic"
)

// Modes lists every mode in the order the lab reports them.
func Modes() []waitroom.Mode {
	return []waitroom.Mode{ModeNaive, ModeLeader, ModeOptimistic, waitroom.ModeAtomic}
}

// ParseMode turns a name into a mode.
func ParseMode(name string) (waitroom.Mode, error) {
	for _, m := range Modes() {
		if string(m) == name {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown mode %q (want naive, leader, optimistic or atomic)", name)
}

// UnsafeStore is a Redis store whose Admit runs one of the lab's unsafe
// modes: every other method is the real store's. It exists so that the
// lab can run the same service on each algorithm and count how often the
// room overfills.
type UnsafeStore struct {
	*redisstore.Store
	store    *redisstore.Store
	client   redis.UniversalClient
	mode     waitroom.Mode
	instance string
}

// StoreFor returns the store a lab instance named instance admits with in
// mode: store itself for waitroom.ModeAtomic, else an UnsafeStore over it
// and client (the Redis client store uses).
func StoreFor(store *redisstore.Store, client redis.UniversalClient, mode waitroom.Mode, instance string) (waitroom.Store, error) {
	if mode == waitroom.ModeAtomic {
		return store, nil
	}
	if _, err := ParseMode(string(mode)); err != nil {
		return nil, err
	}
	return &UnsafeStore{Store: store, store: store, client: client, mode: mode, instance: instance}, nil
}

// Admit runs one pass in the store's mode. The multi-step modes run under
// the caller's deadline (the admitter's pass deadline) and are never
// abandoned halfway (see step). They reclaim leases and admit up to
// capacity, nothing else: the outflow limit, opening time, pause, close,
// abandonment, arrival and retention are the atomic pass's alone. A room
// of several queue shards admits atomically only.
func (s *UnsafeStore) Admit(ctx context.Context, room string) (waitroom.AdmitResult, error) {
	return s.AdmitMode(ctx, room, s.mode, s.instance)
}

// AdmitMode runs one pass in mode on behalf of instance (the leader
// election's candidate); waitroom.ModeAtomic is the real store's Admit.
func (s *UnsafeStore) AdmitMode(ctx context.Context, room string, mode waitroom.Mode, instance string) (waitroom.AdmitResult, error) {
	if mode == waitroom.ModeAtomic {
		return s.store.Admit(ctx, room)
	}
	var (
		res waitroom.AdmitResult
		err error
	)
	k, err := s.store.QueueShards(ctx, room)
	if err != nil {
		return res, err
	}
	if k > 1 {
		return res, fmt.Errorf("admission lab: a room of %d queue shards admits atomically only, not %q", k, mode)
	}
	switch mode {
	case ModeNaive:
		res, err = s.admitNaive(ctx, room)
	case ModeLeader:
		res, err = s.admitLeader(ctx, room, instance)
	case ModeOptimistic:
		res, err = s.admitOptimistic(ctx, room)
	default:
		return res, fmt.Errorf("admission lab: unknown admission mode %q", mode)
	}
	if err != nil && !errors.Is(err, waitroom.ErrNoRoom) {
		if _, ok := errors.AsType[*waitroom.Error](err); !ok {
			err = waitroom.Unavailable(err)
		}
	}
	return res, err
}

// step runs one round trip of a multi-step pass under the caller's
// context, on the caller's goroutine. It imposes no deadline of its own:
// a step cut short after Redis ran it (a ZPOPMIN whose answer came late,
// say) would drop the users it popped, so the whole pass shares the
// caller's deadline instead.
func step[T any](ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	return fn(ctx)
}

// step0 is step for functions without a result.
func step0(ctx context.Context, fn func(ctx context.Context) error) error { return fn(ctx) }

// capacityAndLease reads the two configuration fields admission needs.
func (s *UnsafeStore) capacityAndLease(ctx context.Context, k redisstore.Keys) (int64, int64, error) {
	vals, err := step(ctx, func(ctx context.Context) ([]any, error) {
		return s.client.HMGet(ctx, k.Config, "capacity", "lease_ms").Result()
	})
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

// zcard counts a sorted set: one round trip.
func (s *UnsafeStore) zcard(ctx context.Context, key string) (int64, error) {
	return step(ctx, func(ctx context.Context) (int64, error) { return s.client.ZCard(ctx, key).Result() })
}

// admitNaive is the published waiting-room write-up's first design, kept to be measured: count, pop
// the free number, add each, in separate round trips. Two instances between
// the count and the adds both fill the same free slots.
func (s *UnsafeStore) admitNaive(ctx context.Context, room string) (waitroom.AdmitResult, error) {
	k := redisstore.KeysFor(room)
	var res waitroom.AdmitResult
	capacity, lease, err := s.capacityAndLease(ctx, k)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	expired, now, err := s.store.Reclaim(ctx, room)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	res.Expired, res.At = expired, time.UnixMilli(now).UTC()
	active, err := s.zcard(ctx, k.Active)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	free := min(capacity-active, redisstore.MaxBatch)
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

// popped is what popWithTime read.
type popped struct {
	users []redis.Z
	at    time.Time
}

// popWithTime pops up to n users and reads the server clock in the same
// round trip, just before the pop: the moment these users left the queue.
func (s *UnsafeStore) popWithTime(ctx context.Context, k redisstore.Keys, n int64) ([]redis.Z, time.Time, error) {
	p, err := step(ctx, func(ctx context.Context) (popped, error) {
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
			return popped{}, err
		}
		return popped{pop.Val(), now.Val().UTC().Truncate(time.Millisecond)}, nil
	})
	return p.users, p.at, err
}

// enter adds one popped user to the room: one round trip.
func (s *UnsafeStore) enter(ctx context.Context, k redisstore.Keys, user string, expiresMS int64) error {
	return step0(ctx, func(ctx context.Context) error {
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, k.Active, redis.Z{Score: float64(expiresMS), Member: user})
			p.HSet(ctx, k.State, user, string(waitroom.StateAdmitted))
			p.HIncrBy(ctx, k.Stats, "admitted", 1)
			return nil
		})
		return err
	})
}

// admitLeader runs naive admission only on the elected instance. The
// election key lives for two admit intervals and its holder renews it on
// every pass, so one instance leads while it is alive.
func (s *UnsafeStore) admitLeader(ctx context.Context, room, instance string) (waitroom.AdmitResult, error) {
	k := redisstore.KeysFor(room)
	interval, err := step(ctx, func(ctx context.Context) (int64, error) { return s.client.HGet(ctx, k.Config, "interval_ms").Int64() })
	if errors.Is(err, redis.Nil) {
		return waitroom.AdmitResult{RoundTrips: 1}, waitroom.ErrNoRoom
	}
	if err != nil {
		return waitroom.AdmitResult{RoundTrips: 1}, err
	}
	leads, err := step(ctx, func(ctx context.Context) (int64, error) {
		return leaderScript.Run(ctx, s.client, []string{leaderKey(room)}, instance, 2*interval).Int64()
	})
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

// admitOptimistic is the published write-up's leaderless design, kept to be measured: pop
// one user, add them, count; over capacity, undo and put the user back with
// their original score. Between the add and the undo the room is over
// capacity.
func (s *UnsafeStore) admitOptimistic(ctx context.Context, room string) (waitroom.AdmitResult, error) {
	k := redisstore.KeysFor(room)
	var res waitroom.AdmitResult
	capacity, lease, err := s.capacityAndLease(ctx, k)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	expired, now, err := s.store.Reclaim(ctx, room)
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	res.Expired, res.At = expired, time.UnixMilli(now).UTC()
	for range redisstore.MaxBatch {
		popped, at, err := s.popWithTime(ctx, k, 1)
		res.RoundTrips++
		if err != nil || len(popped) == 0 {
			return res, err
		}
		user := fmt.Sprint(popped[0].Member)
		err = step0(ctx, func(ctx context.Context) error {
			return s.client.ZAdd(ctx, k.Active, redis.Z{Score: float64(at.UnixMilli() + lease), Member: user}).Err()
		})
		if err != nil {
			return res, err
		}
		res.RoundTrips++
		active, err := s.zcard(ctx, k.Active)
		res.RoundTrips++
		if err != nil {
			return res, err
		}
		if active > capacity {
			// Over: undo and restore the user at their place in line.
			err := step0(ctx, func(ctx context.Context) error {
				_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.ZRem(ctx, k.Active, user)
					p.ZAdd(ctx, k.Queue, popped[0])
					return nil
				})
				return err
			})
			res.RoundTrips++
			return res, err
		}
		err = step0(ctx, func(ctx context.Context) error {
			_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.HSet(ctx, k.State, user, string(waitroom.StateAdmitted))
				p.HIncrBy(ctx, k.Stats, "admitted", 1)
				return nil
			})
			return err
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

// leaderKey is the leader mode's lease of room: in the room's hash slot
// (its tag), but not one of the store's keys, since production has no
// leader; it expires two ticks after its last renewal.
func leaderKey(room string) string { return "{" + room + "}:leader" }
