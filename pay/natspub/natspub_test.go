package natspub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/natspub"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// natsConn connects to the real NATS named by STAMPEDE_NATS_URL, or to an
// embedded server.
func natsConn(t *testing.T, real bool) *nats.Conn {
	t.Helper()
	var url string
	if real {
		url = testenv.URL(t, testenv.NATSURL)
	} else {
		e, err := natspub.StartEmbedded(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		url = e.URL()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// flakyMarks fails MarkPublished once, as a relay that dies after
// publishing and before recording it.
type flakyMarks struct {
	pay.Store
	failed bool
}

func (f *flakyMarks) MarkPublished(ctx context.Context, ids []int64, at time.Time) error {
	if !f.failed {
		f.failed = true
		return errors.New("relay died before marking")
	}
	return f.Store.MarkPublished(ctx, ids, at)
}

func TestRelayKeepsOrderAndSurvivesARestart(t *testing.T) {
	for _, real := range []bool{false, true} {
		name := "embedded"
		if real {
			name = "real"
		}
		t.Run(name, func(t *testing.T) {
			nc := natsConn(t, real)
			ctx := context.Background()
			store, err := sqlite.Open(filepath.Join(t.TempDir(), "pay.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()

			// Three payments, each PENDING → UNKNOWN → APPROVED: 3 events each.
			var ids []string
			for i := range 3 {
				p, err := store.CreatePending(ctx, pay.Payment{ID: pay.NewID(), MerchantID: "7b0a3c5e-1111-4a4a-9b9b-0123456789ab",
					OrderID: fmt.Sprint("order-", i), Amount: 1000, Currency: "KRW"}, pay.IdempotencyRecord{Key: pay.NewID()})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, p.ID)
			}
			for _, id := range ids {
				if _, err := store.Transition(ctx, id, pay.StatusPending, pay.StatusUnknown, "timeout"); err != nil {
					t.Fatal(err)
				}
				if _, err := store.Transition(ctx, id, pay.StatusUnknown, pay.StatusApproved, "inquiry"); err != nil {
					t.Fatal(err)
				}
			}
			cfg := natspub.DefaultConfig()
			cfg.Stream = fmt.Sprintf("TEST_%d", time.Now().UnixNano())
			cfg.Subject = "test-" + cfg.Stream
			pub, err := natspub.NewPublisher(ctx, nc, cfg)
			if err != nil {
				t.Fatal(err)
			}
			rcfg := pay.DefaultRelayConfig()
			rcfg.Batch = 4

			flaky := &flakyMarks{Store: store}
			relay, err := pay.NewRelay(flaky, pub, rcfg)
			if err != nil {
				t.Fatal(err)
			}
			// Asynchronous: the whole batch is published, then marking it
			// fails.
			if n, err := relay.RunOnce(ctx); err == nil || n != rcfg.Batch {
				t.Fatalf("first pass = %d, %v; want the batch of %d published, then the mark failure", n, err, rcfg.Batch)
			}
			// A fresh relay (the restart) publishes everything that is not
			// marked, including the first row again.
			relay, err = pay.NewRelay(store, pub, rcfg)
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for {
				n, err := relay.RunOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				total += n
				if n == 0 {
					break
				}
			}
			if total != 9 {
				t.Fatalf("the restarted relay published %d rows, want all 9", total)
			}
			if left, _ := store.PendingOutbox(ctx, 10); len(left) != 0 {
				t.Fatalf("%d rows left unpublished", len(left))
			}

			// Downstream: each event exactly once, in per-payment order.
			js, _ := natsjs.New(nc)
			t.Cleanup(func() { _ = js.DeleteStream(context.Background(), cfg.Stream) })
			stream, err := js.Stream(ctx, cfg.Stream)
			if err != nil {
				t.Fatal(err)
			}
			info, err := stream.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != 9 {
				t.Fatalf("the stream holds %d messages, want 9 (the re-published row dropped as a duplicate)", info.State.Msgs)
			}
			cons, err := stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			seqs := map[string][]int64{}
			for range 9 {
				msg, err := cons.Next(natsjs.FetchMaxWait(5 * time.Second))
				if err != nil {
					t.Fatal(err)
				}
				var e pay.Event
				if err := json.Unmarshal(msg.Data(), &e); err != nil {
					t.Fatal(err)
				}
				// Stored partitioned, by the server's transform or by the
				// publisher on a server without one.
				if want := dispatchjs.PartitionedSubject(cfg.Subject, e.PaymentID, cfg.Partitions); msg.Subject() != want {
					t.Errorf("event of %s stored on %s, want %s (server partitions: %v)", e.PaymentID, msg.Subject(), want, pub.ServerPartitions())
				}
				seqs[e.PaymentID] = append(seqs[e.PaymentID], e.Seq)
			}
			for _, id := range ids {
				if got := seqs[id]; len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
					t.Errorf("payment %s events arrived as %v, want [1 2 3]", id, got)
				}
			}
		})
	}
}

// TestStreamLimitsAreSetAndUpdated: the stream is file-backed with the
// configured age and size limits, and a publisher started with new limits
// updates the existing stream.
func TestStreamLimitsAreSetAndUpdated(t *testing.T) {
	nc := natsConn(t, false)
	ctx := context.Background()
	cfg := natspub.DefaultConfig()
	cfg.MaxAge, cfg.MaxBytes = 72*time.Hour, 1<<30
	if _, err := natspub.NewPublisher(ctx, nc, cfg); err != nil {
		t.Fatal(err)
	}
	js, _ := natsjs.New(nc)
	info := func() natsjs.StreamConfig {
		t.Helper()
		s, err := js.Stream(ctx, cfg.Stream)
		if err != nil {
			t.Fatal(err)
		}
		i, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return i.Config
	}
	if got := info(); got.Storage != natsjs.FileStorage || got.MaxAge != 72*time.Hour || got.MaxBytes != 1<<30 {
		t.Fatalf("stream config = storage %v, max age %s, max bytes %d; want file, 72h, 1 GiB", got.Storage, got.MaxAge, got.MaxBytes)
	}
	cfg.MaxAge, cfg.MaxBytes = time.Hour, 64<<20
	if _, err := natspub.NewPublisher(ctx, nc, cfg); err != nil {
		t.Fatal(err)
	}
	if got := info(); got.MaxAge != time.Hour || got.MaxBytes != 64<<20 {
		t.Fatalf("after a restart with new limits: max age %s, max bytes %d; want 1h, 64 MiB", got.MaxAge, got.MaxBytes)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	for field, mutate := range map[string]func(*natspub.Config){
		"stream":           func(c *natspub.Config) { c.Stream = "" },
		"stream_max_age":   func(c *natspub.Config) { c.MaxAge = time.Second },
		"stream_max_bytes": func(c *natspub.Config) { c.MaxBytes = 0 },
		"partitions":       func(c *natspub.Config) { c.Partitions = 0 },
	} {
		cfg := natspub.DefaultConfig()
		mutate(&cfg)
		if err := cfg.Validate(); !containsField(err, field) {
			t.Errorf("%s: Validate() = %v, want an error naming it", field, err)
		}
	}
}

func TestEmbeddedConfigValidateNamesEveryBadField(t *testing.T) {
	c := natspub.DefaultEmbeddedConfig("")
	c.Port = -1
	var got []string
	for _, e := range stampede.FieldErrors(c.Validate()) {
		got = append(got, e.Field)
	}
	if want := []string{"dir", "port"}; !slices.Equal(got, want) {
		t.Errorf("bad fields = %v, want %v", got, want)
	}
	if err := natspub.DefaultEmbeddedConfig(t.TempDir()).Validate(); err != nil {
		t.Errorf("DefaultEmbeddedConfig(dir).Validate() = %v", err)
	}
}

func containsField(err error, field string) bool {
	e, ok := errors.AsType[*pay.Error](err)
	return ok && e.Field == field
}

// TestStreamWhoseSubjectsAnotherHolds: a publisher given a new stream name
// on subjects another stream stores names that stream, on the embedded
// server and on the real one.
func TestStreamWhoseSubjectsAnotherHolds(t *testing.T) {
	for _, real := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded", true: "real"}[real], func(t *testing.T) {
			nc := natsConn(t, real)
			ctx := context.Background()
			id := fmt.Sprintf("%d", time.Now().UnixNano())
			first := natspub.DefaultConfig()
			first.Stream, first.Subject, first.MaxBytes = "FIRST"+id, "overlap"+id, 1<<20
			if _, err := natspub.NewPublisher(ctx, nc, first); err != nil {
				t.Fatal(err)
			}
			js, _ := natsjs.New(nc)
			t.Cleanup(func() { _ = js.DeleteStream(context.Background(), first.Stream) })
			second := first
			second.Stream = "SECOND" + id
			_, err := natspub.NewPublisher(ctx, nc, second)
			if err == nil {
				_ = js.DeleteStream(ctx, second.Stream)
				t.Fatal("a second stream on the same subjects was created")
			}
			if !strings.Contains(err.Error(), "already belong to stream "+first.Stream) {
				t.Fatalf("error = %v, want it to name stream %s", err, first.Stream)
			}
		})
	}
}
