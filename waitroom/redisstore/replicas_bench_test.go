package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// BenchmarkAckReplicas measures what AckReplicas 1 costs on the cluster
// with replicas (STAMPEDE_REDIS_HA_URL), one call at a time: each
// iteration joins one user through a store without it and one through a
// store with it, alternately; then every user is admitted and each one's
// admitted ticket is read the same way. Metrics: join-us and join-ack-us,
// read-us and read-ack-us (mean latency of one call), and their ratios
// x-ack-join and x-ack-read, all from the same run.
func BenchmarkAckReplicas(b *testing.B) {
	client := haClient(b)
	plain, err := redisstore.NewWithConfig(client, redisstore.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	acked, err := redisstore.NewWithConfig(client, ackConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer acked.Close()
	ctx := context.Background()
	room := fmt.Sprintf("ackbench-%d", time.Now().UnixNano())
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.Lease = 1_000_000, time.Hour
	if err := plain.Configure(ctx, room, cfg); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = plain.DeleteRoom(context.Background(), room) }()
	stores := [2]*redisstore.Store{plain, acked}
	var joinT, readT [2]time.Duration
	user := func(i, which int) string { return fmt.Sprintf("u%d-%d", i, which) }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for which, s := range stores {
			began := time.Now()
			if _, err := s.Join(ctx, room, user(i, which)); err != nil {
				b.Fatal(err)
			}
			joinT[which] += time.Since(began)
		}
	}
	b.StopTimer()
	for {
		res, err := plain.Admit(ctx, room)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Admitted) == 0 {
			break
		}
	}
	b.StartTimer()
	for i := 0; i < b.N; i++ {
		for which, s := range stores {
			began := time.Now()
			t, err := s.Ticket(ctx, room, user(i, which))
			if err != nil {
				b.Fatal(err)
			}
			if t.State != waitroom.StateAdmitted {
				b.Fatalf("%s: %s, want admitted", user(i, which), t.State)
			}
			readT[which] += time.Since(began)
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(us(joinT[0]), "join-us")
	b.ReportMetric(us(joinT[1]), "join-ack-us")
	b.ReportMetric(us(readT[0]), "read-us")
	b.ReportMetric(us(readT[1]), "read-ack-us")
	b.ReportMetric(float64(joinT[1])/float64(joinT[0]), "x-ack-join")
	b.ReportMetric(float64(readT[1])/float64(readT[0]), "x-ack-read")
}
