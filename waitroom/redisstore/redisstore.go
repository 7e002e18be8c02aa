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
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/waitroom"
)

// roomsKey lists every configured room, so that each service instance can
// find the rooms it must run admission for.
const roomsKey = "stampede:rooms"

// MaxBatch bounds how many users one atomic admission script admits, so
// that one script never blocks Redis for long.
const MaxBatch = 1000

// HousekeepInterval is how often an admission pass also sets aside the
// users who stopped polling and forgets those finished past the retention
// (housekeepMS in the scripts), on the server's clock, or a quarter of the
// room's abandon_after_seconds when that is shorter, while neither step
// fills MaxBatch: both read a set as large as the crowd or the history by
// score, and the embedded server sorts the whole set for that. A user is
// set aside up to that much later than abandon_after_seconds.
const HousekeepInterval = time.Second

// Store is a waitroom.Store on Redis.
type Store struct {
	client redis.UniversalClient
	// users runs the per-user scripts (join, ticket, leave): the client's
	// auto-pipeliner when Config.AutoPipeline is on, else the client;
	// joins runs the join script the same way, within its share of the
	// bound on scripts in flight (inflight.go).
	users, joins redis.Scripter
	// inflight bounds the auto-pipelined scripts in flight (nil without
	// auto-pipelining: the client's pool bounds them).
	inflight *inflight
	// opTimeout bounds every call (Config.OpTimeout).
	opTimeout time.Duration
	// direct is set when the client honours context deadlines itself
	// (ContextTimeoutEnabled): calls then run on the caller's goroutine.
	direct bool
	// ackReplicas and ackTimeout are Config.AckReplicas and AckTimeout;
	// ack is the client of their confirmations (see replicas.go).
	ackReplicas int
	ackTimeout  time.Duration
	ack         redis.UniversalClient
	// sharding holds what the store knows of sharded rooms (shard.go).
	sharding
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
	// OpTimeout bounds every call of the Store to Redis (one round trip;
	// for the multi-step admission modes, each of their round trips): the
	// caller gets a waitroom.Unavailable error within OpTimeout, even
	// when Redis is frozen or the call waits in the auto-pipeliner (which
	// does not honour contexts once a command is queued). Give the client
	// the same bound with ApplyTimeouts or ApplyClusterTimeouts, so that
	// its sockets, dials and pool waits end too.
	OpTimeout time.Duration
	// AckReplicas, when above 0, answers a join, and a ticket read that
	// says "admitted" (from which the service signs the admission token),
	// only once that many replicas of the room's master have everything
	// the master wrote before it: the script runs on a connection pinned
	// to the master, which then writes a marker and waits with WAIT. Redis replicates asynchronously, so without it a failover can
	// promote a replica that lacks admissions whose tokens are already
	// out, and the room's cap no longer bounds the buyers at checkout.
	// See replicas.go. 0 (the default) keeps the single round trip.
	AckReplicas int
	// AckTimeout bounds the WAIT of AckReplicas; a read whose admission is
	// not replicated in time answers unavailable (503) and the user polls
	// again. It must be below OpTimeout.
	AckTimeout time.Duration
	// PositionCache is how long a sharded room's waiting ticket counts
	// the users ahead in the other shards from a sample of their queues
	// taken at most that long ago (see shard.go); 0 counts them exactly
	// on every read (one more round trip per read). One-queue rooms
	// always count exactly.
	PositionCache time.Duration
}

// DefaultConfig returns the production configuration: auto-pipelining on,
// a one-second OpTimeout, a one-second PositionCache and a 200 ms
// AckTimeout (AckReplicas off).
func DefaultConfig() Config {
	return Config{AutoPipeline: true, OpTimeout: time.Second, PositionCache: time.Second, AckTimeout: 200 * time.Millisecond}
}

// Validate reports every unusable field at once, each in snake_case by
// the words of the stampede serve waitroom flag that sets it: OpTimeout is
// redis_timeout (--redis-timeout), AckReplicas ack_replicas, AckTimeout
// ack_timeout; PositionCache, which no flag sets, is position_cache.
func (c Config) Validate() error {
	var f stampede.Fields
	opOK := c.OpTimeout >= time.Millisecond && c.OpTimeout <= time.Minute
	if !opOK {
		f.Add("redis_timeout", "must be between 1ms and 1m, got %s", c.OpTimeout)
	}
	acksOK := c.AckReplicas >= 0 && c.AckReplicas <= 16
	if !acksOK {
		f.Add("ack_replicas", "must be between 0 and 16, got %d", c.AckReplicas)
	}
	// The WAIT's bound is checked only against usable replicas and
	// OpTimeout.
	if opOK && acksOK && c.AckReplicas > 0 && (c.AckTimeout < time.Millisecond || c.AckTimeout >= c.OpTimeout) {
		f.Add("ack_timeout", "must be at least 1ms and below redis_timeout (%s), got %s", c.OpTimeout, c.AckTimeout)
	}
	if c.PositionCache < 0 || c.PositionCache > time.Minute {
		f.Add("position_cache", "must be between 0 and 1m, got %s", c.PositionCache)
	}
	return f.Err()
}

