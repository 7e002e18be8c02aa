package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/waitroom"
)

// TestClient: join, ticket, check and done through waitroom.Client, and
// error answers read as *stampede.Error.
func TestClient(t *testing.T) {
	e := newEnvWith(t, miniBackend(t), true, func(o *waitroom.ServerOptions) {
		o.AllowUnsignedUsers = false
		o.SiteSecret, o.CheckoutKey = siteSecret, checkoutKey
	})
	room := e.newRoom(t, `{"capacity":1,"admit_interval_ms":60000}`)
	ctx := context.Background()
	c, err := waitroom.NewClient(waitroom.ClientConfig{BaseURL: e.url, CheckoutKey: checkoutKey, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	tk, err := c.Join(ctx, room, waitroom.JoinRequest{UserID: "zoe", UserSig: waitroom.SignUser(siteSecret, room, "zoe", exp), UserExpires: exp})
	if err != nil || tk.UserID != "zoe" || tk.TicketToken == "" || tk.State != waitroom.StateWaiting {
		t.Fatalf("Join = %+v, %v", tk, err)
	}
	_, err = c.Join(ctx, room, waitroom.JoinRequest{UserID: "zoe", UserSig: waitroom.SignUser(siteSecret, room, "zoe", exp), UserExpires: exp})
	if e, ok := errors.AsType[*stampede.Error](err); !ok || e.Status != 409 || e.Code != stampede.Conflict {
		t.Fatalf("a second signed join = %v, want a 409 conflict *stampede.Error", err)
	}
	admitPass(t, e, room)
	tk, err = c.Ticket(ctx, room, "zoe", tk.TicketToken)
	if err != nil || tk.State != waitroom.StateAdmitted || tk.AdmissionToken == "" || tk.LeaseExpiresAt.IsZero() {
		t.Fatalf("Ticket = %+v, %v", tk, err)
	}
	if a, err := c.Check(ctx, room, tk.AdmissionToken); err != nil || !a.Held || a.UserID != "zoe" || a.ExpiresAt.IsZero() {
		t.Fatalf("Check = %+v, %v", a, err)
	}
	if a, err := c.Done(ctx, room, tk.AdmissionToken); err != nil || !a.Released || a.Held {
		t.Fatalf("Done = %+v, %v", a, err)
	}
	wrong, _ := waitroom.NewClient(waitroom.ClientConfig{BaseURL: e.url, CheckoutKey: "not-the-checkout-key", Timeout: time.Second})
	_, err = wrong.Check(ctx, room, tk.AdmissionToken)
	if e, ok := errors.AsType[*stampede.Error](err); !ok || e.Status != 401 || e.Code != stampede.Unauthorized {
		t.Fatalf("Check with a wrong key = %v, want a 401 *stampede.Error", err)
	}
	for _, cfg := range []waitroom.ClientConfig{
		{BaseURL: "", Timeout: time.Second},
		{BaseURL: "ftp://x", Timeout: time.Second},
		{BaseURL: e.url},
		{BaseURL: e.url, Timeout: time.Second, CheckoutKey: "short"},
	} {
		if _, err := waitroom.NewClient(cfg); err == nil {
			t.Errorf("NewClient(%+v) accepted", cfg)
		}
	}
}
