package redisstore

// Sharded rooms (RoomConfig.QueueShards = K > 1).
//
// One room's keys share one hash tag, so one room lives on one Redis
// shard, and joins to it are bound by that shard's CPU. A sharded room
// keeps its waiting line in K queue shards, each with its own hash tag
// {room#k} (a room name cannot contain '#'), so that on Redis Cluster the
// shards can live on different masters. A user belongs to shard
// FNV-1a(user) mod K. The admitted set, and so the atomic admission and the
// exact capacity, stays on the room's own slot {room}, with the room's
// configuration, counters and the state of every admitted user: a shard
// knows its users only while they wait (or are set aside, or finished
// there), and forgets a user once they are admitted.
//
// Each join gets a global order stamp: the shard's Redis TIME in µs,
// raised so that it is unique and rising within the shard and later than
// every stamp the calling Store has seen (a hybrid logical clock: joins
// that one instance sees one after the other are ordered, whatever the
// shards' clocks), then the shard, then a sequence. An admission pass:
//
//  1. prepares on the room's slot: reclaims leases and no-shows, forgets
//     finished users, and computes the free places (capacity, outflow
//     bucket, batch), or none while the room is paused, closed or not open;
//  2. peeks every shard at once: each closes, sets aside, abandons and
//     forgets its own users, shuffles its pre-queue once the room opens,
//     and returns its head;
//  3. admits on the room's slot the earliest heads across the shards, in
//     stamp order, re-checking the free places (exact capacity whatever
//     runs at once), each recorded as moving;
//  4. finalizes on each shard: takes the admitted users out of the queue,
//     unless one left (or was closed, set aside, re-joined) meanwhile;
//  5. settles on the room's slot: ends the moving records, and undoes the
//     admissions of users who left in between (they were never told).
//
// Every step is idempotent: a pass that dies between 3 and 5 leaves moving
// records, which the next pass (any instance) finalizes and settles once
// they are older than staleMoving.
//
// Fairness: stamps from different masters are ordered by their clocks, so
// two users who joined different shards within the clock difference of
// their masters may be admitted in either order. ClockTolerance measures
// that difference; the room counts admitted stamps earlier than an
// already admitted one by more than the tolerance (ShardStats.Inversions).

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
)

// staleMoving is how old an admission's moving record must be before a
// pass of another instance finalizes it (the pass that made it died).
const staleMoving = 10 * time.Second

// shardsTTL is how long a Store trusts what it read of a room's
// QueueShards. QueueShards never changes while a room exists; a room
// deleted and created again with another value is seen within shardsTTL.
const shardsTTL = 2 * time.Second

// toleranceTTL is how long a measured clock tolerance is used.
const toleranceTTL = time.Minute

// sampleSize is how many stamps a position sample of one shard holds.
const sampleSize = 1024

// sharding is what a Store keeps about sharded rooms.
type sharding struct {
	positionCache time.Duration
	// rooms maps a room to its shardsEntry.
	rooms sync.Map
	// samples maps a shard's queue key to its *queueSample.
	samples sync.Map
	// tolerances maps a room to its toleranceEntry.
	tolerances sync.Map
	// hint is the latest order stamp this Store has seen (µs).
	hint atomic.Int64
	// dieAfterAdmit, for tests, ends an admission pass right after its
	// admit step, as a crashed instance would.
	dieAfterAdmit bool
}

// errDied is the error of a pass ended by dieAfterAdmit.
var errDied = errors.New("redisstore: admission pass ended after its admit step (test)")

type shardsEntry struct {
	k  int
	at time.Time
}

type toleranceEntry struct {
	tol time.Duration
	at  time.Time
}

// queueSample is a sample of one shard's queue stamps.
type queueSample struct {
	at     time.Time
	count  int64
	stamps []float64
}

// ShardKeys names the Redis keys of one queue shard of a sharded room; all
// share the hash tag {room#shard}.
type ShardKeys struct {
	Config, Seq, Queue, State, Stats, JoinedAt, Seen, Away, AwayAt, Done, SeqOf string
	// Invites holds the shard's used invites (see Keys.Invites): an
	// invite's place is always in the same shard.
	Invites string
	// Ack is the marker written before a WAIT (Config.AckReplicas).
	Ack string
}