// ApplyTimeouts sets o's timeouts from OpTimeout: contexts' deadlines
// reach the sockets (ContextTimeoutEnabled), and dials, reads, writes and
// waits for a pooled connection each end within OpTimeout.
func (c Config) ApplyTimeouts(o *redis.Options) {
	o.ContextTimeoutEnabled = true
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = c.OpTimeout, c.OpTimeout, c.OpTimeout, c.OpTimeout
}

// ApplyClusterTimeouts is ApplyTimeouts for a Cluster client. It also
// dials a node once, not five times 100 ms apart: a refused dial is a dead
// node, and the client should fail over to the cluster's new layout (see
// Store.failed) instead of spending OpTimeout on it.
func (c Config) ApplyClusterTimeouts(o *redis.ClusterOptions) {
	o.ContextTimeoutEnabled = true
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = c.OpTimeout, c.OpTimeout, c.OpTimeout, c.OpTimeout
	o.DialerRetries = 1
}

// New returns a Store on client with DefaultConfig. The client's lifetime
// is the caller's; closing it also stops the auto-pipeliner. Should the
// client refuse auto-pipelining (an invalid Options.AutoPipelineOptions),
// the Store runs every script on the plain client; NewWithConfig reports
// that error instead.
func New(client redis.UniversalClient) *Store {
	cfg := DefaultConfig()
	s, err := NewWithConfig(client, cfg)
	if err != nil {
		s = &Store{client: client, users: client, joins: client, opTimeout: cfg.OpTimeout, direct: honoursDeadlines(client)}
		s.positionCache = cfg.PositionCache
	}
	return s
}

// Close releases what the Store opened itself (the confirmations' client
// of Config.AckReplicas); the client it was given stays open.
func (s *Store) Close() error {
	if s.ack != nil {
		return s.ack.Close()
	}
	return nil
}

// honoursDeadlines reports whether client ends its socket reads and writes
// at a context's deadline (ContextTimeoutEnabled).
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// NewWithConfig returns a Store on client configured by cfg.
func NewWithConfig(client redis.UniversalClient, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{client: client, users: client, joins: client, opTimeout: cfg.OpTimeout, direct: honoursDeadlines(client),
		ackReplicas: cfg.AckReplicas, ackTimeout: cfg.AckTimeout}
	s.positionCache = cfg.PositionCache
	if cfg.AckReplicas > 0 {
		ack, err := ackClient(client)
		if err != nil {
			return nil, err
		}
		s.ack = ack
	}
	if cfg.AutoPipeline {
		ap, err := client.AsyncAutoPipeline()
		if err != nil {
			return nil, fmt.Errorf("redisstore: auto-pipelining: %w", err)
		}
		s.inflight = newInflight(cfg.OpTimeout)
		s.users = waitingScripter{ap: ap, lim: s.inflight}
		s.joins = waitingScripter{ap: ap, lim: s.inflight, join: true}
	}
	return s, nil
}

// waitingScripter runs scripts through an auto-pipeliner and stops waiting
// for one at its context's deadline. (The auto-pipeliner itself runs a
// queued command on its own context: a plain call would wait for the
// batch however long it takes.) A script abandoned this way may still run
// on the server; the per-user scripts are idempotent. A script counts
// against lim until the server answers it, abandoned or not; one beyond
// lim (join: a join's share of it) is refused without being sent.
type waitingScripter struct {
	ap   *redis.AutoPipeliner
	lim  *inflight
	join bool
}

var _ redis.Scripter = waitingScripter{}

func (w waitingScripter) run(ctx context.Context, name, body string, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, body, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if w.lim != nil && !w.lim.acquire(w.join) {
		cmd.SetErr(errBusy)
		return cmd
	}
	sent := time.Now()
	f := w.ap.Submit(ctx, cmd)
	err := f.WaitContext(ctx)
	abandoned := err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err())
	if w.lim != nil {
		if abandoned {
			// It counts until the server answers it. Only a deadline
			// says the server was late; a caller that left (a closed
			// request) says nothing of it.
			late := errors.Is(err, context.DeadlineExceeded)
			go func() {
				_ = f.Wait()
				w.lim.release(time.Since(sent), !late)
			}()
		} else {
			w.lim.release(time.Since(sent), true)
		}
	}
	if err != nil {
		// cmd may still be written by its batch: answer with another.
		late := redis.NewCmd(ctx, cmdArgs...)
		late.SetErr(err)
		return late
	}
	return cmd
}

