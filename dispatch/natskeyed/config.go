package natskeyed

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/stampede-lab/stampede"
)

// Config configures a Consumer. Every duration is a server-side or
// client-side deadline of the protocol described in the package
// documentation; Validate checks the relations between them.
type Config struct {
	// Stream is the JetStream stream to consume.
	Stream string
	// Subject is the subject prefix of the partitioned stream: partition p
	// holds the subjects <Subject>.<p>.>, as produced by the transform of
	// StreamConfig.
	Subject string
	// Durable is the name prefix of the durable consumers: partition p is
	// consumed through the durable consumer <Durable>-<p>. Every process
	// that serves the same partitions uses the same Durable.
	Durable string
	// Partitions is the number of partitions of the stream (the n of
	// partition(n, ...) in its subject transform).
	Partitions int
	// Serve lists the partitions this process consumes. Empty means all of
	// them: with Pinned, every process then asks for every partition and the
	// server pins each partition to one of them. Pinning does not balance:
	// the first process to pull a partition keeps it while it lives, so
	// spreading partitions over processes means giving each its own Serve
	// list (the others take a partition over only when its owner goes).
	// Without Pinned and without Lease, two processes must never serve
	// one partition at once: the server would split its messages between
	// them and per-key order would not hold. A process taking over a
	// partition from one that has stopped is safe (its barrier waits for
	// what the other held). With Lease (and not Pinned), Serve is this
	// process's own share: it takes those partitions at once when they
	// are free, takes any other partition whose holder let its lease run
	// out, and hands such a partition back when its own process asks.
	Serve []int
	// Pinned makes each partition's consumer a priority-group consumer with
	// the pinned_client policy (NATS 2.11+), so that the server delivers a
	// partition to one client at a time and moves it when that client stops
	// pulling for PinnedTTL. Without it, exclusivity is the deployment's
	// job: give each process its own Serve set.
	Pinned bool
	// Group is the priority group name (Pinned only).
	Group string
	// PinnedTTL is how long the server keeps a partition pinned to a client
	// that has stopped pulling (Pinned only). It must exceed PullExpiry, the
	// longest a live client goes without a pull request.
	PinnedTTL time.Duration
	// OwnerTimeout, when positive (Pinned only), turns on the liveness
	// check of alive.go: the processes serving a stream tell each other
	// every OwnerTimeout/3 which pins they hold, and the lowest-named live
	// process unpins a partition with work pending whose pinned client
	// nobody has heard of for OwnerTimeout (a process killed, stopped or
	// cut off), so that the server pins it to a live process at once
	// instead of after PinnedTTL. A live process unpinned by mistake (it
	// was starved for OwnerTimeout) costs a handover, not correctness: its
	// late effects carry a stale Event.Epoch, which the effect store
	// refuses (ErrFenced). Zero turns the check off.
	OwnerTimeout time.Duration
	// Prefer lists partitions this process pulls at once; it starts
	// pulling the other served partitions only after PullExpiry, so that
	// with Pinned every partition is first pinned to a process that
	// prefers it (give each process its own Prefer set to spread the
	// partitions) and moves elsewhere only when that process goes. Empty
	// means no preference.
	Prefer []int
	// Lease, when positive and Pinned is false, makes every process hold
	// each partition it consumes by a lease in a JetStream KV bucket
	// (LeaseBucketName), renewed every Lease/3 by a compare-and-set on
	// the entry's revision, so that no two processes consume a partition
	// at once and a partition whose holder died, stopped or lost the
	// server moves to a live process within Lease plus Lease/3 (its held
	// messages come back after AckWait, and the barrier waits for them).
	// A holder whose latest successful renewal was sent 3/4 of Lease ago
	// starts nothing more of the partition from that instant, and stops
	// pulling it and hands its queued messages back once the renewal has
	// failed (a renewal waits at most Lease/2 for its answer) or was
	// refused because another process holds the lease. Each holder takes a new,
	// larger Event.Epoch from the epoch bucket, so the fence refuses a
	// late effect of the previous one. A process takes the partitions of
	// its own Serve share at once, others only after their lease ran
	// out, and hands those back when their own process comes back. It
	// works on every server version with JetStream; with Pinned it is
	// ignored (the server's pins do the same). Every process of one
	// Durable must use leases, or none: a process without them pulls its
	// Serve list whatever the leases say. Zero turns leases off: then
	// Serve must keep processes apart, and nothing takes over.
	Lease time.Duration

	// Workers is the number of handlers that run at once (the keyed
	// dispatcher's workers, shared by every served partition).
	Workers int
	// MaxPending bounds, per partition, the messages delivered to this
	// process and not yet acknowledged: queued, running or waiting for a
	// redelivery after a failure. It is the consumer's MaxAckPending, so
	// the server enforces it; the memory a Consumer holds is at most
	// MaxPending × served partitions messages, whatever the backlog.
	MaxPending int
	// PullBatch is how many messages one pull request asks for (at most
	// MaxPending).
	PullBatch int
	// PullExpiry is how long one pull request waits at the server.
	PullExpiry time.Duration

	// AckWait is how long the server waits for an acknowledgement, or a
	// progress report, before it redelivers a message.
	AckWait time.Duration
	// InProgressEvery is how often every held message — queued behind its
	// key, running, or waiting for the barrier — is reported in progress,
	// which restarts its AckWait. At most AckWait/2.
	InProgressEvery time.Duration
	// NakDelay is the redelivery delay after a handler's first failure of a
	// message; it doubles with each further delivery, up to MaxNakDelay.
	NakDelay time.Duration
	// MaxNakDelay caps the redelivery delay.
	MaxNakDelay time.Duration

	// MaxAttempts, when positive, bounds the deliveries of an event whose
	// handler fails: after the failure of delivery MaxAttempts (or at once
	// for an error wrapping ErrPermanent) the event is parked with every
	// later event of its key, which wait, in order, until a redrive
	// (Parking.Redrive); the partition's other keys go on. Deliveries are
	// the server's count, so a delivery handed back in a handover counts
	// too. Zero retries a failing event for ever and holds its key.
	MaxAttempts int
	// ParkBucket names the JetStream KV bucket that lists the parked keys
	// (MaxAttempts only); empty means <Stream>_<Durable>_parked. The
	// parked events themselves go to the stream <Stream>_<Durable>_PARKED.
	ParkBucket string
	// ParkReplicas is the replica count of the parking bucket and stream
	// when they are created; 0 means the stream's.
	ParkReplicas int

	// KeyHeader, when set, names the header that holds a message's key.
	// A message without it falls back to KeyToken.
	KeyHeader string
	// KeyToken is the index of the subject token that holds the key, from
	// 0; negative counts from the end (-1 is the last token). For subjects
	// <Subject>.<p>.<id>, -1 selects <id>.
	KeyToken int

	// DrainTimeout is how long Close waits for running handlers before it
	// cancels their context.
	DrainTimeout time.Duration
	// Logger receives the consumer's logs.
	Logger *slog.Logger
}

