package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	instapi "github.com/stampede-lab/stampede/institution/api"
	"github.com/stampede-lab/stampede/pay/natspub"
	_ "github.com/stampede-lab/stampede/pay/sqlite" // registers the "sqlite" driver
)

// TestPayEventsSurviveRestarts runs `serve pay` on its embedded defaults
// (SQLite and nats-server, both in one --data-dir) as a child process,
// makes payments, kills it with SIGKILL, restarts it, makes more, stops it
// gracefully with SIGTERM, restarts it, makes more, waits until the relay
// has published the whole outbox and kills it again. Then the JetStream
// store left in the data dir must hold exactly one message per outbox row:
// nothing acknowledged was lost, nothing was published twice.
func TestPayEventsSurviveRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the payment service three times as a child process")
	}
	const perRound = 15
	icfg := instapi.DefaultConfig()
	icfg.AdminToken = "institution-admin-token-for-tests"
	isrv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(isrv)
	defer func() { isrv.Close(); its.Close() }()

	dataDir := t.TempDir()
	addr := freeAddr(t)
	args := []string{"--institution", its.URL, "--data-dir", dataDir}
	_, apiKey := addMerchantCLI(t, filepath.Join(dataDir, "pay.db"))
	payments := 0
	round := func(name string) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range perRound {
			wg.Go(func() {
				body := fmt.Sprintf(`{"order_id":"%s-%d","amount":%d,"currency":"KRW"}`, name, i, 1000+i)
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/payments", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-key-%d", name, i))
				req.Header.Set("Authorization", "Bearer "+apiKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("%s: POST: %v", name, err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					t.Errorf("%s: POST = %d, want 201", name, resp.StatusCode)
				}
			})
		}
		wg.Wait()
		payments += perRound
		if t.Failed() {
			t.FailNow()
		}
	}
	stop := func(child *exec.Cmd, sig syscall.Signal) {
		t.Helper()
		if err := child.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := child.Wait()
		if sig == syscall.SIGTERM && err != nil {
			t.Fatalf("serve pay after SIGTERM: %v, want a clean exit", err)
		}
	}

	child := startPayChild(t, addr, args...)
	round("first")
	stop(child, syscall.SIGKILL) // the relay is likely mid-way through the outbox
	child = startPayChild(t, addr, args...)
	round("second")
	stop(child, syscall.SIGTERM)
	child = startPayChild(t, addr, args...)
	round("third")

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, "pay.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, unpublished int
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := db.QueryRow(`SELECT COUNT(*), COUNT(*) - COUNT(published_at) FROM outbox`).Scan(&rows, &unpublished); err != nil {
			t.Fatal(err)
		}
		if unpublished == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d outbox rows still unpublished after 30s", unpublished, rows)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every row is marked published, so JetStream acknowledged every one:
	// a SIGKILL now must lose none of them.
	stop(child, syscall.SIGKILL)
	if rows != 2*payments { // created, then APPROVED
		t.Fatalf("%d outbox rows for %d payments, want %d", rows, payments, 2*payments)
	}
	want := map[string]bool{}
	q, err := db.Query(`SELECT payment_id, seq FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for q.Next() {
		var (
			id  string
			seq int64
		)
		if err := q.Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("%s-%d", id, seq)] = true
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}

	// The stream, as the data dir holds it.
	_, nc := startNATS(t, filepath.Join(dataDir, "nats"))
	js, _ := natsjs.New(nc)
	ctx := context.Background()
	stream, err := js.Stream(ctx, natspub.DefaultConfig().Stream)
	if err != nil {
		t.Fatalf("the stream is gone after the restarts: %v", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d payments, %d outbox rows, %d stream messages (storage %s, max age %s, max bytes %d)",
		payments, rows, info.State.Msgs, info.Config.Storage, info.Config.MaxAge, info.Config.MaxBytes)
	if int(info.State.Msgs) != rows {
		t.Fatalf("the stream holds %d messages, the outbox %d rows", info.State.Msgs, rows)
	}
	cons, err := stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for range rows {
		msg, err := cons.Next(natsjs.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		id := msg.Headers().Get(nats.MsgIdHdr)
		if got[id] {
			t.Errorf("message %s is in the stream twice", id)
		}
		got[id] = true
		if !want[id] {
			t.Errorf("message %s has no outbox row", id)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d distinct messages, %d outbox rows", len(got), len(want))
	}
}