// Eval implements redis.Scripter.
func (w waitingScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return w.run(ctx, "eval", script, keys, args)
}

// EvalSha implements redis.Scripter.
func (w waitingScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return w.run(ctx, "evalsha", sha1, keys, args)
}

// EvalRO implements redis.Scripter.
func (w waitingScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return w.run(ctx, "eval_ro", script, keys, args)
}

// EvalShaRO implements redis.Scripter.
func (w waitingScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return w.run(ctx, "evalsha_ro", sha1, keys, args)
}

// ScriptExists implements redis.Scripter.
func (w waitingScripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return w.ap.ScriptExists(ctx, hashes...)
}

// ScriptLoad implements redis.Scripter.
func (w waitingScripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return w.ap.ScriptLoad(ctx, script)
}

// call runs fn under a deadline of OpTimeout: a Redis that accepts the
// request but never answers (frozen, SIGSTOP) costs the caller OpTimeout,
// not a hang. When the client honours deadlines itself (see
// Config.ApplyTimeouts) fn runs on the caller's goroutine; otherwise on
// one of its own, abandoned (its result dropped) when the deadline passes
// first. Errors go through storeError.
func call[T any](s *Store, ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if s.direct {
		v, err := fn(ctx)
		if err != nil && ctx.Err() != nil {
			// Whatever the client made of the deadline, it is one.
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return v, s.failed(storeError(err))
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, s.failed(storeError(r.err))
	case <-ctx.Done():
		var zero T
		return zero, s.failed(storeError(ctx.Err()))
	}
}

// failed passes err on. When it says Redis is unavailable and the client
// is a Cluster client, it also asks the client to reload the cluster's
// layout (in the background, at most every 200 ms): go-redis otherwise
// keeps sending a failed-over slot's commands to its dead master for up to
// ten seconds, since a refused connection, unlike a MOVED reply, does not
// make it look again.
func (s *Store) failed(err error) error {
	if err == nil || waitroom.ErrorCode(err) != waitroom.CodeUnavailable {
		return err
	}
	for _, c := range []redis.UniversalClient{s.client, s.ack} {
		if cc, ok := c.(*redis.ClusterClient); ok {
			cc.ReloadState(context.Background())
		}
	}
	return err
}

// call0 is call for functions without a result.
func call0(s *Store, ctx context.Context, fn func(ctx context.Context) error) error {
	_, err := call(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// inPass runs one round trip of a multi-step admission pass under the
// caller's context, on the caller's goroutine. It imposes no deadline of
// its own: a step cut short after Redis ran it (a ZPOPMIN whose answer
// came late, say) would drop the users it popped, so the whole pass shares
// the caller's deadline instead.
func inPass[T any](ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	return fn(ctx)
}

// SpendOnce implements waitroom.Spender: SET NX of the room's key
// "{room}:spent:<key>", expiring at until (EXAT, so no instance's clock
// but the caller's choice of until matters).
func (s *Store) SpendOnce(ctx context.Context, room, key string, until time.Time) (bool, error) {
	return call(s, ctx, func(ctx context.Context) (bool, error) {
		res, err := s.client.SetArgs(ctx, "{"+room+"}:spent:"+key, 1, redis.SetArgs{Mode: "NX", ExpireAt: until.Add(time.Second)}).Result()
		if errors.Is(err, redis.Nil) {
			return false, nil
		}
		return res == "OK", err
	})
}

var _ waitroom.Spender = (*Store)(nil)

// Ping implements waitroom.Store: a PING within OpTimeout.
func (s *Store) Ping(ctx context.Context) error {
	return call0(s, ctx, func(ctx context.Context) error { return s.client.Ping(ctx).Err() })
}

// Keys names the Redis keys of one room.
type Keys struct {
	Config, Seq, Queue, Active, State, SeqOf, Stats string
	// JoinedAt maps each user to when they last joined (ms, Redis TIME),
	// for the wait of the queue's head.
	JoinedAt string
	// Seen scores each waiting user by their last poll (ms).
	Seen string
	// Away holds users set aside for not polling, scored by their place
	// (seq); AwayAt scores them by when their chance to return ends.
	Away, AwayAt string
	// Unarrived scores admitted users who have not arrived yet by the end
	// of their arrival window.
	Unarrived string
	// Done scores finished users by when they finished: the retention
	// purge forgets them RoomConfig.Retention later.
	Done string
	// Bucket is the outflow limit's token bucket (tokens, at).
	Bucket string
	// Ack is the marker written before a WAIT (Config.AckReplicas).
	Ack string
	// AdmStamp, Moving and MovingInfo serve sharded rooms only (see
	// shard.go): the order stamp of each admitted user's join, and the
	// admissions whose users the queue shards have not yet let go.
	AdmStamp, Moving, MovingInfo string
	// Invites scores each used invite's place by the invite's expiry (ms),
	// kept until a day after it (see waitroom.InviteStore).
	Invites string
	// Log is the admission log (fairness.go).
	Log string
}

// KeysFor returns room's keys; all share the hash tag {room}.
func KeysFor(room string) Keys {
	p := "{" + room + "}:"
	return Keys{
		Config: p + "cfg", Seq: p + "seq", Queue: p + "queue", Active: p + "active",
		State: p + "state", SeqOf: p + "seqof", Stats: p + "stats",
		JoinedAt: p + "joinedat", Seen: p + "seen", Away: p + "away", AwayAt: p + "awayat",
		Unarrived: p + "unarrived", Done: p + "done", Bucket: p + "bucket", Ack: p + "ack",
		AdmStamp: p + "admstamp", Moving: p + "moving", MovingInfo: p + "movinginfo", Invites: p + "invites",
		Log: p + "log",
	}
}

// withInvites is the KEYS list of the join and stats scripts: the script
// keys, then invites.
func (k Keys) withInvites() []string { return append(k.scriptKeys(), k.Invites) }

// shardedKeys is the KEYS list of a sharded room's own scripts: the
// script keys, then admstamp, moving and movinginfo.
func (k Keys) shardedKeys() []string {
	return append(k.scriptKeys(), k.AdmStamp, k.Moving, k.MovingInfo)
}

// scriptKeys is the KEYS list every script takes (see scripts.go).
func (k Keys) scriptKeys() []string {
	return []string{k.Config, k.Seq, k.Queue, k.Active, k.State, k.SeqOf, k.Stats, k.JoinedAt,
		k.Seen, k.Away, k.AwayAt, k.Unarrived, k.Done, k.Bucket}
}

// All lists every key of the room.
func (k Keys) All() []string { return append(k.shardedKeys(), k.Ack, k.Invites, k.Log) }

// configFields maps each JSON name of a RoomConfig field to its field and
// value in the room's configuration hash.
func configFields(cfg waitroom.RoomConfig) map[string][2]any {
	// The template is stored as JSON; empty for none.
	var tmpl string
	if !cfg.Template.IsZero() {
		b, _ := json.Marshal(cfg.Template) // plain strings: cannot fail
		tmpl = string(b)
	}
	var opens, closes int64
	if !cfg.OpensAt.IsZero() {
		opens = cfg.OpensAt.UnixMilli()
	}
	if !cfg.ClosesAt.IsZero() {
		closes = cfg.ClosesAt.UnixMilli()
	}
	return map[string][2]any{
		"capacity":                  {"capacity", cfg.Capacity},
		"lease_seconds":             {"lease_ms", cfg.Lease.Milliseconds()},
		"admit_interval_ms":         {"interval_ms", cfg.AdmitInterval.Milliseconds()},
		"max_admissions_per_minute": {"rate_per_min", cfg.MaxAdmissionsPerMinute},
		"opens_at":                  {"opens_at_ms", opens},
		"paused":                    {"paused", boolField(cfg.Paused)},
		"closed":                    {"closed", boolField(cfg.Closed)},
		"closed_message":            {"closed_message", cfg.ClosedMessage},
		"abandon_after_seconds":     {"abandon_ms", cfg.AbandonAfter.Milliseconds()},
		"arrival_seconds":           {"arrival_ms", cfg.Arrival.Milliseconds()},
		"retention_seconds":         {"retention_ms", cfg.Retention.Milliseconds()},
		"pow_difficulty":            {"pow_difficulty", cfg.PoWDifficulty},
		"template":                  {"template", tmpl},
		"max_waiting":               {"max_waiting", cfg.MaxWaiting},
		"max_joins_per_second":      {"join_rate", cfg.MaxJoinsPerSecond},
		"closes_at":                 {"closes_at_ms", closes},
		"schedule":                  {"schedule", scheduleField(cfg.Schedule)},
		"invite_only":               {"invite_only", boolField(cfg.InviteOnly)},
		"invite_key":                {"invite_key", cfg.InviteKey},
	}
}

// scheduleField encodes a schedule for the scripts (see sale in lua.go):
// "start,end,capacity,rate,invite,interval" per window, ';'-separated,
// times in ms (end 0: open-ended).
func scheduleField(ws []waitroom.Window) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		var end int64
		if !w.End.IsZero() {
			end = w.End.UnixMilli()
		}
		parts[i] = fmt.Sprintf("%d,%d,%d,%d,%s,%d", w.Start.UnixMilli(), end, w.Capacity, w.MaxAdmissionsPerMinute,
			boolField(w.InviteOnly), w.AdmitInterval.Milliseconds())
	}
	return strings.Join(parts, ";")
}

// parseSchedule decodes scheduleField's encoding.
func parseSchedule(s string) ([]waitroom.Window, error) {
	if s == "" {
		return nil, nil
	}
	var ws []waitroom.Window
	for part := range strings.SplitSeq(s, ";") {
		var start, end, interval int64
		var w waitroom.Window
		var inv int
		if _, err := fmt.Sscanf(part, "%d,%d,%d,%d,%d,%d", &start, &end, &w.Capacity, &w.MaxAdmissionsPerMinute, &inv, &interval); err != nil {
			return nil, fmt.Errorf("window %q: %w", part, err)
		}
		w.Start = time.UnixMilli(start).UTC()
		if end > 0 {
			w.End = time.UnixMilli(end).UTC()
		}
		w.InviteOnly, w.AdmitInterval = inv == 1, time.Duration(interval)*time.Millisecond
		ws = append(ws, w)
	}
	return ws, nil
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// hashArgs flattens the named fields of cfg into HSET arguments.
func hashArgs(cfg waitroom.RoomConfig, fields []string) ([]any, error) {
	all := configFields(cfg)
	args := make([]any, 0, 2*len(fields))
	for _, f := range fields {
		fv, ok := all[f]
		if !ok {
			return nil, fmt.Errorf("redisstore: unknown configuration field %q", f)
		}
		args = append(args, fv[0], fv[1])
	}
	return args, nil
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
	args, err := hashArgs(cfg, waitroom.RoomConfigFields)
	if err != nil {
		return err
	}
	if err := s.checkShards(ctx, room, cfg); err != nil {
		return err
	}
	k := effectiveShards(cfg.QueueShards)
	if k > 1 {
		// The shards first: a room is usable once its own configuration
		// exists.
		if err := s.writeShardConfigs(ctx, room, k, cfg, waitroom.RoomConfigFields); err != nil {
			return err
		}
	}
	args = append(args, "queue_shards", cfg.QueueShards)
	err = call0(s, ctx, func(ctx context.Context) error {
		if err := s.client.HSet(ctx, KeysFor(room).Config, args...).Err(); err != nil {
			return err
		}
		return s.client.SAdd(ctx, roomsKey, room).Err()
	})
	// A room that opens at a set time (opens_at, or its schedule's first
	// window) commits to the seed of its pre-queue's draw now.
	if err != nil || k > 1 || (cfg.OpensAt.IsZero() && len(cfg.Schedule) == 0) {
		return err
	}
	return s.pickSeed(ctx, room)
}

// UpdateConfig implements waitroom.Store: one script, so that the fields
// change together and only in an existing room.
func (s *Store) UpdateConfig(ctx context.Context, room string, cfg waitroom.RoomConfig, fields []string) error {
	if err := waitroom.ValidateRoom(room); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if i := slices.Index(fields, "queue_shards"); i >= 0 {
		// Fixed once the room exists: the same value changes nothing.
		if err := s.checkShards(ctx, room, cfg); err != nil {
			return err
		}
		fields = slices.Delete(slices.Clone(fields), i, i+1)
	}
	if len(fields) == 0 {
		_, err := s.Config(ctx, room)
		return err
	}
	args, err := hashArgs(cfg, fields)
	if err != nil {
		return err
	}
	k, err := s.queueShards(ctx, room)
	if err != nil {
		return err
	}
	err = call0(s, ctx, func(ctx context.Context) error {
		return updateScript.Run(ctx, s.client, []string{KeysFor(room).Config}, args...).Err()
	})
	if err == nil && k <= 1 && (slices.Contains(fields, "opens_at") || slices.Contains(fields, "schedule")) {
		err = s.pickSeed(ctx, room)
	}
	if err != nil || k <= 1 {
		return err
	}
	return s.writeShardConfigs(ctx, room, k, cfg, fields)
}

// configNames are the configuration hash's fields Config reads, in order.
var configNames = []string{"capacity", "lease_ms", "interval_ms", "rate_per_min", "opens_at_ms", "paused",
	"closed", "closed_message", "abandon_ms", "arrival_ms", "retention_ms",
	"pow_difficulty", "template", "queue_shards", "max_waiting", "join_rate",
	"closes_at_ms", "schedule", "invite_only", "invite_key"}

// Config implements waitroom.Store.
func (s *Store) Config(ctx context.Context, room string) (waitroom.RoomConfig, error) {
	vals, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return s.client.HMGet(ctx, KeysFor(room).Config, configNames...).Result()
	})
	if err != nil {
		return waitroom.RoomConfig{}, err
	}
	if vals[0] == nil {
		return waitroom.RoomConfig{}, waitroom.ErrNoRoom
	}
	num := func(i int) int64 {
		if vals[i] == nil {
			return 0
		}
		n, _ := strconv.ParseInt(fmt.Sprint(vals[i]), 10, 64)
		return n
	}
	ms := func(i int) time.Duration { return time.Duration(num(i)) * time.Millisecond }
	cfg := waitroom.RoomConfig{
		Capacity: int(num(0)), Lease: ms(1), AdmitInterval: ms(2), MaxAdmissionsPerMinute: int(num(3)),
		Paused: num(5) == 1, Closed: num(6) == 1, AbandonAfter: ms(8), Arrival: ms(9), Retention: ms(10),
		PoWDifficulty: int(num(11)), QueueShards: int(num(13)), MaxWaiting: int(num(14)), MaxJoinsPerSecond: int(num(15)),
	}
	if n := num(4); n > 0 {
		cfg.OpensAt = time.UnixMilli(n).UTC()
	}
	if n := num(16); n > 0 {
		cfg.ClosesAt = time.UnixMilli(n).UTC()
	}
	if sc, ok := vals[17].(string); ok {
		if cfg.Schedule, err = parseSchedule(sc); err != nil {
			return waitroom.RoomConfig{}, fmt.Errorf("redisstore: room %q has an unreadable schedule: %w", room, err)
		}
	}
	cfg.InviteOnly = num(18) == 1
	if k, ok := vals[19].(string); ok {
		cfg.InviteKey = k
	}
	if vals[7] != nil {
		cfg.ClosedMessage = fmt.Sprint(vals[7])
	}
	// Rooms configured before templates existed have no field (or an
	// empty one): the zero template.
	if tm, ok := vals[12].(string); ok && tm != "" {
		if err := json.Unmarshal([]byte(tm), &cfg.Template); err != nil {
			return waitroom.RoomConfig{}, fmt.Errorf("redisstore: room %q has an unreadable template: %w", room, err)
		}
	}
	if cfg.Retention == 0 {
		cfg.Retention = waitroom.DefaultRetention // a room configured before retention existed
	}
	return cfg, nil
}