// ShardKeysFor returns the keys of room's queue shard number shard.
func ShardKeysFor(room string, shard int) ShardKeys {
	p := "{" + room + "#" + strconv.Itoa(shard) + "}:"
	return ShardKeys{
		Config: p + "cfg", Seq: p + "seq", Queue: p + "queue", State: p + "state", Stats: p + "stats",
		JoinedAt: p + "joinedat", Seen: p + "seen", Away: p + "away", AwayAt: p + "awayat", Done: p + "done",
		SeqOf: p + "seqof", Ack: p + "ack", Invites: p + "invites",
	}
}

// list is the KEYS list of the shard scripts (see shardscripts.go); the
// fifth place is unused.
func (k ShardKeys) list() []string {
	return []string{k.Config, k.Seq, k.Queue, k.State, k.Config, k.Stats, k.JoinedAt, k.Seen, k.Away, k.AwayAt, k.Done, k.SeqOf}
}

// All lists every key of the shard.
func (k ShardKeys) All() []string {
	return []string{k.Config, k.Seq, k.Queue, k.State, k.Stats, k.JoinedAt, k.Seen, k.Away, k.AwayAt, k.Done, k.SeqOf, k.Ack, k.Invites}
}

// withInvites is the KEYS list of the shard's join and stats scripts: the
// shard keys, then invites.
func (k ShardKeys) withInvites() []string { return append(k.list(), k.Invites) }

// ShardOf returns the queue shard of user in a room of k shards.
func ShardOf(user string, k int) int {
	if k <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(user))
	return int(h.Sum32() % uint32(k))
}

// effectiveShards maps 0 to 1.
func effectiveShards(k int) int { return max(k, 1) }

// queueShards returns room's number of queue shards (1 for a room with
// one queue, or one that does not exist).
func (s *Store) queueShards(ctx context.Context, room string) (int, error) {
	if e, ok := s.rooms.Load(room); ok && time.Since(e.(shardsEntry).at) < shardsTTL {
		return e.(shardsEntry).k, nil
	}
	exists, k, err := s.storedShards(ctx, room)
	if err != nil || !exists {
		return 1, err
	}
	s.rooms.Store(room, shardsEntry{k: k, at: time.Now()})
	return k, nil
}

// storedShards reads whether room exists and its number of queue shards.
func (s *Store) storedShards(ctx context.Context, room string) (bool, int, error) {
	vals, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return s.client.HMGet(ctx, KeysFor(room).Config, "capacity", "queue_shards").Result()
	})
	if err != nil {
		return false, 0, err
	}
	if vals[0] == nil {
		return false, 1, nil
	}
	k := 1
	if vals[1] != nil {
		n, _ := strconv.Atoi(fmt.Sprint(vals[1]))
		k = effectiveShards(n)
	}
	return true, k, nil
}

// checkShards refuses a change of QueueShards in an existing room.
func (s *Store) checkShards(ctx context.Context, room string, cfg waitroom.RoomConfig) error {
	exists, k, err := s.storedShards(ctx, room)
	if err != nil {
		return err
	}
	if exists && k != effectiveShards(cfg.QueueShards) {
		return &waitroom.Error{Code: waitroom.CodeInvalid, Field: "queue_shards",
			Message: fmt.Sprintf("queue_shards is fixed when a room is created (this room has %d); delete the room to change it", k)}
	}
	return nil
}

// shardConfigFields are the configuration fields a queue shard keeps a
// copy of.
var shardConfigFields = map[string]bool{"closed": true, "closed_message": true, "abandon_after_seconds": true,
	"retention_seconds": true, "lease_seconds": true, "max_waiting": true, "max_joins_per_second": true,
	"closes_at": true, "schedule": true, "invite_only": true}

// shardShare is a shard's share, rounded up, of a room-wide bound n over
// k shards (0, no bound, stays 0).
func shardShare(n, k int) int { return (n + k - 1) / k }

