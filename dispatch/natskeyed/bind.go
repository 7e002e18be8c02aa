package natskeyed

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// bindOrCreateKV opens the bucket cfg names if it exists and creates it
// if not. Opening asks only the bucket's stream leader (a stream info
// request); creating, like jetstream's CreateOrUpdateKeyValue, also asks
// the meta leader (account info, then a create or update proposal). After
// a node of a cluster dies, the meta leader can take tens of seconds to
// answer on a loaded machine while the stream's surviving replicas
// already serve: a consumer or tool that restarts then must not wait for
// it. An existing bucket keeps its configuration.
func bindOrCreateKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Another process created it first.
		return js.KeyValue(ctx, cfg.Bucket)
	}
	return kv, err
}

// bindOrCreateStream is bindOrCreateKV for a plain stream.
func bindOrCreateStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, cfg.Name)
	if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		return st, err
	}
	st, err = js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.Stream(ctx, cfg.Name)
	}
	return st, err
}
