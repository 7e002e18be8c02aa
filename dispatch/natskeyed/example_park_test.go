package natskeyed_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede/dispatch/natskeyed"
)

// A poison event: every event of key "order-7" fails until the handler is
// fixed. After MaxAttempts deliveries the key is parked with its later
// events while "order-8" flows; a redrive then runs order-7's events in
// order, once each. It runs against an in-process nats-server.
func ExampleParking() {
	dir, _ := os.MkdirTemp("", "natskeyed-example-")
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	ctx := context.Background()

	cfg := natskeyed.DefaultConfig()
	cfg.Stream, cfg.Subject, cfg.Durable, cfg.Partitions = "ORDERS", "orders", "shipping", 1
	cfg.MaxAttempts, cfg.NakDelay, cfg.MaxNakDelay = 3, 10*time.Millisecond, 50*time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	if _, err := js.CreateStream(ctx, natskeyed.StreamConfig(cfg.Stream, cfg.Subject, cfg.Partitions)); err != nil {
		log.Fatal(err)
	}
	var fixed atomic.Bool
	ran := make(chan string, 10)
	c, err := natskeyed.New(ctx, js, cfg, func(ctx context.Context, e natskeyed.Event) error {
		if e.Key == "order-7" && !fixed.Load() {
			return errors.New("address missing")
		}
		ran <- e.Key + " " + string(e.Data)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for _, m := range [][2]string{{"order-7", "created"}, {"order-8", "created"}, {"order-7", "paid"}, {"order-8", "paid"}} {
		if _, err := js.Publish(ctx, "orders."+m[0], []byte(m[1])); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(<-ran)
	fmt.Println(<-ran)

	pk, err := natskeyed.OpenParking(ctx, js, cfg)
	if err != nil {
		log.Fatal(err)
	}
	var parked []natskeyed.ParkedKey
	for len(parked) == 0 || parked[0].Events < 2 {
		time.Sleep(20 * time.Millisecond)
		parked, _ = pk.List(ctx)
	}
	fmt.Printf("parked %s: %d events, after %d attempts: %s\n", parked[0].Key, parked[0].Events, parked[0].Attempts, parked[0].Reason)

	fixed.Store(true)
	if err := pk.Redrive(ctx, "order-7"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-ran)
	fmt.Println(<-ran)
	left, _ := pk.Wait(ctx, []string{"order-7"})
	fmt.Println("still parked:", len(left))
	// Output:
	// order-8 created
	// order-8 paid
	// parked order-7: 2 events, after 3 attempts: address missing
	// order-7 created
	// order-7 paid
	// still parked: 0
}
