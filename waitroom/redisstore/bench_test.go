package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

const (
	// benchDepth is how many users still wait after the last measured
	// admission: the queue is at least this deep for every script call.
	benchDepth = 200_000
	// benchCapacity is large enough that every call admits a full batch.
	benchCapacity = 1_000_000
	// benchLoadBatch is how many users one loading pipeline adds.
	benchLoadBatch = 10_000
)

// BenchmarkAtomicAdmission measures the atomic admission script on a room
// with a very deep queue and room to spare, so that every call admits a
// full batch (redisstore.MaxBatch users). b.N is the number of script
// calls; the metric is admissions/s. Sub-benchmarks: real (the Redis of
// STAMPEDE_REDIS_URL; target ≥ 100,000 admissions/s) and embedded
// (miniredis, for comparison).
func BenchmarkAtomicAdmission(b *testing.B) {
	b.Run("real", func(b *testing.B) {
		url := testenv.URL(b, testenv.RedisURL)
		opts, err := redis.ParseURL(url)
		if err != nil {
			b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
		}
		// The URL's own database, like the store conformance tests: no
		// Service runs there (Services admit in every room of their
		// database, and would admit in this room too).
		client := redis.NewClient(opts)
		defer client.Close()
		if err := client.Ping(context.Background()).Err(); err != nil {
			b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
		}
		benchAdmission(b, client)
	})
	b.Run("embedded", func(b *testing.B) {
		e, err := redisstore.StartEmbedded()
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		// The embedded server sorts a sorted set to pop from it: a call
		// on a deep queue takes long, more than go-redis's default 3 s
		// read timeout on a slow machine.
		client := redis.NewClient(&redis.Options{Addr: e.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
		defer client.Close()
		benchAdmission(b, client)
	})
}

func benchUser(i int) string { return fmt.Sprintf("u%07d", i) }

func benchAdmission(b *testing.B, client *redis.Client) {
	ctx := context.Background()
	if b.N*redisstore.MaxBatch > benchCapacity*8/10 {
		b.Fatalf("b.N = %d script calls would admit %d users into a room of %d: use -benchtime ≤ %dx",
			b.N, b.N*redisstore.MaxBatch, benchCapacity, benchCapacity*8/10/redisstore.MaxBatch)
	}
	store := redisstore.New(client)
	room := fmt.Sprintf("bench-admit-%x", rand.Uint64())
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.Lease, cfg.AdmitInterval = benchCapacity, 24*time.Hour, time.Minute
	if err := store.Configure(ctx, room, cfg); err != nil {
		b.Fatalf("Configure: %v", err)
	}
	defer func() {
		// Deleting a queue of 200,000 users can take longer than the
		// default one-second OpTimeout on a loaded machine.
		cleanup, err := redisstore.NewWithConfig(client, redisstore.Config{AutoPipeline: false, OpTimeout: time.Minute})
		if err == nil {
			err = cleanup.DeleteRoom(context.Background(), room)
		}
		if err != nil {
			b.Errorf("DeleteRoom: %v", err)
		}
	}()

	admitted := b.N * redisstore.MaxBatch
	depth := benchDepth + admitted
	benchLoadQueue(b, client, room, depth)
	benchCheckLoaded(b, store, room, depth)

	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		res, err := store.Admit(ctx, room)
		if err != nil {
			b.Fatalf("Admit: %v", err)
		}
		if len(res.Admitted) != redisstore.MaxBatch || res.Admitted[0] != benchUser(i*redisstore.MaxBatch) {
			b.Fatalf("call %d admitted %d users starting with %v, want %d starting with %s",
				i, len(res.Admitted), res.Admitted[:min(1, len(res.Admitted))], redisstore.MaxBatch, benchUser(i*redisstore.MaxBatch))
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(admitted)/elapsed.Seconds(), "admissions/s")

	// The room is where the calls left it: every admission counted, the
	// rest still waiting, in order.
	st, err := store.Stats(ctx, room)
	if err != nil {
		b.Fatalf("Stats: %v", err)
	}
	want := waitroom.RoomStats{
		Capacity: benchCapacity, Active: int64(admitted), Waiting: int64(depth + 1 - admitted),
		JoinedTotal: int64(depth + 1), AdmittedTotal: int64(admitted),
	}
	if st != want {
		b.Fatalf("stats after %d calls = %+v, want %+v", b.N, st, want)
	}
	if tk, err := store.Ticket(ctx, room, benchUser(admitted)); err != nil || tk.State != waitroom.StateWaiting || tk.Position != 0 {
		b.Fatalf("the first user not admitted: %+v, %v; want waiting at position 0", tk, err)
	}
}

// benchLoadQueue puts users u0000000 … u(n-1) in room's queue with pipelined
// commands, leaving the room in the state n calls of Store.Join would:
// sequence n, each user in the queue scored by their sequence number,
// marked waiting, their sequence recorded, n joins counted.
func benchLoadQueue(b *testing.B, client *redis.Client, room string, n int) {
	b.Helper()
	ctx := context.Background()
	k := redisstore.KeysFor(room)
	for from := 0; from < n; from += benchLoadBatch {
		to := min(from+benchLoadBatch, n)
		zs := make([]redis.Z, 0, to-from)
		states := make([]any, 0, 2*(to-from))
		seqs := make([]any, 0, 2*(to-from))
		for i := from; i < to; i++ {
			u, seq := benchUser(i), i+1
			zs = append(zs, redis.Z{Score: float64(seq), Member: u})
			states = append(states, u, string(waitroom.StateWaiting))
			seqs = append(seqs, u, seq)
		}
		_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.IncrBy(ctx, k.Seq, int64(to-from))
			p.ZAdd(ctx, k.Queue, zs...)
			p.HSet(ctx, k.State, states...)
			p.HSet(ctx, k.SeqOf, seqs...)
			p.HIncrBy(ctx, k.Stats, "joined", int64(to-from))
			return nil
		})
		if err != nil {
			b.Fatalf("loading the queue: %v", err)
		}
	}
}

// benchCheckLoaded checks that the loaded room behaves as if its n users
// had joined through Store.Join, and adds one more user that way.
func benchCheckLoaded(b *testing.B, store *redisstore.Store, room string, n int) {
	b.Helper()
	ctx := context.Background()
	for _, i := range []int{0, n / 2, n - 1} {
		tk, err := store.Ticket(ctx, room, benchUser(i))
		if err != nil || tk.State != waitroom.StateWaiting || tk.Position != int64(i) || tk.Seq != int64(i+1) {
			b.Fatalf("loaded user %s: %+v, %v; want waiting at position %d with seq %d", benchUser(i), tk, err, i, i+1)
		}
	}
	// Joining again changes nothing; a new user goes to the back.
	if tk, err := store.Join(ctx, room, benchUser(n-1)); err != nil || tk.Seq != int64(n) || tk.Position != int64(n-1) {
		b.Fatalf("re-join of %s: %+v, %v", benchUser(n-1), tk, err)
	}
	if tk, err := store.Join(ctx, room, "late"); err != nil || tk.Seq != int64(n+1) || tk.Position != int64(n) {
		b.Fatalf("join of a new user after loading: %+v, %v; want seq %d position %d", tk, err, n+1, n)
	}
	st, err := store.Stats(ctx, room)
	if err != nil {
		b.Fatalf("Stats: %v", err)
	}
	if st.JoinedTotal != int64(n+1) || st.Waiting != int64(n+1) || st.Active != 0 {
		b.Fatalf("stats after loading %d users and one join: %+v", n, st)
	}
}