// writeShardConfigs copies the fields (JSON names) the shards need to every
// shard of a room of k shards.
func (s *Store) writeShardConfigs(ctx context.Context, room string, k int, cfg waitroom.RoomConfig, fields []string) error {
	var names []string
	for _, f := range fields {
		if shardConfigFields[f] {
			names = append(names, f)
		}
	}
	if len(names) == 0 {
		return nil
	}
	// The bounds on the line and on joins are the room's: each shard
	// enforces its share.
	cfg.MaxWaiting, cfg.MaxJoinsPerSecond = shardShare(cfg.MaxWaiting, k), shardShare(cfg.MaxJoinsPerSecond, k)
	args, err := hashArgs(cfg, names)
	if err != nil {
		return err
	}
	return call0(s, ctx, func(ctx context.Context) error {
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range k {
				p.HSet(ctx, ShardKeysFor(room, i).Config, args...)
			}
			return nil
		})
		return err
	})
}

// runAll runs one script per key list at once (a pipeline; on Cluster,
// the nodes in parallel), falling back to EVAL for a script the server
// does not hold yet.
func (s *Store) runAll(ctx context.Context, sc *redis.Script, keys [][]string, args [][]any) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(keys))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range keys {
			cmds[i] = sc.EvalSha(ctx, p, keys[i], args[i]...)
		}
		return nil
	})
	for i, c := range cmds {
		if err := c.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmds[i] = sc.Run(ctx, s.client, keys[i], args[i]...)
		}
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return cmds, err
		}
	}
	return cmds, nil
}

// seeStamp raises the Store's hint to stamp.
func (s *Store) seeStamp(stamp int64) {
	for {
		cur := s.hint.Load()
		if stamp <= cur || s.hint.CompareAndSwap(cur, stamp) {
			return
		}
	}
}

// joinAttempts bounds how often a join of a user the shard let go to the
// room asks the room and the shard again, while admissions of that user
// race with it.
const joinAttempts = 5

// shardedJoin is Join in a room of k shards.
func (s *Store) shardedJoin(ctx context.Context, room, user string, k int, invite string) (waitroom.Ticket, error) {
	shard := ShardOf(user, k)
	keys := ShardKeysFor(room, shard)
	sk := keys.withInvites()
	ended := ""
	for range joinAttempts {
		res, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
			if s.ackReplicas > 0 {
				// Confirmed by the shard's replicas (see replicas.go).
				return s.onMaster(ctx, keys.Config, keys.Ack, func(ctx context.Context, conn *redis.Conn) ([]any, error) {
					return shardJoinScript.Run(ctx, conn, sk, user, s.hint.Load(), ended, invite).Slice()
				})
			}
			return shardJoinScript.Run(ctx, s.users, sk, user, s.hint.Load(), ended, invite).Slice()
		})
		if err != nil {
			return waitroom.Ticket{}, err
		}
		gen, unknown := shardUnknown(res)
		if !unknown {
			return s.shardTicket(ctx, room, user, shard, k, res)
		}
		// Not waiting here: the room knows whether an admission holds.
		t, err := s.read(ctx, room, user, 0)
		switch {
		case err == nil && t.State == waitroom.StateAdmitted:
			t.Generation = gen
			return t, nil
		case err == nil:
			ended = strconv.FormatInt(t.Seq, 10)
		case errors.Is(err, waitroom.ErrNoTicket):
			ended = "0" // the room forgot the admission: it ended long ago
		default:
			return waitroom.Ticket{}, err
		}
	}
	return waitroom.Ticket{}, waitroom.Unavailable(fmt.Errorf("redisstore: join of %q in %q raced with its admissions %d times", user, room, joinAttempts))
}

// shardTicket decodes a shard's view and, for a waiting user, adds the
// users ahead in the other shards.
func (s *Store) shardTicket(ctx context.Context, room, user string, shard, k int, res []any) (waitroom.Ticket, error) {
	if len(res) < 7 {
		return waitroom.Ticket{}, fmt.Errorf("redisstore: unexpected shard reply %v", res)
	}
	t, err := ticketFrom(room, user, res[:6])
	if err != nil {
		return t, err
	}
	stamp, _ := res[6].(int64)
	if len(res) > 7 {
		t.Generation, _ = res[7].(int64)
	}
	if t.State != waitroom.StateWaiting || stamp == 0 {
		return t, nil
	}
	s.seeStamp(stamp)
	ahead, err := s.aheadElsewhere(ctx, room, shard, k, stamp)
	if err != nil {
		return waitroom.Ticket{}, err
	}
	t.Position += ahead
	return t, nil
}