// DeleteRoom implements waitroom.Store: the room leaves the room list
// first, then every key of the room goes in one DEL (one slot, so one DEL
// works on Cluster too). Users still in it are forgotten.
func (s *Store) DeleteRoom(ctx context.Context, room string) error {
	k := KeysFor(room)
	_, shards, err := s.storedShards(ctx, room)
	if err != nil {
		return err
	}
	s.rooms.Delete(room)
	return call0(s, ctx, func(ctx context.Context) error {
		if err := s.client.SRem(ctx, roomsKey, room).Err(); err != nil {
			return err
		}
		if err := s.client.Del(ctx, k.All()...).Err(); err != nil {
			return err
		}
		// A sharded room's shards, each in one DEL (one slot each).
		for i := 0; i < shards && shards > 1; i++ {
			if err := s.client.Del(ctx, ShardKeysFor(room, i).All()...).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}

// Rooms lists every configured room.
func (s *Store) Rooms(ctx context.Context) ([]string, error) {
	return call(s, ctx, func(ctx context.Context) ([]string, error) { return s.client.SMembers(ctx, roomsKey).Result() })
}

// Join implements waitroom.Store.
func (s *Store) Join(ctx context.Context, room, user string) (waitroom.Ticket, error) {
	return s.join(ctx, room, user, "")
}

// JoinInvite implements waitroom.InviteStore.
func (s *Store) JoinInvite(ctx context.Context, room, user string, expires time.Time) (waitroom.Ticket, error) {
	return s.join(ctx, room, user, strconv.FormatInt(max(expires.UnixMilli(), 1), 10))
}

var _ waitroom.InviteStore = (*Store)(nil)

// join is Join, with invite the invite's expiry in ms for an invited
// join, else "".
func (s *Store) join(ctx context.Context, room, user, invite string) (waitroom.Ticket, error) {
	if k, err := s.queueShards(ctx, room); err != nil || k > 1 {
		if err != nil {
			return waitroom.Ticket{}, err
		}
		return s.shardedJoin(ctx, room, user, k, invite)
	}
	if s.ackReplicas > 0 {
		return s.joinReplicated(ctx, room, user, invite)
	}
	res, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return joinScript.Run(ctx, s.joins, KeysFor(room).withInvites(), user, invite).Slice()
	})
	if err != nil {
		return waitroom.Ticket{}, err
	}
	return ticketFrom(room, user, res)
}

// Ticket implements waitroom.Store.
func (s *Store) Ticket(ctx context.Context, room, user string) (waitroom.Ticket, error) {
	return s.readTicket(ctx, room, user)
}

// MarkArrived implements waitroom.Store: the ticket script, which marks
// an admitted reader arrived.
func (s *Store) MarkArrived(ctx context.Context, room, user string) (waitroom.Ticket, error) {
	return s.readTicket(ctx, room, user)
}

// readTicket reads a ticket in a room of one queue or of several.
func (s *Store) readTicket(ctx context.Context, room, user string) (waitroom.Ticket, error) {
	if k, err := s.queueShards(ctx, room); err != nil || k > 1 {
		if err != nil {
			return waitroom.Ticket{}, err
		}
		return s.shardedRead(ctx, room, user, k)
	}
	return s.read(ctx, room, user, 1)
}

// read runs the ticket script on the room's own keys (arrive 1: an
// admitted reader has arrived).
func (s *Store) read(ctx context.Context, room, user string, arrive int) (waitroom.Ticket, error) {
	res, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return ticketScript.Run(ctx, s.users, KeysFor(room).scriptKeys(), user, arrive).Slice()
	})
	if err != nil {
		return waitroom.Ticket{}, err
	}
	t, err := ticketFrom(room, user, res)
	if err != nil || t.State != waitroom.StateAdmitted || s.ackReplicas == 0 {
		return t, err
	}
	return s.readReplicated(ctx, room, user, arrive)
}

