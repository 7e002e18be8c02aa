package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
	"github.com/stampede-lab/stampede/waitroom/storetest"
)

// ackConfig is the default configuration with AckReplicas 1 and, as in
// the other checks (linStore), positions in sharded rooms counted exactly.
func ackConfig() redisstore.Config {
	cfg := redisstore.DefaultConfig()
	cfg.AckReplicas = 1
	cfg.PositionCache = 0
	return cfg
}

func TestAckReplicasConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*redisstore.Config)
		want string // the field named; "" for valid
	}{
		{"off", func(c *redisstore.Config) {}, ""},
		{"one", func(c *redisstore.Config) { c.AckReplicas = 1 }, ""},
		{"negative", func(c *redisstore.Config) { c.AckReplicas = -1 }, "ack_replicas"},
		{"too many", func(c *redisstore.Config) { c.AckReplicas = 17 }, "ack_replicas"},
		{"timeout zero", func(c *redisstore.Config) { c.AckReplicas, c.AckTimeout = 1, 0 }, "ack_timeout"},
		{"timeout past OpTimeout", func(c *redisstore.Config) { c.AckReplicas, c.AckTimeout = 1, c.OpTimeout }, "ack_timeout"},
		{"timeout unused when off", func(c *redisstore.Config) { c.AckTimeout = 0 }, ""},
		{"op timeout", func(c *redisstore.Config) { c.OpTimeout = 0 }, "redis_timeout"},
		{"position cache", func(c *redisstore.Config) { c.PositionCache = -1 }, "position_cache"},
	} {
		cfg := redisstore.DefaultConfig()
		tc.edit(&cfg)
		err := cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || stampede.FieldErrors(err)[0].Field != tc.want):
			t.Errorf("%s: Validate() = %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

// TestConfigValidateEveryField: Validate reports every bad field at once,
// in order, and skips the WAIT's bound when OpTimeout is unusable.
func TestConfigValidateEveryField(t *testing.T) {
	cfg := redisstore.DefaultConfig()
	cfg.OpTimeout, cfg.AckReplicas, cfg.AckTimeout, cfg.PositionCache = 0, 1, 0, 2*time.Minute
	var got []string
	for _, e := range stampede.FieldErrors(cfg.Validate()) {
		if e.Code != stampede.Invalid {
			t.Errorf("%s: code %s, want %s", e.Field, e.Code, stampede.Invalid)
		}
		got = append(got, e.Field)
	}
	if want := []string{"redis_timeout", "position_cache"}; !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}
}

// TestAckReplicasWithoutReplica: on a Redis with no replica (miniredis,
// whose WAIT answers 0 as a standalone server does, and the real server
// when STAMPEDE_REDIS_URL is set) a join and a read that would hand out an
// admission answer unavailable; what they wrote stays, so the same request
// goes through once a replica confirms it; a waiting user's read is not
// held back.
func TestAckReplicasWithoutReplica(t *testing.T) {
	run := func(t *testing.T, client *redis.Client) {
		ctx := context.Background()
		acked, err := redisstore.NewWithConfig(client, ackConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { acked.Close() })
		plain := redisstore.New(client)
		room := "ack-" + strings.ReplaceAll(t.Name(), "/", "-")
		cfg := waitroom.DefaultRoomConfig()
		cfg.Capacity = 1
		if err := plain.Configure(ctx, room, cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = plain.DeleteRoom(context.Background(), room) })

		_, err = acked.Join(ctx, room, "ann")
		if waitroom.ErrorCode(err) != waitroom.CodeUnavailable || !strings.Contains(errors.Unwrap(err).Error(), "0 of 1 replicas") {
			t.Fatalf("Join with AckReplicas and no replica = %v, want unavailable (0 of 1 replicas)", err)
		}
		if tk, err := plain.Ticket(ctx, room, "ann"); err != nil || tk.State != waitroom.StateWaiting {
			t.Fatalf("ann's ticket after the unconfirmed join = %+v, %v; want waiting (the join is kept)", tk, err)
		}
		if _, err := plain.Join(ctx, room, "bob"); err != nil {
			t.Fatal(err)
		}
		if res, err := plain.Admit(ctx, room); err != nil || len(res.Admitted) != 1 || res.Admitted[0] != "ann" {
			t.Fatalf("Admit = %+v, %v; want ann admitted", res, err)
		}
		if _, err := acked.Ticket(ctx, room, "ann"); waitroom.ErrorCode(err) != waitroom.CodeUnavailable {
			t.Fatalf("ann's admitted read with AckReplicas and no replica = %v, want unavailable", err)
		}
		if tk, err := acked.Ticket(ctx, room, "bob"); err != nil || tk.State != waitroom.StateWaiting || tk.Position != 0 {
			t.Fatalf("bob's waiting read with AckReplicas = %+v, %v; want waiting at the head (0), answered at once", tk, err)
		}
		if tk, err := plain.Ticket(ctx, room, "ann"); err != nil || tk.State != waitroom.StateAdmitted {
			t.Fatalf("ann's ticket = %+v, %v; want admitted (the refusal changed nothing)", tk, err)
		}
	}
	t.Run("embedded", func(t *testing.T) {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { client.Close() })
		run(t, client)
	})
	t.Run("real", func(t *testing.T) {
		opts, err := redis.ParseURL(testenv.URL(t, testenv.RedisURL))
		if err != nil {
			t.Fatal(err)
		}
		client := redis.NewClient(opts)
		t.Cleanup(func() { client.Close() })
		if info, err := client.Info(context.Background(), "replication").Result(); err == nil && !strings.Contains(info, "connected_slaves:0") {
			t.Skip("this Redis has replicas: the test needs one without")
		}
		run(t, client)
	})
}

// haClient connects to the cluster with replicas named by
// STAMPEDE_REDIS_HA_URL.
func haClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	opts, err := redisstore.ParseClusterURL(testenv.RedisHA(t))
	if err != nil {
		t.Fatal(err)
	}
	ackConfig().ApplyClusterTimeouts(opts)
	client := redis.NewClusterClient(opts)
	t.Cleanup(func() { client.Close() })
	return client
}

// TestConformanceHACluster runs the suite with AckReplicas 1 on the
// cluster of masters with a replica each: every join and admitting read is
// confirmed by a replica, and the store behaves exactly as without.
func TestConformanceHACluster(t *testing.T) {
	client := haClient(t)
	for _, shards := range []int{0, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			storetest.Exercise(t, func(t *testing.T) waitroom.Store {
				s := newStore(t, client, ackConfig()).(*redisstore.Store)
				t.Cleanup(func() { s.Close() })
				return s
			}, storetest.WithQueueShards(shards))
		})
	}
}

// TestLinearizableHACluster checks join, admit and leave with AckReplicas
// 1 on the cluster with replicas.
func TestLinearizableHACluster(t *testing.T) {
	client := haClient(t)
	for _, shards := range []int{0, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			s := newStore(t, client, ackConfig()).(*redisstore.Store)
			t.Cleanup(func() { s.Close() })
			checkHistories(t, s, nil, time.Hour.Milliseconds(), func() int64 { return time.Now().UnixMilli() }, shards)
		})
	}
}