// aheadElsewhere counts the users of the other shards whose stamps are
// earlier than stamp: exactly (one round trip) without a PositionCache,
// else from each shard's sample, at most PositionCache old.
func (s *Store) aheadElsewhere(ctx context.Context, room string, shard, k int, stamp int64) (int64, error) {
	if s.positionCache <= 0 {
		cmds := make([]*redis.IntCmd, 0, k-1)
		_, err := call(s, ctx, func(ctx context.Context) ([]redis.Cmder, error) {
			return s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j := range k {
					if j != shard {
						max := "(" + strconv.FormatInt(stamp, 10)
						if j < shard { // ties go to the lower shard
							max = strconv.FormatInt(stamp, 10)
						}
						cmds = append(cmds, p.ZCount(ctx, ShardKeysFor(room, j).Queue, "-inf", max))
					}
				}
				return nil
			})
		})
		if err != nil {
			return 0, err
		}
		var n int64
		for _, c := range cmds {
			n += c.Val()
		}
		return n, nil
	}
	var n int64
	for j := range k {
		if j == shard {
			continue
		}
		smp, err := s.sample(ctx, room, j)
		if err != nil {
			return 0, err
		}
		n += smp.ahead(float64(stamp))
	}
	return n, nil
}

// sample returns shard j's queue sample, refreshed when older than the
// PositionCache.
func (s *Store) sample(ctx context.Context, room string, j int) (*queueSample, error) {
	key := ShardKeysFor(room, j).Queue
	if v, ok := s.samples.Load(key); ok && time.Since(v.(*queueSample).at) < s.positionCache {
		return v.(*queueSample), nil
	}
	out, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return shardSampleScript.Run(ctx, s.client, ShardKeysFor(room, j).list(), sampleSize).Slice()
	})
	if err != nil {
		return nil, err
	}
	smp := &queueSample{at: time.Now()}
	smp.count, _ = out[0].(int64)
	for _, v := range out[1:] {
		f, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
		smp.stamps = append(smp.stamps, f)
	}
	s.samples.Store(key, smp)
	return smp, nil
}

// ahead estimates how many of the sampled queue's users have stamps below
// stamp: exact when the sample holds the whole queue, else interpolated
// between the sampled ranks.
func (q *queueSample) ahead(stamp float64) int64 {
	n := len(q.stamps)
	i, _ := slices.BinarySearch(q.stamps, stamp) // first sampled stamp ≥ stamp
	if int64(n) == q.count || n < 2 {
		return int64(i)
	}
	if i == 0 {
		return 0
	}
	if i == n {
		return q.count
	}
	rank := func(i int) float64 { return float64(i) * float64(q.count-1) / float64(n-1) }
	lo, hi := q.stamps[i-1], q.stamps[i]
	f := 0.0
	if hi > lo {
		f = (stamp - lo) / (hi - lo)
	}
	return int64(rank(i-1) + f*(rank(i)-rank(i-1)) + 0.5)
}

// shardedRead is Ticket (arrive 1) and MarkArrived in a room of k shards.
func (s *Store) shardedRead(ctx context.Context, room, user string, k int) (waitroom.Ticket, error) {
	shard := ShardOf(user, k)
	res, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return shardTicketScript.Run(ctx, s.users, ShardKeysFor(room, shard).list(), user).Slice()
	})
	if err != nil {
		return waitroom.Ticket{}, err
	}
	if gen, unknown := shardUnknown(res); unknown {
		t, err := s.read(ctx, room, user, 1)
		if err == nil {
			// The room's keys do not hold the join's time; the shard
			// that let the user go does.
			t.Generation = gen
		}
		return t, err
	}
	return s.shardTicket(ctx, room, user, shard, k, res)
}

