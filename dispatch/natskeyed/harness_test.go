package natskeyed

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede/dispatch"
)

// target is a NATS server to test against: the embedded one, always, and
// the real one named by STAMPEDE_NATS_URL when set.
type target struct {
	name string
	url  string
}

// targets starts an embedded server and returns it, plus the real server
// when STAMPEDE_NATS_URL is set.
func targets(t testing.TB) []target {
	t.Helper()
	ts := []target{{"embedded", startEmbedded(t)}}
	if url := os.Getenv("STAMPEDE_NATS_URL"); url != "" {
		ts = append(ts, target{"real", url})
	}
	return ts
}

func startEmbedded(t testing.TB) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("embedded nats-server not ready in 10s")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv.ClientURL()
}

// connect opens a connection and its JetStream context.
func connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

var streamCounter atomic.Int64

// fixture is one test stream and the means to fill it.
type fixture struct {
	t         testing.TB
	url       string
	js        jetstream.JetStream
	version   string
	transform bool // the server partitions by subject transform
	cfg       Config
	ledger    *dispatch.Ledger
	published int
}

// newFixture creates a memory stream with partitions and a config for it.
// On a server without subject transforms (before 2.10) it publishes to the
// partitioned subjects itself; without pinning (before 2.11) the config is
// unpinned.
func newFixture(t testing.TB, tg target, partitions int) *fixture {
	t.Helper()
	nc, js := connect(t, tg.url)
	f := &fixture{t: t, url: tg.url, js: js, version: nc.ConnectedServerVersion(), ledger: dispatch.NewLedger()}
	f.transform = TransformSupported(f.version)
	id := fmt.Sprintf("T%d_%d", time.Now().UnixNano(), streamCounter.Add(1))
	cfg := DefaultConfig()
	cfg.Stream, cfg.Subject, cfg.Durable, cfg.Partitions = id, "ev"+id, "c"+id, partitions
	cfg.Pinned = PinningSupported(f.version)
	cfg.PinnedTTL, cfg.PullExpiry = 2*time.Second, time.Second
	cfg.AckWait, cfg.InProgressEvery = 2*time.Second, 300*time.Millisecond
	cfg.NakDelay, cfg.MaxNakDelay = 50*time.Millisecond, time.Second
	cfg.DrainTimeout = 10 * time.Second
	// Static partitions when unpinned, as before leases: the lease tests
	// (lease_test.go) turn them on.
	cfg.Lease = 0
	f.cfg = cfg
	var sc jetstream.StreamConfig
	if f.transform {
		sc = StreamConfig(cfg.Stream, cfg.Subject, partitions)
	} else {
		sc = jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subject + ".>"}}
	}
	sc.Storage = jetstream.MemoryStorage
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), cfg.Stream)
		_ = js.DeleteKeyValue(context.Background(), cfg.ParkBucketName())
		_ = js.DeleteStream(context.Background(), cfg.ParkStreamName())
		_ = js.DeleteKeyValue(context.Background(), cfg.LeaseBucketName())
		_ = js.DeleteKeyValue(context.Background(), cfg.EpochBucketName())
	})
	return f
}

// publish appends one event per key in keys, in order, recording each in
// the ledger; the payload is "<key> <per-key sequence>".
func (f *fixture) publish(keys []string) {
	f.t.Helper()
	ctx := context.Background()
	const window = 2000
	var futures []jetstream.PubAckFuture
	flush := func() {
		select {
		case <-f.js.PublishAsyncComplete():
		case <-time.After(60 * time.Second):
			f.t.Fatal("publishing did not complete in 60s")
		}
		for _, fu := range futures {
			select {
			case err := <-fu.Err():
				f.t.Fatal(err)
			default:
			}
		}
		futures = futures[:0]
	}
	for _, k := range keys {
		seq := f.ledger.Submit(k)
		subject := f.cfg.Subject + "." + k
		if !f.transform {
			subject = PartitionedSubject(f.cfg.Subject, k, f.cfg.Partitions)
		}
		fu, err := f.js.PublishAsync(subject, []byte(k+" "+strconv.FormatUint(seq, 10)))
		if err != nil {
			f.t.Fatal(err)
		}
		futures = append(futures, fu)
		if len(futures) == window {
			flush()
		}
		f.published++
	}
	flush()
	_ = ctx
}

// parse reads a payload written by publish.
func parse(t testing.TB, data []byte) (string, uint64) {
	k, s, ok := strings.Cut(string(data), " ")
	seq, err := strconv.ParseUint(s, 10, 64)
	if !ok || err != nil {
		t.Errorf("bad payload %q", data)
	}
	return k, seq
}

// progress counts completions and lets a test wait for a number of them.
type progress struct {
	mu   sync.Mutex
	n    int
	cond chan struct{} // closed and replaced on every completion
}

func newProgress() *progress { return &progress{cond: make(chan struct{})} }

func (p *progress) add() {
	p.mu.Lock()
	p.n++
	close(p.cond)
	p.cond = make(chan struct{})
	p.mu.Unlock()
}

// count returns the completions so far.
func (p *progress) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// waitFor waits until at least n completions, or fails after limit.
func (p *progress) waitFor(t testing.TB, n int, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for {
		p.mu.Lock()
		got, ch := p.n, p.cond
		p.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d of %d events completed within %s", got, n, limit)
		}
	}
}

// waitUntil polls cond every 10 ms until it holds, or fails after limit.
func waitUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkLedger fails on any violation, overlap, duplicate or loss, and on a
// vacuous check.
func checkLedger(t testing.TB, l *dispatch.Ledger) dispatch.Report {
	t.Helper()
	r := l.Report()
	if r.Violations != 0 || r.Overlaps != 0 || r.Duplicates != 0 || r.Outstanding() != 0 {
		t.Errorf("ledger: %d violations, %d overlaps, %d duplicates, %d lost of %d", r.Violations, r.Overlaps, r.Duplicates, r.Outstanding(), r.Submitted)
	}
	if r.Vacuous() {
		t.Error("ledger: no key had two events; the order check was vacuous")
	}
	return r
}

// keysFor returns n events over keys "k0".."k<keys-1>", round robin, with
// every hotEvery-th event going to "hot" instead (0: no hot key).
func keysFor(n, keys, hotEvery int) []string {
	out := make([]string, n)
	for i := range out {
		if hotEvery > 0 && i%hotEvery == 0 {
			out[i] = "hot"
		} else {
			out[i] = "k" + strconv.Itoa(i%keys)
		}
	}
	return out
}
