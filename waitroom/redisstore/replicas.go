package redisstore

import (
	"context"
	"fmt"
	"runtime"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/stampede-lab/stampede/waitroom"
)

// Admissions through a failover (Config.AckReplicas).
//
// The admission script moves users from the queue to the active set on the
// room's master; Redis sends that write to the replicas afterwards. If the
// master dies before a replica has it, the promoted replica still shows
// those users waiting, at their old place, and admits others into their
// slots. Nothing is lost for a user who had not yet read "admitted": the
// new master admits them again in queue order. A user who had already
// received an admission token, though, now holds a slot that the room no
// longer counts, and the checkout sees more buyers than the capacity.
//
// With AckReplicas set, a read that would answer "admitted" is confirmed
// before it is answered: on a connection pinned to the room's master it
// reads the ticket again, writes a marker key in the room's slot and sends
// WAIT AckReplicas AckTimeout. WAIT returns once that many replicas have
// acknowledged the master's replication stream up to the marker, and so
// everything the master wrote before it, the admission included. A token
// therefore goes out only for an admission that a replica holds; Redis
// Cluster promotes a replica that has it (with one replica per master, the
// only one). If the master dies between the read and the WAIT, the pinned
// connection fails, and a demoted master refuses the marker: the read
// answers unavailable and the user polls again.
//
// Joins get the same treatment (the join script runs on the pinned
// connection, then the marker and WAIT): an acknowledged join is on a
// replica, so a failover never drops a user from the queue. In a room
// with queue_shards above 1, a join is confirmed by the replicas of its
// queue shard's master, and an admitting read by those of the room's.
//
// The confirmations use a client of their own, with the given client's
// options and a larger pool: a WAIT holds its connection until the
// replicas answer (up to AckTimeout while a replica lags), and must not
// starve the admitter and the waiting users' reads of connections.
//
// The cost falls on joins and on the reads that hand out a token: two
// round trips on a pinned connection plus the replication delay, instead
// of one pipelined script. Waiting reads are unchanged.

// readReplicated reads user's ticket on a connection pinned to the room's
// master and answers it only once AckReplicas replicas have what the master
// wrote up to that read (see above).
func (s *Store) readReplicated(ctx context.Context, room, user string, arrive int) (waitroom.Ticket, error) {
	return s.replicated(ctx, room, user, func(ctx context.Context, conn *redis.Conn, keys []string) ([]any, error) {
		return ticketScript.Run(ctx, conn, keys, user, arrive).Slice()
	})
}

// joinReplicated is Join with AckReplicas: the join script runs on a
// connection pinned to the room's master, and the ticket is answered only
// once AckReplicas replicas have it, so a failover never loses a join
// that was acknowledged.
func (s *Store) joinReplicated(ctx context.Context, room, user, invite string) (waitroom.Ticket, error) {
	return s.replicated(ctx, room, user, func(ctx context.Context, conn *redis.Conn, keys []string) ([]any, error) {
		return joinScript.Run(ctx, conn, append(keys, KeysFor(room).Invites), user, invite).Slice()
	})
}

// replicated runs script on a connection pinned to the master of room's
// slot and answers its ticket once confirmed (see onMaster).
func (s *Store) replicated(ctx context.Context, room, user string,
	script func(ctx context.Context, conn *redis.Conn, keys []string) ([]any, error)) (waitroom.Ticket, error) {
	return call(s, ctx, func(ctx context.Context) (waitroom.Ticket, error) {
		k := KeysFor(room)
		res, err := s.onMaster(ctx, k.Config, k.Ack, func(ctx context.Context, conn *redis.Conn) ([]any, error) {
			return script(ctx, conn, k.scriptKeys())
		})
		if err != nil {
			return waitroom.Ticket{}, err
		}
		return ticketFrom(room, user, res)
	})
}

// onMaster runs script on a connection pinned to the master of slotKey's
// slot, then, on the same connection, writes marker (a key of the same
// slot) and waits for AckReplicas replicas to acknowledge it. The marker
// makes the wait cover everything the master wrote before it, whether or
// not the script itself wrote (WAIT waits for the connection's last write
// only).
func (s *Store) onMaster(ctx context.Context, slotKey, marker string,
	script func(ctx context.Context, conn *redis.Conn) ([]any, error)) ([]any, error) {
	node, err := s.master(ctx, slotKey)
	if err != nil {
		return nil, err
	}
	conn := node.Conn()
	defer conn.Close()
	res, err := script(ctx, conn)
	if err != nil {
		return nil, err
	}
	var acks *redis.Cmd
	if _, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, marker, 1, 0)
		acks = p.Do(ctx, "WAIT", s.ackReplicas, s.ackTimeout.Milliseconds())
		return nil
	}); err != nil {
		return nil, err
	}
	n, err := acks.Int64()
	if err != nil {
		return nil, err
	}
	if n < int64(s.ackReplicas) {
		return nil, waitroom.Unavailable(fmt.Errorf(
			"redisstore: the room's state reached %d of %d replicas within %s", n, s.ackReplicas, s.ackTimeout))
	}
	return res, nil
}

// master returns the confirmations' client of the node that serves key's
// slot as master.
func (s *Store) master(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.ack.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("redisstore: AckReplicas needs a single-node or Cluster client, not %T", s.ack)
}

// ackPoolFactor is how many times the given client's pool the
// confirmations' client may open.
const ackPoolFactor = 4

// ackClient returns a client like client, with a pool ackPoolFactor times
// as large, for the confirmations.
func ackClient(client redis.UniversalClient) (redis.UniversalClient, error) {
	switch c := client.(type) {
	case *redis.Client:
		o := *c.Options()
		o.PoolSize = ackPoolFactor * max(o.PoolSize, 10*runtime.GOMAXPROCS(0))
		o.PushNotificationProcessor = nil // the given client's own: each client makes its own
		o.MaintNotificationsConfig = noMaintNotifications()
		return redis.NewClient(&o), nil
	case *redis.ClusterClient:
		o := *c.Options()
		o.PoolSize = ackPoolFactor * max(o.PoolSize, 10*runtime.GOMAXPROCS(0))
		o.PushNotificationProcessor = nil
		o.MaintNotificationsConfig = noMaintNotifications()
		return redis.NewClusterClient(&o), nil
	}
	return nil, fmt.Errorf("redisstore: Config.AckReplicas needs a single-node or Cluster client, not %T", client)
}

// noMaintNotifications turns go-redis's maintenance notifications off for
// the confirmations' client. Copied options would share the given
// client's settings object, and go-redis writes to it when a server does
// not support the notifications, which races with a second client's reads.
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}
