package storetest

import (
	"context"
	"crypto/sha1" //nolint:gosec // the log's chain is SHA-1 by its format
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// testFairness: a store that keeps the admission log commits to the
// pre-queue's seed before opening, reveals it after, draws the
// pre-queue by it, and logs every admission so that VerifyLog passes on
// the log and fails on a changed log or a wrong seed.
func testFairness(t *testing.T, h Harness) {
	s := h.Store(t)
	fs, ok := s.(waitroom.FairnessStore)
	if !ok {
		t.Skip("the store keeps no admission log (not a waitroom.FairnessStore)")
	}
	if h.sharded() {
		t.Skip("a sharded room keeps no admission log (documented in docs/waitroom.md)")
	}
	ctx := context.Background()
	const n, capacity = 40, 15
	probe := newRoom(t, h, s, 1, time.Minute)
	storeNow := admit(t, s, probe).At
	room := newRoomWith(t, h, s, capacity, func(c *waitroom.RoomConfig) { c.OpensAt = storeNow.Add(time.Second) })
	early := make([]string, n)
	for i := range early {
		early[i] = fmt.Sprintf("early-%02d", i)
	}
	join(t, s, room, early...)
	before, err := fs.Fairness(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Commitment) != 64 || before.Seed != "" || !before.Verifiable {
		t.Fatalf("before opening: %+v, want a commitment and no seed", before)
	}
	// A room whose schedule sets its opening commits to a seed as well.
	scheduled := newRoomWith(t, h, s, capacity, func(c *waitroom.RoomConfig) {
		c.Schedule = []waitroom.Window{{Start: storeNow.Add(time.Hour), Capacity: capacity}}
	})
	if f, err := fs.Fairness(ctx, scheduled); err != nil || len(f.Commitment) != 64 || f.Seed != "" {
		t.Fatalf("a room with a schedule, before its first window: %+v, %v; want a commitment and no seed", f, err)
	}
	admit(t, s, room)
	h.Advance(t, 1100*time.Millisecond)
	res := admit(t, s, room)
	after, err := fs.Fairness(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if after.Seed == "" || waitroom.Commitment(after.Seed) != before.Commitment {
		t.Fatalf("after opening: seed %q, commitment %s (published %s): the seed must be revealed and match", after.Seed, waitroom.Commitment(after.Seed), before.Commitment)
	}
	// The draw: the pre-queue sorted by key.
	drawn := slices.Clone(early)
	slices.SortFunc(drawn, func(a, b string) int {
		return strings.Compare(waitroom.DrawKey(after.Seed, waitroom.UserHash(room, a)), waitroom.DrawKey(after.Seed, waitroom.UserHash(room, b)))
	})
	if !slices.Equal(res.Admitted, drawn[:capacity]) {
		t.Fatalf("admitted %v, want the first %d of the draw %v", res.Admitted, capacity, drawn)
	}
	// Releases, later joiners, more passes.
	for _, u := range res.Admitted[:5] {
		if _, err := s.Leave(ctx, room, u); err != nil {
			t.Fatal(err)
		}
	}
	join(t, s, room, "late-1", "late-2")
	admit(t, s, room)
	for _, u := range drawn[capacity : capacity+5] {
		if _, err := s.Leave(ctx, room, u); err != nil {
			t.Fatal(err)
		}
	}
	admit(t, s, room)
	lines, err := fs.AdmissionLog(ctx, room, 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// begin, open, then 15 + 5 + 5 admissions.
	if len(lines) != 2+capacity+10 {
		t.Fatalf("the log holds %d entries, want %d:\n%s", len(lines), 2+capacity+10, strings.Join(lines, "\n"))
	}
	if tail, _ := fs.AdmissionLog(ctx, room, int64(len(lines)), 10); len(tail) != 1 || tail[0] != lines[len(lines)-1] {
		t.Errorf("AdmissionLog from the last entry = %q", tail)
	}
	head, _ := fs.Fairness(ctx, room)
	opt := waitroom.VerifyOptions{Seed: after.Seed, Commitment: before.Commitment, User: drawn[0]}
	r := waitroom.VerifyLog(lines, opt)
	if !r.OK() || r.Admissions != capacity+10 || r.Passes != 3 || r.Drawn != capacity+10 ||
		r.MaxHeld != capacity || r.Head != head.LogHead || head.LogLength != int64(len(lines)) {
		t.Fatalf("VerifyLog = %+v (head %+v), want a pass over %d admissions in 3 passes", r, head, capacity+10)
	}
	if len(r.UserLines) != 1 || !strings.Contains(r.UserLines[0], "drawn in the pre-queue") {
		t.Errorf("the first drawn user's own lines = %q", r.UserLines)
	}
	// A wrong seed, a changed entry, a rewritten chain.
	wrong := strings.Repeat("ab", 32)
	if r := waitroom.VerifyLog(lines, waitroom.VerifyOptions{Seed: wrong}); r.OK() {
		t.Error("VerifyLog passed with a wrong seed")
	}
	changed := slices.Clone(lines)
	changed[4] = strings.Replace(changed[4], " admit ", " admit  ", 1) // same fields, other bytes: still parses
	f := strings.Fields(lines[5])
	f[5] = "999999" // a place
	changed[5] = strings.Join(f, " ")
	if r := waitroom.VerifyLog(changed, opt); r.OK() {
		t.Error("VerifyLog passed with a changed entry")
	}
	// Someone who rewrites the whole chain to swap two admissions of
	// different passes (a later place first) is caught by the order.
	swapped := slices.Clone(lines)
	last := len(swapped) - 1
	a, b := strings.Fields(swapped[2]), strings.Fields(swapped[last])
	a[4], b[4] = b[4], a[4]
	a[5], b[5] = b[5], a[5]
	swapped[2], swapped[last] = strings.Join(a, " "), strings.Join(b, " ")
	if r := waitroom.VerifyLog(Rechain(swapped), opt); r.OK() {
		t.Error("VerifyLog passed a rechained log with two admissions swapped")
	}
	if r := waitroom.VerifyLog(Rechain(slices.Clone(lines)), opt); !r.OK() {
		t.Errorf("Rechain broke a good log: %v", r.Problems)
	}
}

// Rechain recomputes every PREV and HASH of an admission log's lines, as
// someone rewriting a whole log would: only the checks of its content
// can catch what was changed.
func Rechain(lines []string) []string {
	prev := waitroom.ZeroHash
	for i, l := range lines {
		f := strings.Fields(l)
		f[len(f)-2] = prev
		body := strings.Join(f[:len(f)-1], " ")
		sum := sha1.Sum([]byte(body)) //nolint:gosec // the log's format
		prev = hex.EncodeToString(sum[:])
		lines[i] = body + " " + prev
	}
	return lines
}