// DefaultConfig returns a consumer of stream PAYMENTS, subjects
// payments.<p>.<id> in 8 partitions, durable consumers payments-<p>, all
// partitions served through pinned priority groups (on a server without
// them, set Pinned to false: partitions are then held by 10 s leases),
// 8 workers, 1,024
// pending messages and pulls of 256 per partition, a 30 s AckWait with
// progress every 10 s, 8 attempts before a failing event is parked with
// its key, and the key from the last subject token.
func DefaultConfig() Config {
	return Config{
		Stream:          "PAYMENTS",
		Subject:         "payments",
		Durable:         "payments",
		Partitions:      8,
		Pinned:          true,
		Group:           "workers",
		PinnedTTL:       15 * time.Second,
		Lease:           10 * time.Second,
		Workers:         8,
		MaxPending:      1024,
		PullBatch:       256,
		PullExpiry:      5 * time.Second,
		AckWait:         30 * time.Second,
		InProgressEvery: 10 * time.Second,
		NakDelay:        time.Second,
		MaxNakDelay:     30 * time.Second,
		MaxAttempts:     8,
		KeyToken:        -1,
		DrainTimeout:    30 * time.Second,
		Logger:          slog.Default(),
	}
}

// Validate reports every unusable field at once (see stampede.Fields),
// each named in snake_case with the words of the serve worker flag that
// sets it: Workers is "concurrency", DrainTimeout is "shutdown_timeout",
// the others are their own names (PinnedTTL is "pinned_ttl").
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Stream == "" {
		f.Add("stream", "must not be empty")
	}
	if c.Subject == "" {
		f.Add("subject", "must not be empty")
	}
	if c.Durable == "" {
		f.Add("durable", "must not be empty")
	}
	if c.Partitions < 1 {
		f.Add("partitions", "must be at least 1, got %d", c.Partitions)
	}
	if c.Pinned && c.Group == "" {
		f.Add("group", "must not be empty when pinned")
	}
	if c.Pinned && c.PinnedTTL < 2*c.PullExpiry {
		f.Add("pinned_ttl", "must be at least 2 × pull_expiry (%s) when pinned, got %s", 2*c.PullExpiry, c.PinnedTTL)
	}
	if c.Workers < 1 {
		f.Add("concurrency", "must be at least 1, got %d", c.Workers)
	}
	if c.MaxPending < 1 {
		f.Add("max_pending", "must be at least 1, got %d", c.MaxPending)
	}
	if c.PullBatch < 1 || c.PullBatch > c.MaxPending {
		f.Add("pull_batch", "must be between 1 and max_pending (%d), got %d", c.MaxPending, c.PullBatch)
	}
	if c.PullExpiry < time.Second {
		f.Add("pull_expiry", "must be at least 1s, got %s", c.PullExpiry)
	}
	if c.AckWait < 100*time.Millisecond {
		f.Add("ack_wait", "must be at least 100ms, got %s", c.AckWait)
	}
	if c.OwnerTimeout < 0 || c.OwnerTimeout > 0 && c.OwnerTimeout < 30*time.Millisecond {
		f.Add("owner_timeout", "must be 0 (off) or at least 30ms, got %s", c.OwnerTimeout)
	}
	if c.Lease < 0 || c.Lease > 0 && c.Lease < 300*time.Millisecond {
		f.Add("lease", "must be 0 (off) or at least 300ms, got %s", c.Lease)
	}
	if c.InProgressEvery <= 0 || c.InProgressEvery > c.AckWait/2 {
		f.Add("in_progress_every", "must be positive and at most ack_wait/2 (%s), got %s", c.AckWait/2, c.InProgressEvery)
	}
	if c.NakDelay <= 0 {
		f.Add("nak_delay", "must be positive, got %s", c.NakDelay)
	}
	if c.NakDelay > 0 && c.MaxNakDelay < c.NakDelay {
		f.Add("max_nak_delay", "must be at least nak_delay (%s), got %s", c.NakDelay, c.MaxNakDelay)
	}
	if c.MaxAttempts < 0 {
		f.Add("max_attempts", "must be 0 (retry for ever) or positive, got %d", c.MaxAttempts)
	}
	if c.ParkReplicas < 0 || c.ParkReplicas > 5 {
		f.Add("park_replicas", "must be 0 to 5, got %d", c.ParkReplicas)
	}
	if c.DrainTimeout <= 0 {
		f.Add("shutdown_timeout", "must be positive, got %s", c.DrainTimeout)
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	seen := make(map[int]bool, len(c.Serve))
	for _, p := range c.Serve {
		switch {
		case p < 0 || p >= c.Partitions:
			f.Add("serve", "partition %d is outside 0..%d", p, c.Partitions-1)
		case seen[p]:
			f.Add("serve", "partition %d is listed twice", p)
		}
		seen[p] = true
	}
	for _, p := range c.Prefer {
		if p < 0 || p >= c.Partitions || len(c.Serve) > 0 && !seen[p] {
			f.Add("prefer", "partition %d is not served", p)
		}
	}
	return f.Err()
}

