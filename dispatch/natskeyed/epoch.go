package natskeyed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// EpochBucketName is the JetStream KV bucket that holds the partitions'
// epochs when the stream is replicated: <Stream>_<Durable>_epochs, one
// key per partition.
func (c Config) EpochBucketName() string { return c.Stream + "_" + c.Durable + "_epochs" }

// openEpochs opens (or creates) the epoch bucket with the stream's
// replica count, so that an acknowledged epoch survives what the stream
// survives.
func openEpochs(ctx context.Context, js jetstream.JetStream, cfg Config, replicas int) (jetstream.KeyValue, error) {
	kv, err := bindOrCreateKV(ctx, js, jetstream.KeyValueConfig{Bucket: cfg.EpochBucketName(),
		Description: "session epochs of the keyed consumer " + cfg.Durable + " of " + cfg.Stream,
		Replicas:    max(1, replicas), Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		return nil, fmt.Errorf("dispatch/natskeyed: epoch bucket %s: %w", cfg.EpochBucketName(), err)
	}
	return kv, nil
}

// nextEpoch takes the partition's next epoch from the epoch bucket: one
// more than both the largest epoch any session took and floor (the
// consumer's delivered sequence, so that the epochs also stay above those
// of a deployment that used consumer sequences). The write is a
// compare-and-set on the key's revision, acknowledged once the bucket's
// replicas committed it: two sessions never take the same epoch, and a
// session that starts after another took its epoch takes a larger one,
// whatever node fails.
func (p *partition) nextEpoch(ctx context.Context, floor uint64) (uint64, error) {
	kv := p.c.epochs
	key := "p" + strconv.Itoa(p.index)
	for {
		var last, rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, err
		default:
			if last, err = strconv.ParseUint(string(e.Value()), 10, 64); err != nil {
				return 0, fmt.Errorf("dispatch/natskeyed: epoch of partition %d: %q is not a number", p.index, e.Value())
			}
			rev = e.Revision()
		}
		n := max(last, floor) + 1
		val := []byte(strconv.FormatUint(n, 10))
		if rev == 0 {
			_, err = kv.Create(ctx, key, val)
		} else {
			_, err = kv.Update(ctx, key, val, rev)
		}
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, err
		}
		// Another session took one meanwhile (or the read came from a
		// replica that lagged): read again.
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
