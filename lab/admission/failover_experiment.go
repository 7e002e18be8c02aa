package admission

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/stampede-lab/stampede/lab"
)

// FailoverExperiment is the failover experiment as a lab.Experiment
// (`stampede lab admission --failover`): its conditions are AckReplicas
// values (1, the guarantee, and 0, what Redis gives without it), each
// repeated.
type FailoverExperiment struct {
	cfg     FailoverConfig
	acks    []int
	repeats int
}

// NewFailover returns the experiment for cfg (its AckReplicas is replaced
// by each of acks in turn) with repeats runs of each.
func NewFailover(cfg FailoverConfig, acks []int, repeats int) (*FailoverExperiment, error) {
	if len(acks) == 0 {
		return nil, fmt.Errorf("failover: give at least one AckReplicas value")
	}
	for _, a := range acks {
		c := cfg
		c.AckReplicas = a
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	if repeats < 1 {
		return nil, fmt.Errorf("failover: repeats must be at least 1, got %d", repeats)
	}
	return &FailoverExperiment{cfg: cfg, acks: acks, repeats: repeats}, nil
}

// Prepare implements lab.Preparer: it waits (at most the configuration's
// ReadyTimeout) for the cluster to serve every slot with a replica in sync,
// and checks that every node runs on this machine and can be started again
// once killed, so that a cluster that cannot give the experiment what it
// needs says so before the first run rather than failing every run. The
// runs write their own progress lines to progress too.
func (e *FailoverExperiment) Prepare(ctx context.Context, progress io.Writer) error {
	if e.cfg.Progress == nil {
		e.cfg.Progress = progress
	}
	return prepareFailover(ctx, e.cfg, progress)
}

// Name implements lab.Experiment.
func (e *FailoverExperiment) Name() string { return "admission-failover" }

// Params implements lab.Experiment.
func (e *FailoverExperiment) Params() any {
	return map[string]any{
		"capacity": e.cfg.Capacity, "users": e.cfg.Users, "join_rate": e.cfg.JoinRate,
		"hold_ms": e.cfg.Hold.Milliseconds(), "poll_ms": e.cfg.Poll.Milliseconds(),
		"fault_at_ms": e.cfg.FaultAt.Milliseconds(), "stall_ms": e.cfg.Stall.Milliseconds(),
		"duration_ms": e.cfg.Duration.Milliseconds(), "nodes": e.cfg.Cluster.Addrs,
		"ack_replicas": e.acks, "repeats": e.repeats, "queue_shards": e.cfg.QueueShards,
	}
}

// Conditions implements lab.Experiment.
func (e *FailoverExperiment) Conditions() []lab.Condition {
	var cs []lab.Condition
	for _, a := range e.acks {
		cs = append(cs, lab.Condition{
			Label:  fmt.Sprintf("ack_replicas=%d", a),
			Values: map[string]any{"ack_replicas": float64(a)},
			Keys:   []string{"ack_replicas"},
		})
	}
	return cs
}

// Repeats implements lab.Experiment.
func (e *FailoverExperiment) Repeats() int { return e.repeats }

// Columns implements lab.Experiment.
func (e *FailoverExperiment) Columns() []string {
	return []string{"over_cap_samples", "over_cap_checkout", "max_checkout", "lost_users", "requeued_users",
		"refused", "fifo_inversions_beyond_tolerance", "joins_per_s", "join_p50_ms", "join_p99_ms", "admit_read_p50_ms", "admit_read_p99_ms", "takeover_ms"}
}

// Run implements lab.Experiment.
func (e *FailoverExperiment) Run(ctx context.Context, c lab.Condition, _ int) (lab.RunResult, error) {
	cfg := e.cfg
	cfg.AckReplicas = int(c.Values["ack_replicas"].(float64))
	res, err := RunFailover(ctx, cfg)
	if err != nil {
		return lab.RunResult{}, err
	}
	ms := func(d interface{ Seconds() float64 }) float64 { return math.Round(d.Seconds()*1e4) / 10 }
	joinSpan := float64(cfg.Users) / cfg.JoinRate
	m := lab.Metrics{
		"over_cap_samples": float64(res.OverCapSamples), "over_cap_checkout": float64(res.OverCapCheckout),
		"max_checkout": float64(res.MaxCheckout), "lost_users": float64(res.LostUsers),
		"requeued_users": float64(res.RequeuedUsers), "refused": float64(res.Refused),
		"fifo_inversions_beyond_tolerance": float64(res.Inversions),
		"joined":                           float64(res.Joined), "admitted": float64(res.Admitted), "waiting": float64(res.Waiting),
		"unanswered": float64(res.Unanswered), "checkout_samples": float64(res.CheckoutSamples),
		"room_samples": float64(res.RoomSamples),
		"joins_per_s":  float64(res.Joined) / joinSpan,
		"join_p50_ms":  ms(res.JoinP50), "join_p99_ms": ms(res.JoinP99),
		"admit_read_p50_ms": ms(res.AdmitReadP50), "admit_read_p99_ms": ms(res.AdmitReadP99),
		"takeover_ms": ms(res.Takeover), "rejoined_ms": ms(res.Rejoined),
	}
	r := lab.RunResult{Metrics: m, Valid: res.Joined > 0 && res.Admitted > 0 && res.CheckoutSamples > 0}
	if !r.Valid {
		r.Reason = fmt.Sprintf("%d joins answered, %d admitted: the run did nothing", res.Joined, res.Admitted)
	}
	if cfg.AckReplicas > 0 {
		if res.OverCapCheckout > 0 {
			r.Broken = append(r.Broken, fmt.Sprintf("the checkout held %d buyers, capacity %d", res.MaxCheckout, cfg.Capacity))
		}
		if res.LostUsers > 0 {
			r.Broken = append(r.Broken, fmt.Sprintf("%d users lost", res.LostUsers))
		}
	}
	if res.OverCapSamples > 0 {
		r.Broken = append(r.Broken, fmt.Sprintf("the room over capacity in %d samples", res.OverCapSamples))
	}
	return r, nil
}

// Expectations implements lab.Experiment: with AckReplicas the checkout
// never holds more buyers than the capacity and no user is lost; the room
// itself never holds more whatever the setting.
func (e *FailoverExperiment) Expectations(r *lab.Result) *lab.Expectations {
	x := &lab.Expectations{}
	for _, a := range e.acks {
		match := map[string]any{"ack_replicas": float64(a)}
		over, ok1 := r.Median("over_cap_samples", match)
		x.Judge(fmt.Sprintf("ack_replicas=%d: the room's active set never over capacity", a), missing(ok1, "over_cap_samples"), func() (string, bool) {
			return fmt.Sprintf("%.0f samples over", over), over == 0
		})
		if a == 0 {
			if v, ok := r.Median("max_checkout", match); ok {
				x.Report("ack_replicas=0: most buyers the checkout held (capacity "+fmt.Sprint(e.cfg.Capacity)+")", fmt.Sprintf("%.0f", v))
			}
			continue
		}
		oc, ok2 := r.Median("over_cap_checkout", match)
		x.Judge(fmt.Sprintf("ack_replicas=%d: the checkout never holds more buyers than the capacity", a), missing(ok2, "over_cap_checkout"), func() (string, bool) {
			return fmt.Sprintf("%.0f samples over", oc), oc == 0
		})
		lost, ok3 := r.Median("lost_users", match)
		x.Judge(fmt.Sprintf("ack_replicas=%d: no user lost", a), missing(ok3, "lost_users"), func() (string, bool) {
			return fmt.Sprintf("%.0f lost", lost), lost == 0
		})
	}
	return x
}

// missing names metric when ok is false.
func missing(ok bool, metric string) []string {
	if ok {
		return nil
	}
	return []string{metric}
}

// Render implements lab.Experiment: no chart, the meaning of the numbers.
func (e *FailoverExperiment) Render(r *lab.Result, dir string) (string, error) {
	var b strings.Builder
	if e.cfg.QueueShards > 1 {
		fmt.Fprintf(&b, "The room's queue is spread over %d shards (`queue_shards`). ", e.cfg.QueueShards)
	}
	fmt.Fprintf(&b, "One room of capacity %d on a Redis Cluster whose masters have a replica each. %d buyers join at %.0f/s, "+
		"poll every %s, and hold an admission at the checkout for %s ± 50 %%. At %s the replica of the room's master is "+
		"stopped and the master closes its replication link; %s later the master is killed, the replica continued and "+
		"promoted, and the killed node started again as its replica.\n\n",
		e.cfg.Capacity, e.cfg.Users, e.cfg.JoinRate, e.cfg.Poll, e.cfg.Hold, e.cfg.FaultAt, e.cfg.Stall)
	b.WriteString("`over_cap_checkout` counts 1 ms samples in which the checkout held more buyers than the capacity; " +
		"`lost_users` counts answered joins and handed-out admissions the promoted replica did not have; " +
		"`requeued_users` counts users admitted by the old master whom the new one admitted again from their old place. " +
		"Latencies leave out the fault's window.\n")
	return b.String(), nil
}
