// Package natskeyed feeds the keyed dispatcher (package dispatch, Keyed
// strategy) from a partitioned NATS JetStream stream: events of one key run
// one at a time and in stream order, while any idle worker takes any key
// that is ready, so one hot key occupies one worker and no more.
//
// # Layout
//
// One stream holds every event. A subject transform (StreamConfig) stores
// <subject>.<id> as <subject>.<p>.<id>, p = partition(n, id), so all events
// of an id share a partition and a partition's order is the stream order.
// Each partition p has one durable pull consumer, <Durable>-<p>, filtered on
// <subject>.<p>.>. With Config.Pinned (NATS 2.11+) the consumer has a
// priority group with the pinned_client policy: every process asks for every
// partition, the server delivers a partition to one pinned client at a
// time, and moves it when that client stops pulling for PinnedTTL. Without
// pinning (a server before 2.11), Config.Lease holds each partition by a
// lease in a JetStream KV bucket, so that one process at a time consumes
// it and a live process takes over a dead one's partitions (see Leases
// below); with Lease 0, Config.Serve assigns partitions to processes
// statically and nothing takes over.
//
// # Protocol
//
// A partition's messages arrive on one goroutine, in delivery order. Each is
// held in its key's queue, sorted by stream sequence, and the key gets a
// token in the keyed dispatcher when its oldest message may run; the
// dispatcher's worker runs that one message and acknowledges it only after
// the handler returned nil. A handler error negatively acknowledges the
// message with a delay (NakDelay, doubling per delivery, at most
// MaxNakDelay) and the message stays at the head of its key: later messages
// of the key wait for its redelivery.
//
// Every held message — queued behind its key or behind the barrier below,
// or running — is reported in progress every InProgressEvery (at most
// AckWait/2), so messages waiting behind a hot key, and a handler slower
// than AckWait, are not redelivered because their AckWait passed. (A
// message negatively acknowledged is not reported: the server holds it for
// its delay.) The consumer's MaxAckPending is MaxPending,
// so the server never has more than MaxPending unacknowledged messages of a
// partition out, and a process holds at most MaxPending × served partitions
// messages whatever the backlog. A hot key can fill that window; its
// neighbours in the partition then wait for it (the price of bounded
// memory; other partitions are unaffected).
//
// Every delivery is checked against the messages held and the key's recent
// completions: a message delivered again while held (its progress report
// came late, or the server replayed it as below) keeps its one entry, and a message completed here recently (its
// acknowledgement was lost; a partition remembers its last 4 × MaxPending
// completions) is acknowledged again, not run.
//
// Ownership comes in sessions: one pin id of the pinned consumer, or the
// whole life of an unpinned one (which first waits until no other client
// has a pull request waiting on the partition: a stopped owner's requests
// live on for up to PullExpiry). A new session starts with a barrier: none
// of its messages runs until the consumer's NumAckPending, read from the
// server, is no larger than the number of messages the session holds whose
// stream sequence is not above the consumer's delivered position in that
// reading (and, pinned, the pin is still this session's). Those held
// messages are pending at the server, so the counts being equal means
// every pending message of the partition is held here: nothing earlier is
// still running in the previous owner, or waiting for its AckWait before
// it is redelivered. A message the session received before the reading
// but above the consumer's delivered position (a consumer leader that
// took over without hearing of that delivery) holds the barrier until the
// consumer has delivered it again.
//
// The barrier closes again during a session whenever a delivery's
// consumer sequence does not follow the previous one. The consumer
// sequence counts the consumer's deliveries, and within a session every
// delivery of the partition comes here, so a jump means a delivery that
// never arrived (its connection's server died while forwarding it, in a
// cluster) or a new consumer leader whose count is behind: the server
// counts the lost message as pending and would hand out the key's later
// messages first. Until the barrier passes again (the lost message comes
// back after its AckWait), no new message starts. Messages the previous owner
// held come back to the new one (after its Close hands them back, or after
// AckWait when it died) and take their place in stream order before the
// barrier opens. A session ends when the pin changes (ErrPinIDMismatch, a
// message with another pin id, or a barrier reading another pin id): its
// queued messages go back to the server, its running ones finish.
//
// Each session has an epoch, Event.Epoch. On a stream with one replica,
// without leases, it is the consumer sequence of the session's first
// delivery: the consumer
// sequence counts every delivery of the durable consumer, whoever receives
// it, so a later session of a partition, in any process, has a larger
// epoch than every earlier one. On a replicated stream the consumer can
// change leader when a node fails, and the new leader's count can be
// behind the old one's, so the epochs come from a JetStream KV bucket with
// the stream's replica count (and so they do with leases, whatever the
// replicas) (Config.EpochBucketName, one key per
// partition): the barrier takes the session's epoch, one more than the
// largest taken before (and than the consumer's delivered count), by a
// compare-and-set the bucket acknowledges once its replicas have
// committed it, and runs nothing before. It takes the epoch before its
// reading that confirms the pin, so a session pinned later takes a larger
// epoch whatever node fails. A handler whose effect store refuses its
// epoch as stale (ErrFenced) hands the message back and ends the session.
//
// With Config.OwnerTimeout, the processes announce the pins they hold on a
// core NATS subject (alive.go), and one of them unpins a partition with
// work pending whose pinned client nobody has announced for OwnerTimeout:
// a killed or stopped owner is replaced in about OwnerTimeout plus AckWait
// (its held messages come back after AckWait) instead of PinnedTTL. With
// Config.Prefer, a process pulls its preferred partitions at once and the
// others after PullExpiry, which spreads the pins over the processes.
//
// Close stops pulling, hands queued messages back (negative acknowledgement
// without delay), waits for running handlers and acknowledges them, and
// unpins the partitions it held, so that the next process takes over at
// once instead of after PinnedTTL. Unpinned on a server before 2.11, it
// hands the queued messages back only once its pull requests have left the
// server (at most PullExpiry; the next owner waits for the same before it
// starts): on those servers (nats-server 2.9, and 2.10 before the 2024 fix,
// pull request 5305), a message handed back while a request nobody listens
// to is first in the server's queue makes the server step its stream
// position back by one and deliver the partition's latest message again as
// a first delivery (NumDelivered 1), even though it may have run and been
// acknowledged already. The same server behaviour can still strike there
// at other rare moments (a redelivery that meets a pull request expiring at
// that instant); a replay that reaches the process that ran the message is
// recognised as above, one that reaches another process runs again, which
// the inbox below makes harmless.
//
// # Leases
//
// With Config.Lease on an unpinned consumer, every process considers
// every partition, and consumes one only while it holds its lease: the
// key p<n> of the KV bucket Config.LeaseBucketName (the stream's replica
// count, history 1), whose value names the holder. The holder renews it
// every Lease/3 by a compare-and-set on the entry's revision (an update
// that the bucket refuses unless the revision is still the one it
// wrote). Another process takes the lease, by the same compare-and-set,
// once it has seen one revision unchanged for a whole Lease by its own
// clock: the holder has not renewed (killed, stopped, cut off). The
// holder counts its lease valid until 3/4 of Lease after it sent its
// latest successful renewal, which is before any other process can have
// seen that revision for a whole Lease; past it (or when a renewal is
// refused because another process holds the lease) it starts no more
// message of the partition, stops pulling it, and hands its queued
// messages back. So no two processes consume a partition at once, and a
// dead holder's partitions move within Lease plus Lease/3 (one look per
// Lease/3): the new holder waits until the old one's pull requests left
// the server (at most PullExpiry), takes a new epoch from the epoch
// bucket (larger than every earlier one), and its barrier waits for the
// old holder's messages, which come back after AckWait. A holder stopped
// past its lease (a pause, a network partition) may still be running a
// handler when it wakes: that handler's effect carries the old epoch and
// the fence refuses it (ErrFenced), as with pinning.
//
// Config.Serve is a process's own share: it takes a free partition of its
// share at once, and any other partition only once that partition's
// lease has gone unrenewed (or the key has been free) for a whole Lease.
// When a process finds a partition of its own share held by another,
// live process (after a restart), it asks for it back (key w<n>); the
// holder hands it back the way Close does (stops pulling, waits for its
// pull requests to leave the server, hands its queued messages back,
// deletes the lease), and the asking process takes it at once. So while
// every process lives, each consumes exactly its share, as without
// leases; a takeover lasts until the partition's own process returns.
// Close deletes the leases it holds. Stats counts Takeovers, Handbacks
// and LeaseLosses.
//
// # Poison events
//
// With Config.MaxAttempts (default 8), an event whose handler fails on
// delivery MaxAttempts, or returns an error wrapping ErrPermanent, is
// parked instead of being retried again: its key is recorded in a
// JetStream KV bucket (Config.ParkBucketName) and the event is copied, in
// order, to a parking stream (Config.ParkStreamName) and acknowledged.
// Every later event of a parked key takes the same way when its turn
// comes, instead of running, so the key keeps its order and the
// partition's other keys go on. Each process watches the bucket, and a
// session reads it afresh before its barrier opens, so a key parked by an
// earlier owner stays parked.
//
// Parking.Redrive marks a parked key; the owner of its partition runs the
// parked events, as the key's next turn in the dispatcher, through the
// handler with their original identity (Event.ID, Key, Partition, Subject,
// Sequence) and the session's Epoch, deleting each from the parking stream
// once it succeeded, then deletes the key's entry. Events of the key that
// arrived meanwhile wait in its queue and run after. A parked event that
// fails again MaxAttempts times stops the redrive: the key stays parked
// with the new reason. Parking is at least once like every delivery: a
// process that dies between a redriven event's effect and its deletion
// runs it again on the next redrive, which the inbox makes harmless.
//
// # Guarantee
//
// Per-key order: within a partition, a message of key K starts only after
// every earlier (lower stream sequence) message of K has succeeded and been
// acknowledged (or, parked, has succeeded in a redrive), and no two
// messages of K run at once. (A consumer delivers
// a partition's messages for the first time in stream order, so an earlier
// message is either acknowledged or pending, and the barrier makes every
// pending one the owner's.) This holds
//
//   - under handler errors (the failed message keeps its place);
//   - under hot keys and slow handlers, as long as the process can reach
//     the server at least once per AckWait (progress reports);
//   - across Close and failover to another process (pinning gives one
//     owner per partition, the barrier keeps the new owner waiting for
//     everything the old one held);
//   - across the death of a process: its messages are redelivered after
//     AckWait, and the barrier holds the new owner until they arrive
//     (pinned, or with leases; with static partitions, once the process
//     or another one serving its partitions is started);
//   - across the loss of a node of a NATS cluster (replicated stream):
//     a delivery lost with the node, or a consumer leader that moves,
//     closes the barrier until the consumer's pending messages are held
//     again, and the epochs come from the replicated bucket.
//
// On its own it does not hold when a live process loses contact with the
// server for longer than AckWait (a network partition, a pause longer than
// AckWait, or a process unpinned by OwnerTimeout while it was stopped): the
// server then redelivers its messages elsewhere while it may still be
// running them, and its messages already queued may start when it wakes
// before it learns that its pin moved. Messages are not started while the
// connection is down, which narrows but does not close this window. The
// fence closes it for effects: an effect store that keeps, per partition,
// the largest Event.Epoch it has written and refuses a smaller one, and
// per key the last applied sequence and refuses one not above it, in the
// effect's transaction, never applies the stale process's late effects
// (its handler still runs, and its effect is refused). The events lab
// (lab/events) runs this under SIGSTOP. Per-key order does not hold when,
// without pinning and without leases, two processes serve one partition
// at once (a deployment error: see Config.Serve), or when someone else
// limits the consumers' MaxDeliver.
//
// Delivery is at least once. A message runs again after a handler error,
// and may run again in another process when its owner died after the
// handler finished and before the acknowledgement reached the server (or,
// rarely, on nats-server 2.9, after a handover, as Close explains).
// Event.ID (the Nats-Msg-Id header, else stream and sequence) and
// Event.Delivery let a handler make its effects exactly once: record the
// processed ID in the same transaction as the effect, and skip an ID
// already recorded (an inbox table); fence with Event.Epoch and the key's
// sequence as above to reject the late effects of a process that lost its
// partition.
package natskeyed
