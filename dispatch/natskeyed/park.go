package natskeyed

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrPermanent marks a handler error that no retry can cure (a payload
// the handler cannot read, a receiver that answered 4xx): the event is
// parked at once, with its key, instead of after Config.MaxAttempts
// deliveries. Wrap it: fmt.Errorf("...: %w", natskeyed.ErrPermanent).
var ErrPermanent = errors.New("dispatch/natskeyed: permanent failure")

// ErrNotParked is what Parking.Redrive returns for a key that is not
// parked.
var ErrNotParked = errors.New("dispatch/natskeyed: key not parked")

// Headers of a parked copy: where the event came from, so that a redrive
// hands the handler the same Event (ID, key, partition, subject, stream
// sequence) as the original delivery.
const (
	hdrParkedID        = "Stampede-Parked-Id"
	hdrParkedKey       = "Stampede-Parked-Key"
	hdrParkedPartition = "Stampede-Parked-Partition"
	hdrParkedSubject   = "Stampede-Parked-Subject"
	hdrParkedSeq       = "Stampede-Parked-Sequence"
	hdrParkedPublished = "Stampede-Parked-Published"
	hdrParkedDelivery  = "Stampede-Parked-Delivery"
)

// ParkedKey is one parked key as Parking.List reports it.
type ParkedKey struct {
	// Key is the parked key.
	Key string `json:"key"`
	// Partition is the key's partition.
	Partition int `json:"partition"`
	// FirstID and FirstSequence name the event that failed: the
	// oldest parked event of the key.
	FirstID       string `json:"first_id"`
	FirstSequence uint64 `json:"first_sequence"`
	// Reason is the handler's last error.
	Reason string `json:"reason"`
	// Attempts is how many deliveries the failed event had.
	Attempts uint64 `json:"attempts"`
	// ParkedAt is when the key was parked.
	ParkedAt time.Time `json:"parked_at"`
	// Redrive is set while a redrive is asked for and not yet done.
	Redrive bool `json:"redrive,omitempty"`
	// Events counts the key's parked events (List fills it in).
	Events uint64 `json:"events"`
}

// Parking is the parked-key side of a keyed consumer: a JetStream KV
// bucket that lists the parked keys (Config.ParkBucket) and a stream that
// holds their events in order (Config.ParkStream). A Consumer uses one;
// an operator's tool opens one with OpenParking to list keys and ask for
// redrives without consuming anything.
type Parking struct {
	cfg    Config
	kv     jetstream.KeyValue
	stream jetstream.Stream
	js     jetstream.JetStream
}

// OpenParking opens the parking bucket and stream of cfg's consumer,
// creating them if they do not exist (an existing one keeps its
// configuration). Only cfg's Stream, Durable, Subject-independent names and
// ParkReplicas matter.
func OpenParking(ctx context.Context, js jetstream.JetStream, cfg Config) (*Parking, error) {
	replicas := cfg.ParkReplicas
	if replicas == 0 {
		// As many replicas as the stream: parking must survive what the
		// stream survives, or a node's death stops every key that fails.
		replicas = 1
		if st, err := js.Stream(ctx, cfg.Stream); err == nil {
			replicas = max(1, st.CachedInfo().Config.Replicas)
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("dispatch/natskeyed: stream %s: %w", cfg.Stream, err)
		}
	}
	kv, err := bindOrCreateKV(ctx, js, jetstream.KeyValueConfig{Bucket: cfg.ParkBucketName(),
		Description: "keys parked by the keyed consumer " + cfg.Durable + " of " + cfg.Stream, Replicas: replicas,
		Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("dispatch/natskeyed: parking bucket %s: %w", cfg.ParkBucketName(), err)
	}
	st, err := bindOrCreateStream(ctx, js, jetstream.StreamConfig{Name: cfg.ParkStreamName(),
		Description: "events parked by the keyed consumer " + cfg.Durable + " of " + cfg.Stream,
		Subjects:    []string{cfg.parkSubjectPrefix() + ".>"}, Storage: jetstream.FileStorage, Replicas: replicas,
		Duplicates: 2 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("dispatch/natskeyed: parking stream %s: %w", cfg.ParkStreamName(), err)
	}
	return &Parking{cfg: cfg, kv: kv, stream: st, js: js}, nil
}

// encodeKey turns any key into a KV key and subject token.
func encodeKey(key string) string { return "k" + base64.RawURLEncoding.EncodeToString([]byte(key)) }

// parkSubject is the subject of key's parked events.
func (c Config) parkSubject(key string) string { return c.parkSubjectPrefix() + "." + encodeKey(key) }

func (c Config) parkSubjectPrefix() string { return "_parked." + c.Stream + "." + c.Durable }

// ParkBucketName is the KV bucket that lists the parked keys:
// Config.ParkBucket, or <Stream>_<Durable>_parked.
func (c Config) ParkBucketName() string {
	if c.ParkBucket != "" {
		return c.ParkBucket
	}
	return c.Stream + "_" + c.Durable + "_parked"
}

// ParkStreamName is the stream that holds the parked events:
// <Stream>_<Durable>_PARKED, subjects _parked.<Stream>.<Durable>.<key>.
func (c Config) ParkStreamName() string { return c.Stream + "_" + c.Durable + "_PARKED" }

// List returns the parked keys, oldest first, each with its count of
// parked events.
func (pk *Parking) List(ctx context.Context) ([]ParkedKey, error) {
	recs, err := pk.entries(ctx)
	if err != nil {
		return nil, err
	}
	counts := map[string]uint64{}
	if len(recs) > 0 {
		info, err := pk.stream.Info(ctx, jetstream.WithSubjectFilter(pk.cfg.parkSubjectPrefix()+".>"))
		if err != nil {
			return nil, err
		}
		counts = info.State.Subjects
	}
	out := make([]ParkedKey, 0, len(recs))
	for _, r := range recs {
		r.rec.Events = counts[pk.cfg.parkSubject(r.rec.Key)]
		out = append(out, r.rec)
	}
	slices.SortFunc(out, func(a, b ParkedKey) int { return a.ParkedAt.Compare(b.ParkedAt) })
	return out, nil
}

// parkedEntry is one bucket entry and its revision.
type parkedEntry struct {
	rec ParkedKey
	rev uint64
}

// entries reads every bucket entry.
func (pk *Parking) entries(ctx context.Context) ([]parkedEntry, error) {
	lister, err := pk.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []parkedEntry
	for _, k := range keys {
		e, err := pk.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var r ParkedKey
		if json.Unmarshal(e.Value(), &r) != nil {
			continue
		}
		out = append(out, parkedEntry{rec: r, rev: e.Revision()})
	}
	return out, nil
}

// Redrive asks the consumer that owns key's partition to run the key's
// parked events again, in order, and to unpark the key once they all
// succeeded. It returns at once (see Wait); ErrNotParked if key is not
// parked.
func (pk *Parking) Redrive(ctx context.Context, key string) error {
	for range 10 {
		e, err := pk.kv.Get(ctx, encodeKey(key))
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return fmt.Errorf("%w: %q", ErrNotParked, key)
		}
		if err != nil {
			return err
		}
		var r ParkedKey
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return err
		}
		r.Redrive = true
		b, _ := json.Marshal(r)
		if _, err := pk.kv.Update(ctx, encodeKey(key), b, e.Revision()); err == nil {
			return nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		// Changed meanwhile: read again.
	}
	return fmt.Errorf("dispatch/natskeyed: redrive %q: the parked key kept changing", key)
}

// RedriveAll asks for a redrive of every parked key and returns the keys.
func (pk *Parking) RedriveAll(ctx context.Context) ([]string, error) {
	recs, err := pk.entries(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, r := range recs {
		if err := pk.Redrive(ctx, r.rec.Key); err != nil && !errors.Is(err, ErrNotParked) {
			return keys, err
		}
		keys = append(keys, r.rec.Key)
	}
	return keys, nil
}

// Wait waits until none of keys is parked any more (each redrive done),
// or ctx ends; it returns the keys still parked then. A key whose redrive
// failed again stays parked with Redrive cleared: Wait returns it at
// once.
func (pk *Parking) Wait(ctx context.Context, keys []string) ([]string, error) {
	for {
		var left []string
		failed := 0
		for _, k := range keys {
			e, err := pk.kv.Get(ctx, encodeKey(k))
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
				continue
			}
			if err != nil {
				if ctx.Err() != nil {
					return keys, ctx.Err()
				}
				return keys, err
			}
			left = append(left, k)
			var r ParkedKey
			if json.Unmarshal(e.Value(), &r) == nil && !r.Redrive {
				failed++
			}
		}
		if len(left) == 0 || failed == len(left) {
			return left, nil
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// parkState is the consumer's view of one parked key.
type parkState struct {
	rec       ParkedKey
	rev       uint64 // bucket revision of rec
	unparked  bool   // redriven and deleted here; kept as a tombstone until the watcher confirms
	redriving bool
}

// parkedKeys is the consumer's cache of the bucket, kept by a watcher and
// by its own writes.
type parkedKeys struct {
	mu   sync.Mutex
	keys map[string]*parkState
}

// get returns key's state if it is parked.
func (pk *parkedKeys) get(key string) *parkState {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if s := pk.keys[key]; s != nil && !s.unparked {
		return s
	}
	return nil
}

// apply records a bucket entry of revision rev (a put when rec is non-nil,
// a delete otherwise) unless the cache knows a later one. It reports
// whether the entry now asks for a redrive.
func (pk *parkedKeys) apply(key string, rec *ParkedKey, rev uint64) bool {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	s := pk.keys[key]
	if s != nil && rev <= s.rev {
		return false
	}
	if rec == nil {
		delete(pk.keys, key)
		return false
	}
	if s == nil {
		s = &parkState{}
		pk.keys[key] = s
	}
	s.rec, s.rev, s.unparked = *rec, rev, false
	return rec.Redrive && !s.redriving
}

// watchParked mirrors the bucket into c.parked and starts the redrives
// asked for. It returns once the bucket's current entries are in.
func (c *Consumer) watchParked(ctx context.Context) error {
	w, err := c.parking.kv.WatchAll(c.ctx)
	if err != nil {
		return err
	}
	ready := make(chan struct{})
	c.bg.Go(func() {
		defer func() { _ = w.Stop() }()
		initial := true
		for {
			select {
			case <-c.stop:
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					if initial {
						initial = false
						close(ready)
					}
					continue
				}
				c.applyParkedEntry(e)
			}
		}
	})
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Second):
		return errors.New("the parked keys did not load within 10s")
	}
}

// applyParkedEntry takes one bucket entry into the cache.
func (c *Consumer) applyParkedEntry(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		// The key is not in the value of a delete: find it by its code.
		c.parked.mu.Lock()
		for k, s := range c.parked.keys {
			if encodeKey(k) == e.Key() && e.Revision() > s.rev {
				delete(c.parked.keys, k)
			}
		}
		c.parked.mu.Unlock()
		return
	}
	var r ParkedKey
	if json.Unmarshal(e.Value(), &r) != nil {
		return
	}
	if c.parked.apply(r.Key, &r, e.Revision()) {
		c.requestRedrive(r.Key, r.Partition)
	}
}

// refreshParked reads the bucket again, so that a session opening after
// another process parked a key sees it even if the watcher lags. It
// returns the keys whose redrive is asked for; on an error the session
// must not open (a parked key could run).
func (c *Consumer) refreshParked(ctx context.Context) ([]ParkedKey, error) {
	recs, err := c.parking.entries(ctx)
	if err != nil {
		c.cfg.Logger.Warn("dispatch/natskeyed: read the parked keys; the session waits", "err", err)
		return nil, err
	}
	var redrive []ParkedKey
	for _, r := range recs {
		c.parked.apply(r.rec.Key, &r.rec, r.rev)
	}
	c.parked.mu.Lock()
	for _, s := range c.parked.keys {
		if !s.unparked && s.rec.Redrive {
			redrive = append(redrive, s.rec)
		}
	}
	c.parked.mu.Unlock()
	return redrive, nil
}

// requestRedrive has key's queue run a redrive as its next turn, if this
// process owns the key's partition now (else the session that opens the
// partition picks it up).
func (c *Consumer) requestRedrive(key string, partition int) {
	for _, p := range c.parts {
		if p.index != partition {
			continue
		}
		p.mu.Lock()
		s := p.sess
		if s == nil || !s.open {
			p.mu.Unlock()
			return
		}
		kq := s.keys[key]
		if kq == nil {
			kq = &keyQueue{p: p, sess: s, key: key}
			s.keys[key] = kq
		}
		kq.redrive = true
		submit := p.scheduleLocked(kq)
		p.mu.Unlock()
		if submit {
			c.submit(kq)
		}
		return
	}
}

// park parks e's key: the bucket entry first (so that a crash before the
// copy leaves the key parked and the event pending, to be parked on its
// next delivery), then the copy.
func (c *Consumer) park(ctx context.Context, ev Event, cause error) error {
	rec := ParkedKey{Key: ev.Key, Partition: ev.Partition, FirstID: ev.ID, FirstSequence: ev.Sequence,
		Reason: cause.Error(), Attempts: ev.Delivery, ParkedAt: time.Now().UTC()}
	b, _ := json.Marshal(rec)
	rev, err := c.parking.kv.Create(ctx, encodeKey(ev.Key), b)
	switch {
	case err == nil:
		c.parked.apply(ev.Key, &rec, rev)
	case errors.Is(err, jetstream.ErrKeyExists):
		// Parked already (by an earlier owner): the event joins it.
		e, err := c.parking.kv.Get(ctx, encodeKey(ev.Key))
		if err != nil {
			return err
		}
		var r ParkedKey
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return err
		}
		c.parked.apply(r.Key, &r, e.Revision())
	default:
		return err
	}
	c.cfg.Logger.Warn("dispatch/natskeyed: parked a key after its event kept failing; its later events wait until a redrive",
		"key", ev.Key, "partition", ev.Partition, "id", ev.ID, "seq", ev.Sequence, "attempts", ev.Delivery, "err", cause)
	return c.parkCopy(ctx, ev)
}

