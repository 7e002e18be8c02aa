package natskeyed_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede/dispatch/natskeyed"
)

// A worker process: the stream partitions payments.<id> into 8
// partitions, every worker asks for all of them, and the server pins each
// partition to one worker at a time. The handler makes its effect exactly
// once with an inbox keyed by the event id.
func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cfg := natskeyed.DefaultConfig() // PAYMENTS, payments.<p>.<id>, 8 partitions, pinned
	if _, err := js.CreateOrUpdateStream(ctx, natskeyed.StreamConfig(cfg.Stream, cfg.Subject, cfg.Partitions)); err != nil {
		log.Fatal(err)
	}
	c, err := natskeyed.New(ctx, js, cfg, func(ctx context.Context, e natskeyed.Event) error {
		// In one transaction: skip if e.ID is in the inbox; apply the
		// effect of e.Data for e.Key; insert e.ID into the inbox.
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	c.Close() // hands queued events back and unpins, so another worker takes over at once
	log.Printf("stopped: %+v", c.Stats())
}
