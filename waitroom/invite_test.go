package waitroom_test

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/waitroom"
)

// FuzzInviteDecoder: whatever the token, VerifyInvite never panics and
// answers either a valid invite (signed by the key, for the room, not
// expired) or a 4xx error naming the field invite.
func FuzzInviteDecoder(f *testing.F) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := waitroom.EncodeInviteKey(key.Public().(ed25519.PublicKey))
	now := time.Unix(1_800_000_000, 0)
	good := waitroom.SignInvite(key, "r", "guest-1", now.Add(time.Hour))
	for _, s := range []string{good, "", ".", "..", "a.1.", "a.01." + good[len(good)-86:], "a.+1.x", good + "=", strings.Repeat("a", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		inv, err := waitroom.VerifyInvite(pub, "r", token, now)
		if err != nil {
			e := stampede.As(err)
			if e == nil || e.Field != "invite" || stampede.ClassOf(err) == stampede.Internal {
				t.Fatalf("VerifyInvite(%q) = %v: want a client error naming invite", token, err)
			}
			return
		}
		if token != waitroom.SignInvite(key, "r", inv.ID, inv.Expires) || !now.Before(inv.Expires) {
			t.Fatalf("VerifyInvite(%q) accepted %+v: not the token the key signs", token, inv)
		}
	})
}

// TestSaleAt: what a schedule says before, in, between and after its
// windows; an open-ended window runs until the next one's start.
func TestSaleAt(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	c := waitroom.DefaultRoomConfig()
	c.Schedule = []waitroom.Window{
		{Start: t0, Capacity: 10, InviteOnly: true, AdmitInterval: time.Second},
		{Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour), Capacity: 50},
		{Start: t0.Add(3 * time.Hour), End: t0.Add(4 * time.Hour), Capacity: 20},
	}
	for _, tc := range []struct {
		at     time.Duration
		phase  waitroom.Phase
		window int
		cap    int
		invite bool
	}{
		{-time.Minute, waitroom.PhaseBefore, 0, 10, true},
		{0, waitroom.PhaseOpen, 0, 10, true},
		{59 * time.Minute, waitroom.PhaseOpen, 0, 10, true},
		{time.Hour, waitroom.PhaseOpen, 1, 50, false},
		{150 * time.Minute, waitroom.PhaseBetween, 2, 20, false},
		{4 * time.Hour, waitroom.PhaseClosed, -1, 100, false},
	} {
		s := c.SaleAt(t0.Add(tc.at))
		if s.Phase != tc.phase || s.Window != tc.window || s.Capacity != tc.cap || s.InviteRequired != tc.invite {
			t.Errorf("at %v: %+v, want %s window %d capacity %d invite %t", tc.at, s, tc.phase, tc.window, tc.cap, tc.invite)
		}
	}
	if iv := c.SaleAt(t0).AdmitInterval; iv != time.Second {
		t.Errorf("first window's tick = %v, want 1s", iv)
	}
	c.ClosesAt = t0.Add(30 * time.Minute)
	if s := c.SaleAt(t0.Add(40 * time.Minute)); s.Phase != waitroom.PhaseClosed {
		t.Errorf("past closes_at: %+v, want closed", s)
	}
}