// parkCopy appends ev to its key's parked events, deduplicated by the
// stream on the original's identity.
func (c *Consumer) parkCopy(ctx context.Context, ev Event) error {
	m := nats.NewMsg(c.cfg.parkSubject(ev.Key))
	for k, vs := range ev.Header {
		if k == nats.MsgIdHdr || k == pinHeader {
			continue
		}
		m.Header[k] = slices.Clone(vs)
	}
	m.Header.Set(hdrParkedID, ev.ID)
	m.Header.Set(hdrParkedKey, ev.Key)
	m.Header.Set(hdrParkedPartition, strconv.Itoa(ev.Partition))
	m.Header.Set(hdrParkedSubject, ev.Subject)
	m.Header.Set(hdrParkedSeq, strconv.FormatUint(ev.Sequence, 10))
	m.Header.Set(hdrParkedPublished, ev.Published.UTC().Format(time.RFC3339Nano))
	m.Header.Set(hdrParkedDelivery, strconv.FormatUint(ev.Delivery, 10))
	m.Data = ev.Data
	_, err := c.js.PublishMsg(ctx, m, jetstream.WithMsgID(c.cfg.Stream+"-"+strconv.FormatUint(ev.Sequence, 10)))
	return err
}

// parkedEvent rebuilds the Event of a parked copy.
func parkedEvent(m *jetstream.RawStreamMsg, epoch uint64) Event {
	h := m.Header
	part, _ := strconv.Atoi(h.Get(hdrParkedPartition))
	seq, _ := strconv.ParseUint(h.Get(hdrParkedSeq), 10, 64)
	del, _ := strconv.ParseUint(h.Get(hdrParkedDelivery), 10, 64)
	pub, _ := time.Parse(time.RFC3339Nano, h.Get(hdrParkedPublished))
	hdr := nats.Header{}
	for k, vs := range h {
		if len(k) > len("Stampede-Parked-") && k[:len("Stampede-Parked-")] == "Stampede-Parked-" {
			continue
		}
		hdr[k] = vs
	}
	if id := h.Get(hdrParkedID); id != "" && hdr.Get(nats.MsgIdHdr) == "" {
		hdr.Set(nats.MsgIdHdr, id)
	}
	return Event{ID: h.Get(hdrParkedID), Key: h.Get(hdrParkedKey), Partition: part, Subject: h.Get(hdrParkedSubject),
		Sequence: seq, Delivery: del, Published: pub, Epoch: epoch, Header: hdr, Data: m.Data}
}

