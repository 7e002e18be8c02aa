package gate

import (
	"fmt"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/protocol"
)

// TestFinishedAdmissionsAreForgotten: a steady flow of buyers (one
// admission a second for 1,000 s, each through its own token and bucket)
// leaves the gate, an hour later, remembering only what is still of use:
// the admissions within their session, the tokens before their expiry,
// the buckets not yet full again. Before, every entry stayed until the
// maps held 100,000, and a gate's memory grew for hours under a rolling
// sale (the soak lab).
func TestFinishedAdmissionsAreForgotten(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	g := newGate(Config{MaxSession: 30 * time.Minute, VisitorRate: 20, VisitorBurst: 100, CheckConcurrency: 1}, nil)
	admit := func(i int, now time.Time) {
		k := admissionKey{user: fmt.Sprint("user-", i), seq: 1}
		c := protocol.AdmissionClaims{User: k.user, Seq: 1, AdmittedAt: now, Expires: now.Add(time.Minute)}
		g.mu.Lock()
		g.entry(k, c, now)
		g.mu.Unlock()
		g.tokens.add(fmt.Sprint("token-", i), verified{claims: c, keep: c.Expires}, now)
		g.limits.allow(k, now)
	}
	for i := range 1000 {
		admit(i, start.Add(time.Duration(i)*time.Second))
	}
	// Within 30 minutes every admission is still of use: none is dropped.
	if n := len(g.cache); n != 1000 {
		t.Fatalf("%d admissions remembered after 1,000 s, want all 1,000 (their sessions last 30 min)", n)
	}
	// Tokens expire after a minute, buckets are full again after 5 s: at
	// most a sweep's worth of them is left.
	if n := len(g.tokens.m); n > 2*60+1 {
		t.Errorf("%d verified tokens remembered, want at most the last two minutes' (%d)", n, 2*60+1)
	}
	if n := len(g.limits.buckets); n > 60+5+1 {
		t.Errorf("%d buckets kept, want at most the last minute's (%d)", n, 60+5+1)
	}
	// An hour later, one more buyer: every earlier admission has ended.
	admit(1000, start.Add(time.Hour+1000*time.Second))
	if a, tk, b := len(g.cache), len(g.tokens.m), len(g.limits.buckets); a != 1 || tk != 1 || b != 1 {
		t.Errorf("an hour later: %d admissions, %d tokens, %d buckets remembered; want 1 of each (the new buyer's)", a, tk, b)
	}
}
