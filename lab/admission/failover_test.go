package admission

import (
	"context"
	"testing"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// TestFailoverKeepsTheCapWithAckReplicas kills the master of a room's slot
// four times (the last with queue_shards 3), each after stalling its replica so that the replica that
// takes over has certainly missed writes. With AckReplicas the checkout
// never holds more buyers than the capacity, no answered join or handed-out
// admission is lost, and admissions that were never confirmed come back
// as waiting users admitted later.
func TestFailoverKeepsTheCapWithAckReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: four failovers take about 70 s")
	}
	opts, err := redisstore.ParseClusterURL(testenv.RedisHA(t))
	if err != nil {
		t.Fatal(err)
	}
	// Three runs on a one-queue room, a fourth on a room whose queue is
	// spread over 3 shards (the admission pass confirms its admissions
	// before the shards let go of the users).
	for run := 1; run <= 4; run++ {
		cfg := DefaultFailoverConfig()
		cfg.Cluster = opts
		if run == 4 {
			cfg.QueueShards = 3
		}
		res, err := RunFailover(context.Background(), cfg)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		t.Logf("run %d: %+v", run, res)
		if res.OverCapCheckout != 0 || res.MaxCheckout > cfg.Capacity {
			t.Errorf("run %d: the checkout held up to %d buyers (capacity %d) in %d of %d samples",
				run, res.MaxCheckout, cfg.Capacity, res.OverCapCheckout, res.CheckoutSamples)
		}
		if res.OverCapSamples != 0 {
			t.Errorf("run %d: the room's active set was over capacity in %d samples", run, res.OverCapSamples)
		}
		if res.LostUsers != 0 {
			t.Errorf("run %d: %d users lost an answered join or a handed-out admission", run, res.LostUsers)
		}
		if res.Joined == 0 || res.Admitted == 0 {
			t.Errorf("run %d: %d joins answered, %d admitted: the run did nothing", run, res.Joined, res.Admitted)
		}
		if res.Admitted+res.Waiting+res.LostUsers != res.Joined {
			t.Errorf("run %d: %d admitted + %d waiting + %d lost != %d joined: users unaccounted for",
				run, res.Admitted, res.Waiting, res.LostUsers, res.Joined)
		}
		if res.Refused == 0 {
			t.Errorf("run %d: no request was refused during the stall: the fault did not hit the run", run)
		}
	}
}

// TestFailoverWithoutAckOverfillsTheCheckout is the same fault without
// AckReplicas: admissions handed out during the stall are gone from the
// promoted replica, which fills their slots again, and the checkout holds
// more buyers than the capacity. It shows the checks above can fail.
func TestFailoverWithoutAckOverfillsTheCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a failover takes about 17 s")
	}
	opts, err := redisstore.ParseClusterURL(testenv.RedisHA(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultFailoverConfig()
	cfg.AckReplicas = 0
	cfg.Cluster = opts
	res, err := RunFailover(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.OverCapCheckout == 0 || res.MaxCheckout <= cfg.Capacity {
		t.Errorf("without AckReplicas the checkout never held more than %d buyers (capacity %d): the fault lost no handed-out admission", res.MaxCheckout, cfg.Capacity)
	}
}