// redrive runs key's parked events in order through the handler, each
// deleted from the parking stream once it succeeded, and unparks the key
// when none is left. An event that fails MaxAttempts times more (or
// permanently) stops the redrive: the key stays parked with the new
// reason. It runs as the key's turn in the dispatcher, so no other event
// of the key runs meanwhile; the key's later events wait in its queue.
func (c *Consumer) redrive(kq *keyQueue, epoch uint64) {
	ctx := c.ctx
	key := kq.key
	subj := c.cfg.parkSubject(key)
	var from uint64 = 1
	done := 0
	for {
		var m *jetstream.RawStreamMsg
		err := retryCall(ctx, func() (err error) {
			m, err = c.parking.stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subj))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil
			}
			return err
		})
		if err == nil && m == nil {
			err = jetstream.ErrMsgNotFound
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			c.redriveFailed(ctx, key, fmt.Errorf("read the parked events: %w", err))
			return
		}
		ev := parkedEvent(m, epoch)
		var herr error
		for attempt := uint64(1); ; attempt++ {
			ev.Delivery++
			herr = c.handler(ctx, ev)
			if herr == nil || errors.Is(herr, ErrPermanent) || errors.Is(herr, ErrFenced) ||
				c.cfg.MaxAttempts > 0 && attempt >= uint64(c.cfg.MaxAttempts) || ctx.Err() != nil {
				break
			}
			select {
			case <-time.After(c.cfg.nakDelay(attempt)):
			case <-ctx.Done():
			}
		}
		if herr != nil {
			if errors.Is(herr, ErrFenced) {
				// Another process owns the partition: it redrives.
				return
			}
			c.redriveFailed(ctx, key, herr)
			return
		}
		if err := retryCall(ctx, func() error { return c.parking.stream.DeleteMsg(ctx, m.Sequence) }); err != nil {
			c.redriveFailed(ctx, key, fmt.Errorf("delete a redriven event: %w", err))
			return
		}
		done++
		from = m.Sequence + 1
	}
	// Nothing left: unpark. The key's queue is running (this redrive), so
	// no event of the key can be parked meanwhile.
	c.parked.mu.Lock()
	s := c.parked.keys[key]
	var rev uint64
	if s != nil {
		rev = s.rev
	}
	c.parked.mu.Unlock()
	err := c.parking.kv.Delete(ctx, encodeKey(key), jetstream.LastRevision(rev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		// Changed meanwhile (a new request): read it and go round again.
		if e, gerr := c.parking.kv.Get(ctx, encodeKey(key)); gerr == nil {
			var r ParkedKey
			if json.Unmarshal(e.Value(), &r) == nil {
				c.parked.apply(key, &r, e.Revision())
			}
			if err = c.parking.kv.Delete(ctx, encodeKey(key), jetstream.LastRevision(e.Revision())); err != nil {
				c.redriveFailed(ctx, key, fmt.Errorf("unpark: %w", err))
				return
			}
		}
	}
	c.parked.mu.Lock()
	if s := c.parked.keys[key]; s != nil {
		s.unparked, s.redriving = true, false
	}
	c.parked.mu.Unlock()
	c.redriven.Add(uint64(done))
	c.cfg.Logger.Info("dispatch/natskeyed: redrove a parked key", "key", key, "events", done)
}