// Leave implements waitroom.Store.
func (s *Store) Leave(ctx context.Context, room, user string) (waitroom.Ticket, error) {
	if k, err := s.queueShards(ctx, room); err != nil || k > 1 {
		if err != nil {
			return waitroom.Ticket{}, err
		}
		return s.shardedLeave(ctx, room, user, k)
	}
	return s.leaveRoom(ctx, room, user)
}

// leaveRoom runs the leave script on the room's own keys.
func (s *Store) leaveRoom(ctx context.Context, room, user string) (waitroom.Ticket, error) {
	res, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return leaveScript.Run(ctx, s.users, KeysFor(room).scriptKeys(), user).Slice()
	})
	if err != nil {
		return waitroom.Ticket{}, err
	}
	if len(res) != 2 {
		return waitroom.Ticket{}, fmt.Errorf("redisstore: leave: unexpected reply %v", res)
	}
	return waitroom.Ticket{Room: room, User: user, State: waitroom.State(fmt.Sprint(res[0])), Position: -1}, nil
}

// ticketFrom decodes {state, rank, seq, lease_expiry_ms, created, message,
// generation, admitted, departed} (the generation and the marks may be
// absent).
func ticketFrom(room, user string, res []any) (waitroom.Ticket, error) {
	if len(res) < 6 {
		return waitroom.Ticket{}, fmt.Errorf("redisstore: unexpected reply %v", res)
	}
	t := waitroom.Ticket{Room: room, User: user, State: waitroom.State(fmt.Sprint(res[0]))}
	t.Position, _ = res[1].(int64)
	t.Seq, _ = res[2].(int64)
	if ms, _ := res[3].(int64); ms > 0 {
		t.LeaseExpires = time.UnixMilli(ms).UTC()
	}
	created, _ := res[4].(int64)
	t.Created = created == 1
	t.Message = fmt.Sprint(res[5])
	if len(res) > 6 {
		t.Generation, _ = res[6].(int64)
	}
	if len(res) > 8 && t.State == waitroom.StateWaiting {
		a, _ := res[7].(int64)
		d, _ := res[8].(int64)
		t.Marks = &waitroom.Marks{Admitted: a, Departed: d}
	}
	return t, nil
}