// shardUnknown reports whether res is a shard's {'unknown', generation}
// answer (a user it let go to the room, or never saw), and the generation
// of the join it let go (0 when none).
func shardUnknown(res []any) (generation int64, unknown bool) {
	if len(res) < 1 || len(res) > 2 || fmt.Sprint(res[0]) != "unknown" {
		return 0, false
	}
	if len(res) == 2 {
		generation, _ = res[1].(int64)
	}
	return generation, true
}

// shardedLeave is Leave in a room of k shards.
func (s *Store) shardedLeave(ctx context.Context, room, user string, k int) (waitroom.Ticket, error) {
	res, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return shardLeaveScript.Run(ctx, s.users, ShardKeysFor(room, ShardOf(user, k)).list(), user).Slice()
	})
	if err != nil {
		return waitroom.Ticket{}, err
	}
	if _, unknown := shardUnknown(res); unknown {
		return s.leaveRoom(ctx, room, user)
	}
	if len(res) != 2 {
		return waitroom.Ticket{}, fmt.Errorf("redisstore: leave: unexpected reply %v", res)
	}
	return waitroom.Ticket{Room: room, User: user, State: waitroom.State(fmt.Sprint(res[0])), Position: -1}, nil
}

// candidate is a queue head offered for admission.
type candidate struct {
	user  string
	stamp int64
	shard int
	// seq is the admission's sequence number, once admitted.
	seq int64
}

// onRoomMaster runs script with the plain client, or, with AckReplicas,
// on a connection pinned to the room's master and confirmed by its
// replicas (see replicas.go): a sharded pass lets the shards go of the
// users it admitted only once the room's replicas have the admissions, so
// that a failover of the room's master cannot lose a user who is no
// longer in any shard.
func (s *Store) onRoomMaster(ctx context.Context, room string, script func(ctx context.Context, c redis.Scripter) ([]any, error)) ([]any, error) {
	if s.ackReplicas == 0 {
		return script(ctx, s.client)
	}
	k := KeysFor(room)
	return s.onMaster(ctx, k.Config, k.Ack, func(ctx context.Context, conn *redis.Conn) ([]any, error) {
		return script(ctx, conn)
	})
}