// preferred reports whether this process pulls partition p at once.
func (c Config) preferred(p int) bool {
	return len(c.Prefer) == 0 || slices.Contains(c.Prefer, p)
}

// preferredLease reports whether partition p is of this process's own
// share (Serve) when leasing.
func (c Config) preferredLease(p int) bool {
	return len(c.Serve) == 0 || slices.Contains(c.Serve, p)
}

// served returns the partitions this process consumes, or with leases
// may consume (all of them).
func (c Config) served() []int {
	if len(c.Serve) > 0 && !c.leasing() {
		return c.Serve
	}
	all := make([]int, c.Partitions)
	for i := range all {
		all[i] = i
	}
	return all
}

// ConsumerName is the durable consumer of partition p.
func (c Config) ConsumerName(p int) string { return fmt.Sprintf("%s-%d", c.Durable, p) }

// FilterSubject is the subject filter of partition p.
func (c Config) FilterSubject(p int) string { return fmt.Sprintf("%s.%d.>", c.Subject, p) }

// nakDelay is the redelivery delay after a failed delivery number n (from 1).
func (c Config) nakDelay(n uint64) time.Duration {
	d := c.NakDelay
	for i := uint64(1); i < n && d < c.MaxNakDelay; i++ {
		d *= 2
	}
	return min(d, c.MaxNakDelay)
}
