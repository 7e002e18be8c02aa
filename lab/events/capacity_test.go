package events

import (
	"context"
	"database/sql"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
)

func validCapacityConfig() CapacityConfig {
	c := DefaultCapacityConfig()
	c.WorkerCmd = func([]string) *exec.Cmd { return nil }
	return c
}

func TestCapacityConfigValidateNamesTheField(t *testing.T) {
	if err := validCapacityConfig().Validate(); err != nil {
		t.Fatalf("the default config (with a WorkerCmd) is invalid: %v", err)
	}
	for field, mutate := range map[string]func(*CapacityConfig){
		"backlog":     func(c *CapacityConfig) { c.Backlog = 0 },
		"keys":        func(c *CapacityConfig) { c.Keys, c.HotShare = 1, 0.1 },
		"hot_share":   func(c *CapacityConfig) { c.HotShare = 1 },
		"workers":     func(c *CapacityConfig) { c.Workers = []int{9} }, // more than the 8 partitions
		"ledgers":     func(c *CapacityConfig) { c.Ledgers = []string{"mine"} },
		"max_pending": func(c *CapacityConfig) { c.MaxPending = 0 },
		"cost":        func(c *CapacityConfig) { c.Cost = 0 },
		"ack_wait":    func(c *CapacityConfig) { c.AckWait = 0 },
		"worker_cmd":  func(c *CapacityConfig) { c.WorkerCmd = nil },
	} {
		c := validCapacityConfig()
		mutate(&c)
		if err := c.Validate(); !slices.Equal(badFields(err), []string{field}) {
			t.Errorf("%s: Validate() = %v, want an error naming it", field, err)
		}
	}
}

func TestCapacityConfigValidateNamesEveryBadField(t *testing.T) {
	c := validCapacityConfig()
	c.Backlog, c.Ledgers = 0, []string{"mine"}
	if got, want := badFields(c.Validate()), []string{"backlog", "ledgers"}; !slices.Equal(got, want) {
		t.Errorf("bad fields = %v, want %v", got, want)
	}
}

// TestCapacityBacklog checks the backlog's shape: its size, exactly the
// hot share on key-000, every other key in range, and the same backlog
// for the same seed.
func TestCapacityBacklog(t *testing.T) {
	c := validCapacityConfig()
	c.Backlog, c.Keys, c.HotShare = 1000, 50, 0.1
	e, err := NewCapacity(c)
	if err != nil {
		t.Fatal(err)
	}
	plan := e.backlog(7)
	if len(plan) != 1000 {
		t.Fatalf("%d events, want 1000", len(plan))
	}
	hot := 0
	for _, a := range plan {
		if a.key == 0 {
			hot++
		}
		if a.key < 0 || a.key >= c.Keys {
			t.Fatalf("key %d outside 0..%d", a.key, c.Keys-1)
		}
	}
	if hot != 100 {
		t.Errorf("%d events on key-000, want 100 (hot share 0.1)", hot)
	}
	if again := e.backlog(7); !equalArrivals(plan, again) {
		t.Error("the same seed drew another backlog")
	}
	// Without a hot key, key-000 is one key among the others.
	c.HotShare = 0
	e, _ = NewCapacity(c)
	hot = 0
	for _, a := range e.backlog(7) {
		if a.key == 0 {
			hot++
		}
	}
	if hot == 0 || hot > 60 {
		t.Errorf("hot share 0: %d of 1000 events on key-000 of 50 keys, want about 20", hot)
	}
}

func equalArrivals(a, b []arrival) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMergeLedgers merges two per-worker ledgers: every effect and attempt
// is kept, and an event applied in both shows as a duplicate effect.
func TestMergeLedgers(t *testing.T) {
	dir := t.TempDir()
	var parts []string
	for i, ids := range [][]string{{"key-001-0", "key-002-0"}, {"key-003-0", "key-001-0"}} {
		p := filepath.Join(dir, "part"+string(rune('a'+i))+".db")
		if err := createLedger(p); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", "file:"+p)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			key, seq := id[:7], id[8:]
			for _, q := range []string{`INSERT INTO inbox (id) VALUES (?)`, `INSERT INTO attempts (id, worker, delivery) VALUES (?, 'w', 1)`} {
				if _, err := db.Exec(q, id); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.Exec(`INSERT INTO effects VALUES (?, ?, ?, 'w', 1, 2, 0)`, id, key, seq); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		parts = append(parts, p)
	}
	db, err := mergeLedgers(context.Background(), filepath.Join(dir, "merged.db"), parts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var effects, attempts, inbox int
	if err := db.QueryRow(`SELECT (SELECT COUNT(*) FROM effects), (SELECT COUNT(*) FROM attempts), (SELECT COUNT(*) FROM inbox)`).Scan(&effects, &attempts, &inbox); err != nil {
		t.Fatal(err)
	}
	if effects != 4 || attempts != 4 || inbox != 3 {
		t.Errorf("merged: %d effects, %d attempts, %d inbox rows; want 4, 4, 3", effects, attempts, inbox)
	}
	res, err := (&Capacity{}).account(context.Background(), db, make([]arrival, 3),
		map[string]uint64{"key-001": 1, "key-002": 1, "key-003": 1}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics["duplicate_effects"] != 1 || res.Metrics["lost"] != 0 {
		t.Errorf("account: duplicate_effects %v, lost %v; want 1, 0", res.Metrics["duplicate_effects"], res.Metrics["lost"])
	}
}

func TestMachineCPUBusyCores(t *testing.T) {
	before := machineCPU{busy: 100, total: 400, ok: true}
	after := machineCPU{busy: 250, total: 600, ok: true} // 150 of 200 ticks busy
	got, ok := after.busyCores(before)
	if want := 0.75 * float64(runtime.NumCPU()); !ok || got != want {
		t.Errorf("busyCores = %v, %v; want %v, true", got, ok, want)
	}
	if _, ok := after.busyCores(machineCPU{}); ok {
		t.Error("busyCores against a missing reading: ok")
	}
	if m := readMachineCPU(); m.ok && m.busy > m.total {
		t.Errorf("/proc/stat: busy %d above total %d", m.busy, m.total)
	}
}