// shardedAdmit is one admission pass of a room of k shards (see the top
// of this file).
func (s *Store) shardedAdmit(ctx context.Context, room string, k int) (waitroom.AdmitResult, error) {
	rk := KeysFor(room).shardedKeys()
	res := waitroom.AdmitResult{}
	// 1. Prepare on the room's slot.
	prep, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return s.onRoomMaster(ctx, room, func(ctx context.Context, c redis.Scripter) ([]any, error) {
			return roomPrepScript.Run(ctx, c, rk, MaxBatch, staleMoving.Milliseconds()).Slice()
		})
	})
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	if len(prep) < 6 {
		return res, fmt.Errorf("redisstore: admit: unexpected reply %v", prep)
	}
	num := func(v any) int64 { n, _ := v.(int64); return n }
	res.At = time.UnixMilli(num(prep[1])).UTC()
	open, free, shuffle := num(prep[2]) == 1, num(prep[3]), num(prep[4])
	// Admissions a dead pass left moving: finalize and settle them.
	var stale []candidate
	for i := 6; i+1 < len(prep); i += 2 {
		var c candidate
		c.user = fmt.Sprint(prep[i])
		if _, err := fmt.Sscan(fmt.Sprint(prep[i+1]), &c.stamp, &c.shard, &c.seq); err == nil {
			stale = append(stale, c)
		}
	}
	if len(stale) > 0 {
		if _, err := s.finalize(ctx, room, k, stale); err != nil {
			return res, err
		}
		res.RoundTrips += 2
	}
	// 2. Peek every shard.
	// Each shard offers a share of the free places and half as much again;
	// only candidates up to the earliest last stamp of a shard that offered
	// all it was asked for are safe to admit (that shard may hold earlier
	// ones beyond), and only up to every shard's clock mark (a user who
	// joins a shard after its peek may be stamped earlier than a candidate
	// seen later on another shard, unless stamps beyond the marks wait).
	// So a pass may admit fewer than the free places, and the next pass
	// admits the rest.
	heads := int64(0)
	if open && free > 0 {
		heads = min(free, 3*free/int64(2*k)+8)
	}
	keys, args := make([][]string, k), make([][]any, k)
	seed := 1 + rand.Int64N(2147483646)
	for i := range k {
		keys[i] = ShardKeysFor(room, i).list()
		args[i] = []any{heads, MaxBatch, shuffle, seed + int64(i), s.hint.Load()}
	}
	var cmds []*redis.Cmd
	_, err = call(s, ctx, func(ctx context.Context) (struct{}, error) {
		var err error
		cmds, err = s.runAll(ctx, shardPeekScript, keys, args)
		return struct{}{}, err
	})
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	var cands []candidate
	bound := int64(math.MaxInt64)
	for i, c := range cmds {
		out, err := c.Slice()
		if err != nil || len(out) < 1 {
			return res, fmt.Errorf("redisstore: admit: shard %d: unexpected reply %v (%v)", i, out, err)
		}
		if len(out) < 2 {
			return res, fmt.Errorf("redisstore: admit: shard %d: unexpected reply %v", i, out)
		}
		res.Shuffled += int(num(out[0]))
		// A join on this shard after the peek is stamped after its mark:
		// a candidate up to every shard's mark has nobody unseen ahead.
		bound = min(bound, num(out[1]))
		var last int64
		for j := 2; j+1 < len(out); j += 2 {
			stamp, _ := strconv.ParseFloat(fmt.Sprint(out[j+1]), 64)
			last = int64(stamp)
			cands = append(cands, candidate{user: fmt.Sprint(out[j]), stamp: last, shard: i})
			s.seeStamp(last) // the next pass raises every mark past it
		}
		if int64(len(out)-2)/2 == heads && heads > 0 && heads < free {
			bound = min(bound, last)
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.stamp != b.stamp {
			return compare(a.stamp, b.stamp)
		}
		return a.shard - b.shard
	})
	safe := 0
	for safe < len(cands) && int64(safe) < free && cands[safe].stamp <= bound {
		safe++
	}
	cands = cands[:safe]
	// 3. Reclaim and admit on the room's slot (also with no candidates,
	// for the reclaim).
	tol, err := s.ClockTolerance(ctx, room)
	if err != nil {
		return res, err
	}
	if !open {
		cands = nil
	}
	admitArgs := []any{tol.Microseconds(), shuffle, MaxBatch}
	for _, c := range cands {
		admitArgs = append(admitArgs, c.user, c.stamp, c.shard)
	}
	out, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return s.onRoomMaster(ctx, room, func(ctx context.Context, c redis.Scripter) ([]any, error) {
			return roomAdmitScript.Run(ctx, c, rk, admitArgs...).Slice()
		})
	})
	res.RoundTrips++
	if err != nil {
		return res, err
	}
	if len(out) < 2 {
		return res, fmt.Errorf("redisstore: admit: unexpected reply %v", out)
	}
	at := time.UnixMilli(num(out[0])).UTC()
	res.Expired = int(num(out[1]))
	byUser := map[string]candidate{}
	for _, c := range cands {
		byUser[c.user] = c
	}
	var admitted []candidate
	for i := 2; i+1 < len(out); i += 2 {
		c := byUser[fmt.Sprint(out[i])]
		c.seq = num(out[i+1])
		admitted = append(admitted, c)
	}
	if len(admitted) == 0 {
		return res, nil
	}
	if s.dieAfterAdmit {
		return res, errDied
	}
	// 4 and 5. Let the shards go of them, and settle.
	ok, err := s.finalize(ctx, room, k, admitted)
	res.RoundTrips += 2
	if err != nil {
		return res, err
	}
	for i, c := range admitted {
		if ok[i] {
			res.Admitted = append(res.Admitted, c.user)
			res.AdmittedAt = append(res.AdmittedAt, at)
		}
	}
	return res, nil
}

