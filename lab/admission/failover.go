package admission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// The failover experiment: one room on a Redis Cluster whose
// masters each have a replica. Buyers join, poll, take their admission to
// a checkout that holds it for a while and then release it, while the
// master serving the room's slot is killed mid-run and its replica takes
// over. Redis replicates asynchronously, so to make the loss certain
// rather than a matter of luck the replica is stopped (SIGSTOP) and the
// master closes its replication link (CLIENT KILL TYPE replica) for
// FailoverConfig.Stall first: everything the master writes meanwhile never
// reaches the replica. The master is then killed (SIGKILL), the replica
// continued (SIGCONT), and the cluster promotes it.
//
// Without redisstore.Config.AckReplicas, buyers who were handed an
// admission during the stall hold tokens the new master does not count:
// it admits others into their slots, and the checkout sees more buyers
// than the capacity. With it, no join and no admission is answered before
// the replica has it, so nothing the buyers were told is lost; admissions
// the master made but never confirmed are simply not there on the new
// master, and those buyers are still in the queue at their old place.

// FailoverConfig holds the parameters of one failover run.
type FailoverConfig struct {
	// Cluster is the Redis Cluster client options (three masters with a
	// replica each, on this machine: the experiment signals the nodes'
	// processes by the pid their INFO reports).
	Cluster *redis.ClusterOptions
	// AckReplicas is the store's redisstore.Config.AckReplicas (0: off).
	AckReplicas int
	// QueueShards is the room's queue_shards (0 or 1: one queue).
	QueueShards int
	// Capacity is the room's capacity.
	Capacity int
	// Users join at JoinRate per second from the start.
	Users    int
	JoinRate float64
	// Hold is how long the checkout keeps a buyer (uniform in
	// [Hold/2, 3Hold/2]) before it releases the admission.
	Hold time.Duration
	// Poll is the buyers' and the admitter's interval.
	Poll time.Duration
	// FaultAt is when the fault starts; Stall how long the replica is
	// stopped before the master is killed.
	FaultAt, Stall time.Duration
	// Duration is the length of the run.
	Duration time.Duration
	// Restart is a shell command that starts the killed node again
	// ("{port}" is replaced by its port) as soon as its replica has taken
	// over. Empty: the experiment starts it itself, with the executable
	// and the settings (CONFIG GET) the node had before it was killed, on
	// its directory, where it finds its cluster configuration and rejoins
	// as a replica.
	Restart string
	// ReadyTimeout bounds the wait, before the run, for the cluster to be
	// ready: every node answers cluster_state:ok and lists a replica for
	// every slot range, and every replica's link to its master is up.
	// Zero means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Progress receives a line when the run waits for the cluster, and
	// every few seconds while it does; nil means none.
	Progress io.Writer
}

// DefaultFailoverConfig returns a run of 16 s in which the room still has
// room when the fault comes (80 of 100 admitted, few released yet): the
// admissions the master makes during the stall then outnumber the
// releases it loses with them, which is when lost tokens overfill the
// checkout.
func DefaultFailoverConfig() FailoverConfig {
	return FailoverConfig{
		AckReplicas: 1, Capacity: 100, Users: 300, JoinRate: 20,
		Hold: 6 * time.Second, Poll: 50 * time.Millisecond,
		FaultAt: 4 * time.Second, Stall: 500 * time.Millisecond,
		Duration: 16 * time.Second,
	}
}

// Validate reports the first unusable field by name.
func (c FailoverConfig) Validate() error {
	switch {
	case c.Cluster == nil || len(c.Cluster.Addrs) == 0:
		return errors.New("failover: Cluster must name the cluster's nodes")
	case c.AckReplicas < 0:
		return errors.New("failover: AckReplicas must not be negative")
	case c.QueueShards < 0 || c.QueueShards > 16:
		return errors.New("failover: QueueShards must be between 0 and 16")
	case c.Capacity < 1:
		return errors.New("failover: Capacity must be at least 1")
	case c.Users < 1:
		return errors.New("failover: Users must be at least 1")
	case c.JoinRate <= 0:
		return errors.New("failover: JoinRate must be positive")
	case c.Hold <= 0 || c.Poll <= 0:
		return errors.New("failover: Hold and Poll must be positive")
	case c.FaultAt < 0 || c.Stall < 0 || c.FaultAt+c.Stall >= c.Duration:
		return errors.New("failover: FaultAt + Stall must fall within Duration")
	case c.ReadyTimeout < 0:
		return errors.New("failover: ReadyTimeout must not be negative")
	}
	return nil
}