// Admit implements waitroom.Store: the atomic pass, one script bounded by
// OpTimeout (one per queue shard for a sharded room).
func (s *Store) Admit(ctx context.Context, room string) (waitroom.AdmitResult, error) {
	k, err := s.queueShards(ctx, room)
	if err != nil {
		return waitroom.AdmitResult{}, err
	}
	if k > 1 {
		return s.shardedAdmit(ctx, room, k)
	}
	res, err := call(s, ctx, func(ctx context.Context) (waitroom.AdmitResult, error) { return s.admitAtomic(ctx, room) })
	if err != nil {
		return res, storeError(err)
	}
	return res, nil
}

// QueueShards returns room's number of queue shards (1 for a room of one
// queue, or one that does not exist).
func (s *Store) QueueShards(ctx context.Context, room string) (int, error) {
	return s.queueShards(ctx, room)
}

func (s *Store) admitAtomic(ctx context.Context, room string) (waitroom.AdmitResult, error) {
	k := KeysFor(room)
	out, err := admitScript.Run(ctx, s.client, append(k.scriptKeys(), k.Log), MaxBatch, newSeed(), room).Slice()
	if err != nil {
		return waitroom.AdmitResult{}, err
	}
	if len(out) < 3 {
		return waitroom.AdmitResult{}, fmt.Errorf("redisstore: admit: unexpected reply %v", out)
	}
	res := waitroom.AdmitResult{RoundTrips: 1}
	n, _ := out[0].(int64)
	res.Expired = int(n)
	ms, _ := out[1].(int64)
	res.At = time.UnixMilli(ms).UTC()
	shuffled, _ := out[2].(int64)
	res.Shuffled = int(shuffled)
	for _, u := range out[3:] {
		res.Admitted = append(res.Admitted, fmt.Sprint(u))
		res.AdmittedAt = append(res.AdmittedAt, res.At)
	}
	return res, nil
}