func compare(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// finalize takes admitted users out of their shards, then ends their
// moving records on the room's slot, undoing the admissions of users who
// left meanwhile. It reports, per user, whether the admission stands.
func (s *Store) finalize(ctx context.Context, room string, k int, admitted []candidate) ([]bool, error) {
	byShard := make([][]any, k)
	index := make([][]int, k)
	for i, c := range admitted {
		if c.shard < 0 || c.shard >= k {
			continue
		}
		byShard[c.shard] = append(byShard[c.shard], c.user, c.stamp, c.seq)
		index[c.shard] = append(index[c.shard], i)
	}
	var keys [][]string
	var args [][]any
	var shards []int
	for i := range k {
		if len(byShard[i]) > 0 {
			keys = append(keys, ShardKeysFor(room, i).list())
			args = append(args, byShard[i])
			shards = append(shards, i)
		}
	}
	ok := make([]bool, len(admitted))
	_, err := call(s, ctx, func(ctx context.Context) (struct{}, error) {
		cmds, err := s.runAll(ctx, shardFinalizeScript, keys, args)
		if err != nil {
			return struct{}{}, err
		}
		for n, c := range cmds {
			vals, err := c.Int64Slice()
			if err != nil {
				return struct{}{}, err
			}
			for j, v := range vals {
				if j < len(index[shards[n]]) {
					ok[index[shards[n]][j]] = v == 1
				}
			}
		}
		return struct{}{}, nil
	})
	if err != nil {
		return nil, err
	}
	settle := make([]any, 0, 3*len(admitted))
	for i, c := range admitted {
		settle = append(settle, c.user, c.stamp, map[bool]int{true: 1, false: 0}[ok[i]])
	}
	err = call0(s, ctx, func(ctx context.Context) error {
		return roomSettleScript.Run(ctx, s.client, KeysFor(room).shardedKeys(), settle...).Err()
	})
	return ok, err
}

// ClockTolerance returns the fairness tolerance of room's order stamps:
// the largest difference between the clocks of the masters holding the
// room's slot and its queue shards, as read with TIME, plus the longest
// round trip of those reads (the uncertainty of each reading). Two users
// who joined different shards less than this apart may be admitted in
// either order. Measured at most once a minute per room; zero for a room
// with one queue.
func (s *Store) ClockTolerance(ctx context.Context, room string) (time.Duration, error) {
	if e, ok := s.tolerances.Load(room); ok && time.Since(e.(toleranceEntry).at) < toleranceTTL {
		return e.(toleranceEntry).tol, nil
	}
	k, err := s.queueShards(ctx, room)
	if err != nil || k <= 1 {
		return 0, err
	}
	keys := []string{KeysFor(room).Config}
	for i := range k {
		keys = append(keys, ShardKeysFor(room, i).Config)
	}
	var lo, hi, rtt time.Duration
	for i, key := range keys {
		start := time.Now()
		t, err := call(s, ctx, func(ctx context.Context) ([]int64, error) {
			return timeScript.Run(ctx, s.client, []string{key}).Int64Slice()
		})
		end := time.Now()
		if err != nil {
			return 0, err
		}
		if len(t) != 2 {
			return 0, fmt.Errorf("redisstore: TIME: unexpected reply %v", t)
		}
		server := time.Unix(t[0], t[1]*1000)
		offset := server.Sub(start.Add(end.Sub(start) / 2))
		if i == 0 || offset < lo {
			lo = offset
		}
		if i == 0 || offset > hi {
			hi = offset
		}
		rtt = max(rtt, end.Sub(start))
	}
	tol := hi - lo + rtt
	s.tolerances.Store(room, toleranceEntry{tol: tol, at: time.Now()})
	return tol, nil
}

// ShardStats describe a sharded room's queue shards.
type ShardStats struct {
	// Waiting counts the users waiting in each shard.
	Waiting []int64
	// Joined counts the joins of each shard.
	Joined []int64
	// Inversions counts admitted users whose order stamp is earlier than
	// an already admitted user's by more than the tolerance used.
	Inversions int64
	// Moving counts admissions whose users the shards have not let go yet.
	Moving int64
}

// ShardStats returns room's per-shard figures (one entry for a room with
// one queue).
func (s *Store) ShardStats(ctx context.Context, room string) (ShardStats, error) {
	k, err := s.queueShards(ctx, room)
	if err != nil {
		return ShardStats{}, err
	}
	var st ShardStats
	if k <= 1 {
		rs, err := s.Stats(ctx, room)
		if err != nil {
			return st, err
		}
		return ShardStats{Waiting: []int64{rs.Waiting}, Joined: []int64{rs.JoinedTotal}}, nil
	}
	parts, _, err := s.shardParts(ctx, room, k)
	if err != nil {
		return st, err
	}
	for _, p := range parts {
		st.Waiting = append(st.Waiting, p.waiting)
		st.Joined = append(st.Joined, p.counters["joined"])
	}
	vals, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		var inv *redis.StringCmd
		var mov *redis.IntCmd
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			inv = p.HGet(ctx, KeysFor(room).Stats, "inversions")
			mov = p.ZCard(ctx, KeysFor(room).Moving)
			return nil
		})
		if err != nil && err != redis.Nil {
			return nil, err
		}
		n, _ := inv.Int64()
		return []any{n, mov.Val()}, nil
	})
	if err != nil {
		return st, err
	}
	st.Inversions, st.Moving = vals[0].(int64), vals[1].(int64)
	return st, nil
}

