package outlet_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/protocol"
)

// quiet discards logs: the tests fail connections on purpose.
var quiet = slog.New(slog.DiscardHandler)

// eventBody is the JSON of payment p's seq-th event, as pay publishes it.
func eventBody(t testing.TB, p string, seq int64) []byte {
	t.Helper()
	statuses := []protocol.PaymentStatus{protocol.StatusPending, protocol.StatusUnknown, protocol.StatusApproved}
	ev := protocol.PaymentEvent{Type: protocol.EventStatusChanged, PaymentID: p, Seq: seq, MerchantID: "m1",
		OrderID: "order-" + p, Amount: 1000 + seq, Currency: "KRW", Status: statuses[int(seq-1)%len(statuses)],
		At: time.Unix(1_700_000_000+seq, 0).UTC()}
	if seq == 1 {
		ev.Type = protocol.EventCreated
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsStream is a test stream on an embedded nats-server and a consumer
// configuration for it.
type jsStream struct {
	t   testing.TB
	js  jetstream.JetStream
	cfg dispatchjs.Config
}

var streams atomic.Int64

// embedded starts a JetStream nats-server in-process for the test and
// returns its URL.
func embedded(t testing.TB) string {
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
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.ClientURL()
}

// newStreamOn creates a stream of partitions partitions, named for this
// test alone, on the server at url, with a keyed consumer's configuration
// tuned for tests (short delays); the stream and its parking go when the
// test ends.
func newStreamOn(t testing.TB, url string, partitions int) *jsStream {
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
	id := fmt.Sprintf("OUT%d_%d", time.Now().UnixNano(), streams.Add(1))
	cfg := dispatchjs.DefaultConfig()
	cfg.Stream, cfg.Subject, cfg.Durable, cfg.Partitions = id, "ev"+id, "outlet", partitions
	cfg.Pinned = dispatchjs.PinningSupported(nc.ConnectedServerVersion())
	cfg.PinnedTTL, cfg.PullExpiry = 2*time.Second, time.Second
	cfg.AckWait, cfg.InProgressEvery = 5*time.Second, time.Second
	cfg.NakDelay, cfg.MaxNakDelay = 20*time.Millisecond, 200*time.Millisecond
	cfg.DrainTimeout = 5 * time.Second
	cfg.Workers = 8
	cfg.Logger = quiet
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subject + ".>"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), cfg.Stream)
		_ = js.DeleteKeyValue(context.Background(), cfg.ParkBucketName())
		_ = js.DeleteStream(context.Background(), cfg.ParkStreamName())
	})
	return &jsStream{t: t, js: js, cfg: cfg}
}

// publish publishes the events from..to of every payment of payments,
// seq by seq (every payment's event from, then every payment's from+1...),
// each with its event id as Nats-Msg-Id, as pay's relay does.
func (s *jsStream) publish(payments []string, from, to int64) {
	s.t.Helper()
	wait := func() {
		select {
		case <-s.js.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			s.t.Fatal("publishing did not complete in 30s")
		}
	}
	n := 0
	for seq := from; seq <= to; seq++ {
		for _, p := range payments {
			msg := &nats.Msg{Subject: dispatchjs.PartitionedSubject(s.cfg.Subject, p, s.cfg.Partitions),
				Data: eventBody(s.t, p, seq), Header: nats.Header{}}
			msg.Header.Set(nats.MsgIdHdr, protocol.EventID(p, seq))
			if _, err := s.js.PublishMsgAsync(msg); err != nil {
				s.t.Fatal(err)
			}
			if n++; n%1000 == 0 {
				wait()
			}
		}
	}
	wait()
}

// consume runs a keyed consumer with handler h until the test ends.
func (s *jsStream) consume(h dispatchjs.Handler) *dispatchjs.Consumer {
	s.t.Helper()
	c, err := dispatchjs.New(context.Background(), s.js, s.cfg, h)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(c.Close)
	return c
}

// waitUntil polls cond every 20 ms until it holds, or fails after limit.
func waitUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// receiverScript is the example receiver.
func receiverScript(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "receiver-python", "receiver.py")
}

// python3 returns the interpreter: python3 on PATH (STAMPEDE_PYTHON3
// names another), resolved once to the binary itself, since a version
// manager's shim (pyenv) can take seconds to start on a loaded machine.
// Without one the test is skipped (failed under CI=true).
func python3(t testing.TB) string {
	t.Helper()
	py := testenv.Executable(t, "STAMPEDE_PYTHON3", "python3")
	pythonOnce.Do(func() {
		out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output()
		if p := strings.TrimSpace(string(out)); err == nil && p != "" {
			pythonPath = p
		}
	})
	if pythonPath != "" {
		return pythonPath
	}
	return py
}

var (
	pythonOnce sync.Once
	pythonPath string
)

// receiver is a running example receiver.
type receiver struct {
	cmd    *exec.Cmd
	addr   string
	counts chan string // the "counts {...}" line it prints when it stops
}

// startReceiver starts the example receiver with secret on port (0: a
// free one) over the SQLite file db (see python3).
func startReceiver(t testing.TB, db string, port int, args ...string) *receiver {
	t.Helper()
	cmd := exec.Command(python3(t), append([]string{receiverScript(t), "--port", fmt.Sprint(port), "--db", db}, args...)...)
	cmd.Env = append(os.Environ(), "STAMPEDE_DELIVER_SECRET="+secret)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &receiver{cmd: cmd, counts: make(chan string, 1)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	ready := make(chan string, 1)
	go func() {
		for lines.Scan() {
			l := lines.Text()
			if a, ok := strings.CutPrefix(l, "listening on "); ok {
				ready <- a
			}
			if c, ok := strings.CutPrefix(l, "counts "); ok {
				r.counts <- c
			}
		}
		close(ready)
	}()
	select {
	case a, ok := <-ready:
		if !ok {
			t.Fatal("the receiver stopped before listening")
		}
		r.addr = a
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver did not listen in 10s")
	}
	return r
}

// url is the receiver's endpoint.
func (r *receiver) url() string { return "http://" + r.addr + "/events" }

// stop ends the receiver with SIGINT and returns the counts it printed.
func (r *receiver) stop(t testing.TB) map[string]int {
	t.Helper()
	_ = r.cmd.Process.Signal(os.Interrupt)
	var counts map[string]int
	select {
	case c := <-r.counts:
		if err := json.Unmarshal([]byte(c), &counts); err != nil {
			t.Fatalf("receiver counts %q: %v", c, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver did not stop in 10s")
	}
	_ = r.cmd.Wait()
	return counts
}

// applied is one row of the receiver's applied log.
type applied struct {
	N         int    `json:"n"`
	EventID   string `json:"event_id"`
	PaymentID string `json:"payment_id"`
	Seq       int64  `json:"seq"`
}

// dump reads the receiver's applied log from db, in the order applied.
func dump(t testing.TB, db string) []applied {
	t.Helper()
	out, err := exec.Command(python3(t), receiverScript(t), "--db", db, "--dump").Output()
	if err != nil {
		t.Fatalf("receiver --dump: %v", err)
	}
	var rows []applied
	for l := range strings.Lines(string(out)) {
		var a applied
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("dump line %q: %v", l, err)
		}
		rows = append(rows, a)
	}
	return rows
}