// redriveFailed leaves key parked with the reason of the failed redrive
// and its request cleared.
func (c *Consumer) redriveFailed(ctx context.Context, key string, cause error) {
	c.cfg.Logger.Warn("dispatch/natskeyed: redrive failed; the key stays parked", "key", key, "err", cause)
	for range 5 {
		e, err := c.parking.kv.Get(ctx, encodeKey(key))
		if err != nil {
			break
		}
		var r ParkedKey
		if json.Unmarshal(e.Value(), &r) != nil {
			break
		}
		r.Redrive, r.Reason = false, cause.Error()
		b, _ := json.Marshal(r)
		rev, err := c.parking.kv.Update(ctx, encodeKey(key), b, e.Revision())
		if err == nil {
			c.parked.apply(key, &r, rev)
			break
		}
	}
	c.parked.mu.Lock()
	if s := c.parked.keys[key]; s != nil {
		s.redriving = false
	}
	c.parked.mu.Unlock()
}

// runRedrive runs a redrive as kq's turn; p.mu is held on entry and
// released.
func (c *Consumer) runRedrive(kq *keyQueue) {
	p := kq.p
	kq.redrive = false
	if c.parking == nil {
		p.mu.Unlock()
		return
	}
	c.parked.mu.Lock()
	s := c.parked.keys[kq.key]
	if s == nil || s.unparked || s.redriving {
		c.parked.mu.Unlock()
		next := p.scheduleLocked(kq)
		p.mu.Unlock()
		if next {
			c.submit(kq)
		}
		return
	}
	s.redriving = true
	c.parked.mu.Unlock()
	kq.running = true
	epoch := kq.sess.epoch
	p.mu.Unlock()

	c.inFlight.Add(1)
	c.redrive(kq, epoch)
	c.inFlight.Add(-1)

	p.mu.Lock()
	kq.running = false
	next := p.scheduleLocked(kq)
	p.dropIfEmptyLocked(kq)
	p.mu.Unlock()
	if next {
		c.submit(kq)
	}
}

// retryCall makes up to five attempts at a call to the server, 200 ms
// apart, so that one slow answer does not stop a redrive.
func retryCall(ctx context.Context, f func() error) error {
	var err error
	for range 5 {
		if err = f(); err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}