// FailoverResult is what one run measured.
type FailoverResult struct {
	// Master and Replica are the addresses of the room's master, which
	// was killed, and of the replica that took over.
	Master, Replica string
	// Joined counts joins answered; Admitted counts buyers handed an
	// admission (at most once each); Finished counts buyers whose
	// admission the checkout released.
	Joined, Admitted, Finished int
	// OverCapSamples counts samples of the room's active set, read on
	// Redis every 10 ms, above the capacity (of RoomSamples);
	// OverCapCheckout counts samples of the buyers the checkout held at
	// once, every millisecond, above the capacity (of CheckoutSamples).
	OverCapSamples, RoomSamples, OverCapCheckout, CheckoutSamples int
	// MaxCheckout is the most buyers the checkout held at once.
	MaxCheckout int
	// LostUsers counts buyers whose answered join, or whose admission
	// token, the room no longer had after the failover: a poll or the
	// final count found no ticket, or the checkout's release found the
	// admission gone.
	LostUsers int
	// RequeuedUsers counts users the old master admitted whom the new
	// master had waiting again at their place (their admission was lost
	// before anyone was told of it) and admitted later.
	RequeuedUsers int
	// Refused counts joins and reads answered unavailable because the
	// replica did not confirm in time (AckReplicas), or the room's master
	// was down.
	Refused int
	// Waiting counts buyers with an answered join still waiting when the
	// run ended; Unanswered counts users whose join was never answered
	// (each was retried until the run ended).
	Waiting, Unanswered int
	// JoinP50, JoinP99, AdmitReadP50 and AdmitReadP99 are the latencies
	// of the answered joins and of the reads that handed out an admission
	// (outside the fault).
	JoinP50, JoinP99, AdmitReadP50, AdmitReadP99 time.Duration
	// Inversions counts admissions out of join order by more than the
	// shards' clock tolerance (sharded rooms; see redisstore.ShardStats).
	Inversions int64
	// Takeover is the time from the kill to the cluster naming the
	// replica the master of the room's slot; Rejoined the time from the
	// kill until the killed node, started again, answered as a replica.
	Takeover, Rejoined time.Duration
}