// Reclaim ends the leases that have run out in room, in one script, and
// returns how many it ended and the server time (ms). The atomic pass
// does this itself; Reclaim is for admission passes built from several
// steps (the admission lab's), under the caller's deadline.
func (s *Store) Reclaim(ctx context.Context, room string) (int, int64, error) {
	out, err := inPass(ctx, func(ctx context.Context) ([]int64, error) {
		return reclaimScript.Run(ctx, s.client, KeysFor(room).scriptKeys()).Int64Slice()
	})
	if err != nil {
		return 0, 0, err
	}
	return int(out[0]), out[1], nil
}

// NextExpiry implements waitroom.Store.
func (s *Store) NextExpiry(ctx context.Context, room string) (time.Time, bool, error) {
	zs, err := call(s, ctx, func(ctx context.Context) ([]redis.Z, error) {
		return s.client.ZRangeWithScores(ctx, KeysFor(room).Active, 0, 0).Result()
	})
	if err != nil {
		return time.Time{}, false, err
	}
	if len(zs) == 0 {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(int64(zs[0].Score)).UTC(), true, nil
}

// Stats implements waitroom.Store: one script, one round trip.
func (s *Store) Stats(ctx context.Context, room string) (waitroom.RoomStats, error) {
	out, err := call(s, ctx, func(ctx context.Context) ([]any, error) {
		return statsScript.Run(ctx, s.client, KeysFor(room).withInvites()).Slice()
	})
	if err != nil {
		return waitroom.RoomStats{}, err
	}
	if len(out) < 5 {
		return waitroom.RoomStats{}, fmt.Errorf("redisstore: stats: unexpected reply %v", out)
	}
	num := func(v any) int64 {
		n, _ := v.(int64)
		return n
	}
	c := map[string]int64{}
	for i := 5; i+1 < len(out); i += 2 {
		c[fmt.Sprint(out[i])], _ = strconv.ParseInt(fmt.Sprint(out[i+1]), 10, 64)
	}
	st := waitroom.RoomStats{
		Capacity: num(out[0]), Active: num(out[1]), Waiting: num(out[2]),
		JoinedTotal: c["joined"], AdmittedTotal: c["admitted"], ReleasedTotal: c["released"],
		ExpiredTotal: c["expired"], LeftTotal: c["left"], ClosedTotal: c["closed"],
		AbandonedTotal: c["abandoned"], NoShowTotal: c["noshow"], Away: num(out[4]),
		OldestWait:  time.Duration(max(num(out[3]), 0)) * time.Millisecond,
		InvitesUsed: c["invites_used"], InvitesRefused: c["invites_refused"], InvitesHeld: c["invites_held"],
	}
	if k, err := s.queueShards(ctx, room); err != nil || k > 1 {
		if err != nil {
			return waitroom.RoomStats{}, err
		}
		return s.shardedStats(ctx, room, k, st)
	}
	return st, nil
}

// storeError turns script errors into the domain's errors and anything
// else, a missed deadline included, into an unavailable error.
func storeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, waitroom.ErrNoRoom), errors.Is(err, waitroom.ErrNoTicket):
		return err
	}
	if _, ok := errors.AsType[*waitroom.Error](err); ok {
		return err
	}
	switch {
	case strings.Contains(err.Error(), "NOROOM"):
		return waitroom.ErrNoRoom
	case strings.Contains(err.Error(), "NOTICKET"):
		return waitroom.ErrNoTicket
	case strings.Contains(err.Error(), "LINEFULL"):
		return waitroom.ErrLineFull
	case strings.Contains(err.Error(), "JOINRATE"):
		return waitroom.ErrJoinsThrottled
	case strings.Contains(err.Error(), "INVITEUSED"):
		return waitroom.ErrInviteUsed
	case strings.Contains(err.Error(), "INVITEREQ"):
		return waitroom.ErrInviteRequired
	default:
		return waitroom.Unavailable(err)
	}
}