// shardPart is one shard's figures.
type shardPart struct {
	waiting, away, oldestJoin int64
	counters                  map[string]int64
}

// shardParts reads every shard's figures at once, and the store's clock
// (ms).
func (s *Store) shardParts(ctx context.Context, room string, k int) ([]shardPart, int64, error) {
	keys, args := make([][]string, k), make([][]any, k)
	for i := range k {
		keys[i] = ShardKeysFor(room, i).withInvites()
	}
	var cmds []*redis.Cmd
	_, err := call(s, ctx, func(ctx context.Context) (struct{}, error) {
		var err error
		cmds, err = s.runAll(ctx, shardStatsScript, keys, args)
		return struct{}{}, err
	})
	if err != nil {
		return nil, 0, err
	}
	parts := make([]shardPart, k)
	for i, c := range cmds {
		out, err := c.Slice()
		if err != nil || len(out) < 3 {
			return nil, 0, fmt.Errorf("redisstore: shard %d stats: unexpected reply %v (%v)", i, out, err)
		}
		p := shardPart{counters: map[string]int64{}}
		p.waiting, _ = out[0].(int64)
		p.away, _ = out[1].(int64)
		p.oldestJoin, _ = out[2].(int64)
		for j := 3; j+1 < len(out); j += 2 {
			p.counters[fmt.Sprint(out[j])], _ = strconv.ParseInt(fmt.Sprint(out[j+1]), 10, 64)
		}
		parts[i] = p
	}
	return parts, 0, nil
}

// shardedStats adds the shards' figures to the room's own.
func (s *Store) shardedStats(ctx context.Context, room string, k int, st waitroom.RoomStats) (waitroom.RoomStats, error) {
	parts, _, err := s.shardParts(ctx, room, k)
	if err != nil {
		return st, err
	}
	now, err := call(s, ctx, func(ctx context.Context) (time.Time, error) { return s.client.Time(ctx).Result() })
	if err != nil {
		return st, err
	}
	oldest := int64(-1)
	for _, p := range parts {
		st.Waiting += p.waiting
		st.Away += p.away
		st.JoinedTotal += p.counters["joined"]
		st.LeftTotal += p.counters["left"]
		st.ClosedTotal += p.counters["closed"]
		st.AbandonedTotal += p.counters["abandoned"]
		st.InvitesUsed += p.counters["invites_used"]
		st.InvitesRefused += p.counters["invites_refused"]
		st.InvitesHeld += p.counters["invites_held"]
		if p.waiting > 0 && p.oldestJoin >= 0 && (oldest < 0 || p.oldestJoin < oldest) {
			oldest = p.oldestJoin
		}
	}
	st.OldestWait = 0
	if oldest >= 0 {
		st.OldestWait = max(time.Duration(now.UnixMilli()-oldest)*time.Millisecond, 0)
	}
	return st, nil
}