// RunFailover runs one failover experiment.
func RunFailover(ctx context.Context, cfg FailoverConfig) (FailoverResult, error) {
	var res FailoverResult
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	opts := *cfg.Cluster
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	if _, err := waitReady(ctx, &opts, cfg.readyTimeout(), progress); err != nil {
		return res, err
	}
	scfg := redisstore.DefaultConfig()
	scfg.AckReplicas = cfg.AckReplicas
	scfg.ApplyClusterTimeouts(&opts)
	client := redis.NewClusterClient(&opts)
	defer client.Close()
	store, err := redisstore.NewWithConfig(client, scfg)
	if err != nil {
		return res, err
	}
	defer store.Close()

	room := fmt.Sprintf("failover-%d", time.Now().UnixNano())
	rc := waitroom.DefaultRoomConfig()
	rc.Capacity = cfg.Capacity
	rc.Lease = time.Minute
	rc.QueueShards = cfg.QueueShards
	rc.AbandonAfter, rc.Arrival = 0, 0 // the lab's users do not poll
	if err := store.Configure(ctx, room, rc); err != nil {
		return res, fmt.Errorf("failover: configure the room: %w", err)
	}
	defer func() { _ = store.DeleteRoom(context.Background(), room) }()
	master, replica, err := slotNodes(ctx, client, redisstore.KeysFor(room).Config)
	if err != nil {
		return res, err
	}
	res.Master, res.Replica = master, replica
	masterPID, err := localNode(ctx, &opts, master)
	if err != nil {
		return res, err
	}
	replicaPID, err := localNode(ctx, &opts, replica)
	if err != nil {
		return res, err
	}
	var restart nodeStart
	if cfg.Restart == "" {
		// How the master runs, noted before it is killed.
		if restart, err = readNodeStart(ctx, &opts, master, masterPID); err != nil {
			return res, err
		}
	}

	var (
		mu        sync.Mutex
		holding   = map[string]bool{}
		admitted  = map[string]int{} // admit passes that listed each user
		tokens    = map[string]bool{}
		joinLat   []time.Duration
		readLat   []time.Duration
		faultFrom atomic.Int64 // unix nanos; latencies inside the fault are left out
		faultTo   atomic.Int64
		refused   atomic.Int64
		lost      atomic.Int64
		finished  atomic.Int64
		answered  = map[string]bool{}
	)
	inFault := func(t time.Time) bool {
		from, to := faultFrom.Load(), faultTo.Load()
		return from != 0 && t.UnixNano() >= from && (to == 0 || t.UnixNano() <= to)
	}
	start := time.Now()
	runCtx, cancel := context.WithDeadline(ctx, start.Add(cfg.Duration))
	defer cancel()
	var wg sync.WaitGroup

	// The admitter.
	wg.Go(func() {
		for tick := time.NewTicker(cfg.Poll); ; {
			select {
			case <-runCtx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			r, err := store.Admit(runCtx, room)
			if err != nil {
				continue
			}
			mu.Lock()
			for _, u := range r.Admitted {
				admitted[u]++
			}
			mu.Unlock()
		}
	})

	// The observers: the checkout every millisecond, the room on Redis
	// every 10 ms.
	wg.Go(func() {
		for tick := time.NewTicker(time.Millisecond); ; {
			select {
			case <-runCtx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			mu.Lock()
			n := len(holding)
			mu.Unlock()
			res.CheckoutSamples++
			res.MaxCheckout = max(res.MaxCheckout, n)
			if n > cfg.Capacity {
				res.OverCapCheckout++
			}
		}
	})
	wg.Go(func() {
		for tick := time.NewTicker(10 * time.Millisecond); ; {
			select {
			case <-runCtx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			if st, err := store.Stats(runCtx, room); err == nil {
				res.RoomSamples++
				if st.Active > int64(cfg.Capacity) {
					res.OverCapSamples++
				}
			}
		}
	})

	// buyer joins (retrying until the join is answered), polls until
	// admitted, holds, releases.
	buyer := func(user string) {
		sleep := func(d time.Duration) bool {
			select {
			case <-runCtx.Done():
				return false
			case <-time.After(d):
				return true
			}
		}
		var t waitroom.Ticket
		for {
			began := time.Now()
			var err error
			t, err = store.Join(runCtx, room, user)
			if err == nil {
				if !inFault(began) && !inFault(time.Now()) {
					mu.Lock()
					joinLat = append(joinLat, time.Since(began))
					mu.Unlock()
				}
				mu.Lock()
				answered[user] = true
				mu.Unlock()
				break
			}
			refused.Add(1)
			if !sleep(cfg.Poll) {
				return
			}
		}
		for t.State != waitroom.StateAdmitted {
			if !sleep(cfg.Poll) {
				return
			}
			began := time.Now()
			nt, err := store.Ticket(runCtx, room, user)
			switch {
			case errors.Is(err, waitroom.ErrNoTicket):
				return // an answered join the room forgot: the final count finds it
			case err != nil:
				refused.Add(1)
				continue
			}
			t = nt
			if t.State == waitroom.StateAdmitted && !inFault(began) && !inFault(time.Now()) {
				mu.Lock()
				readLat = append(readLat, time.Since(began))
				mu.Unlock()
			}
		}
		mu.Lock()
		tokens[user] = true
		holding[user] = true
		mu.Unlock()
		hold := cfg.Hold/2 + time.Duration(rand.Int64N(int64(cfg.Hold)+1))
		sleep(hold)
		// The checkout is done: release, until Redis answers (also after
		// the run's end, so that it counts what the room still has).
		defer func() {
			mu.Lock()
			delete(holding, user)
			mu.Unlock()
		}()
		for i := 0; i < 200; i++ {
			now, released, err := store.ReleaseAdmission(context.Background(), room, user, t.Seq)
			if err == nil {
				switch {
				case released, now.State == waitroom.StateReleased && now.Seq == t.Seq:
					// Released now, or by an earlier try whose answer was lost.
					finished.Add(1)
				default:
					// A token whose admission the room no longer has.
					lost.Add(1)
				}
				return
			}
			time.Sleep(cfg.Poll)
		}
	}

	// The joiners, at JoinRate.
	wg.Go(func() {
		gap := time.Duration(float64(time.Second) / cfg.JoinRate)
		for i := 0; i < cfg.Users; i++ {
			if runCtx.Err() != nil {
				return
			}
			user := fmt.Sprintf("u%05d", i)
			wg.Go(func() { buyer(user) })
			select {
			case <-runCtx.Done():
				return
			case <-time.After(gap):
			}
		}
	})

	// The fault.
	faultErr := make(chan error, 1)
	go func() {
		select {
		case <-runCtx.Done():
			faultErr <- nil
			return
		case <-time.After(cfg.FaultAt):
		}
		faultFrom.Store(time.Now().UnixNano())
		if err := syscall.Kill(replicaPID, syscall.SIGSTOP); err != nil {
			faultErr <- fmt.Errorf("failover: stop the replica %s: %w", replica, err)
			return
		}
		// Cut the replication link from the master's side: what the master
		// writes from now on is never sent (a stopped replica's socket
		// would still take it into its kernel buffer and apply it when
		// continued).
		if err := dropReplicas(runCtx, &opts, master); err != nil {
			_ = syscall.Kill(replicaPID, syscall.SIGCONT)
			faultErr <- err
			return
		}
		time.Sleep(cfg.Stall)
		killed := time.Now()
		_ = syscall.Kill(masterPID, syscall.SIGKILL)
		_ = syscall.Kill(replicaPID, syscall.SIGCONT)
		// Wait for the cluster to name the replica the slot's master, then
		// start the killed node again, as its supervisor would: it rejoins
		// as the new master's replica (with AckReplicas, the room admits
		// nobody until it has one).
		for runCtx.Err() == nil {
			if m, err := slotMaster(runCtx, client, redisstore.KeysFor(room).Config); err == nil && m == replica {
				res.Takeover = time.Since(killed)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		faultTo.Store(time.Now().UnixNano())
		var err error
		if cfg.Restart != "" {
			err = restartByCommand(context.Background(), &opts, cfg.Restart, master, 30*time.Second)
		} else {
			err = restart.start(context.Background(), &opts, master, 30*time.Second)
		}
		if err != nil {
			faultErr <- err
			return
		}
		res.Rejoined = time.Since(killed)
		faultErr <- nil
	}()

	wg.Wait()
	if err := <-faultErr; err != nil {
		return res, err
	}
	if res.Takeover == 0 {
		return res, fmt.Errorf("failover: the replica %s did not take over the room within the run", replica)
	}
	res.Joined = len(answered)
	res.Unanswered = cfg.Users - res.Joined
	res.Finished = int(finished.Load())
	res.Refused = int(refused.Load())
	res.LostUsers = int(lost.Load())
	res.Admitted = len(tokens)
	for _, n := range admitted {
		if n > 1 {
			res.RequeuedUsers++
		}
	}
	// The final count, on the room as the new master has it: every
	// answered join that was not admitted must still be waiting.
	plain := redisstore.New(client)
	for user := range answered {
		if tokens[user] {
			continue
		}
		t, err := plain.Ticket(context.Background(), room, user)
		switch {
		case errors.Is(err, waitroom.ErrNoTicket):
			res.LostUsers++
		case err != nil:
			return res, fmt.Errorf("failover: the final count: %w", err)
		case t.State == waitroom.StateWaiting || t.State == waitroom.StateAdmitted:
			res.Waiting++
		default:
			res.LostUsers++
		}
	}
	if ss, err := plain.ShardStats(context.Background(), room); err == nil {
		res.Inversions = ss.Inversions
	}
	res.JoinP50, res.JoinP99 = quantile(joinLat, 0.5), quantile(joinLat, 0.99)
	res.AdmitReadP50, res.AdmitReadP99 = quantile(readLat, 0.5), quantile(readLat, 0.99)
	return res, nil
}

// quantile returns the q-quantile of ds (0 when empty).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// slotNodes returns the master of key's slot and its first replica.
func slotNodes(ctx context.Context, client *redis.ClusterClient, key string) (master, replica string, err error) {
	nodes, err := slotAddrs(ctx, client, key)
	if err != nil {
		return "", "", err
	}
	if len(nodes) < 2 {
		return nodes[0], "", fmt.Errorf("failover: the slot of %s on %s has no replica: the experiment needs a Redis Cluster whose every master has a replica", key, nodes[0])
	}
	return nodes[0], nodes[1], nil
}

// slotMaster returns the master of key's slot as the cluster says now.
func slotMaster(ctx context.Context, client *redis.ClusterClient, key string) (string, error) {
	nodes, err := slotAddrs(ctx, client, key)
	if err != nil {
		return "", err
	}
	return nodes[0], nil
}

// slotAddrs returns the addresses of the nodes serving key's slot, master
// first, from CLUSTER SLOTS.
func slotAddrs(ctx context.Context, client *redis.ClusterClient, key string) ([]string, error) {
	slot, err := client.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 CLUSTER SLOTS answers on Redis 6 as on 7; CLUSTER SHARDS (its successor) needs 7.
	slots, err := client.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			addrs := make([]string, len(s.Nodes))
			for i, n := range s.Nodes {
				addrs[i] = n.Addr
			}
			return addrs, nil
		}
	}
	return nil, fmt.Errorf("failover: no node serves slot %d", slot)
}

// dropReplicas closes the master's connections to its replicas.
func dropReplicas(ctx context.Context, opts *redis.ClusterOptions, master string) error {
	c := nodeClient(opts, master)
	defer c.Close()
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		return fmt.Errorf("failover: CLIENT KILL TYPE replica on %s: %w", master, err)
	}
	return nil
}

// nodePID returns the process id the Redis node at addr reports.
func nodePID(ctx context.Context, opts *redis.ClusterOptions, addr string) (int, error) {
	c := nodeClient(opts, addr)
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, fmt.Errorf("failover: INFO on %s: %w", addr, err)
	}
	var pid int
	if _, err := fmt.Sscan(infoField(info, "process_id"), &pid); err != nil || pid <= 0 {
		return 0, fmt.Errorf("failover: INFO on %s reports no process_id", addr)
	}
	return pid, nil
}
