package gate_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/waitroom"
	wrclient "github.com/stampede-lab/stampede/waitroom/client"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

const rulesSecret = "rules-bypass-secret-0123456789abcdef"

// TestForwardAuthRules: one forward-auth server guards two rooms, one by
// path prefix and one by host; static assets, an admin network and a
// signed monitoring header go through without a room (and without an
// identity); an unmatched request gets what the rules say. A spoofed
// X-Forwarded-For entry before the proxy's own, an expired, mis-signed or
// too long-lived bypass header do not bypass.
func TestForwardAuthRules(t *testing.T) {
	store := redisstore.New(proxyMiniredis(t))
	concert, theatre := "rules-concert-"+randomName(), "rules-theatre-"+randomName()
	now := time.Now()
	for _, unmatched := range []string{gate.UnmatchedAllow, gate.UnmatchedDeny} {
		t.Run(unmatched, func(t *testing.T) {
			rules := &gate.Rules{
				Rooms:     []gate.RoomRule{{PathPrefix: "/concert/", Room: concert}, {Host: "theatre.example", Room: theatre}},
				Bypass:    gate.Bypass{PathPrefixes: []string{"/static/"}, CIDRs: []string{"10.1.0.0/16"}, Secret: rulesSecret},
				Unmatched: unmatched,
			}
			addr, _ := startForwardAuth(t, context.Background(), store, "rules-default-"+randomName(), rules)
			hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			wantUnmatched := 200
			if unmatched == gate.UnmatchedDeny {
				wantUnmatched = 403
			}
			for _, c := range []struct {
				name   string
				header map[string]string
				status int
				room   string
			}{
				{"concert by path", map[string]string{"X-Forwarded-Uri": "/concert/seats"}, 303, concert},
				{"theatre by host", map[string]string{"X-Forwarded-Uri": "/seats", "X-Forwarded-Host": "Theatre.example"}, 303, theatre},
				{"theatre by host with a port", map[string]string{"X-Forwarded-Uri": "/seats", "X-Forwarded-Host": "theatre.example:8443"}, 303, theatre},
				{"static asset", map[string]string{"X-Forwarded-Uri": "/static/app.css"}, 200, ""},
				{"unmatched", map[string]string{"X-Forwarded-Uri": "/about"}, wantUnmatched, ""},
				{"admin network", map[string]string{"X-Forwarded-Uri": "/concert/seats", "X-Forwarded-For": "203.0.113.9, 10.1.2.3"}, 200, ""},
				{"admin network spoofed before the proxy's entry", map[string]string{"X-Forwarded-Uri": "/concert/seats", "X-Forwarded-For": "10.1.2.3, 203.0.113.9"}, 303, concert},
				{"signed bypass", map[string]string{"X-Forwarded-Uri": "/concert/seats", gate.HeaderBypass: gate.SignBypass(rulesSecret, now.Add(time.Hour))}, 200, ""},
				{"expired bypass", map[string]string{"X-Forwarded-Uri": "/concert/seats", gate.HeaderBypass: gate.SignBypass(rulesSecret, now.Add(-time.Second))}, 303, concert},
				{"bypass signed with another secret", map[string]string{"X-Forwarded-Uri": "/concert/seats", gate.HeaderBypass: gate.SignBypass(rulesSecret+"x", now.Add(time.Hour))}, 303, concert},
				{"bypass for too long", map[string]string{"X-Forwarded-Uri": "/concert/seats", gate.HeaderBypass: gate.SignBypass(rulesSecret, now.Add(48*time.Hour))}, 303, concert},
			} {
				req, _ := http.NewRequest("GET", "http://"+addr+gate.AuthPath, nil)
				req.Header.Set("Stampede-User", "mallory")
				for k, v := range c.header {
					req.Header.Set(k, v)
				}
				res, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != c.status {
					t.Errorf("%s: %d, want %d", c.name, res.StatusCode, c.status)
				}
				if c.room != "" && res.Header.Get("Location") != "/rooms/"+c.room+"?join=anonymous" {
					t.Errorf("%s: Location %q, want room %s's waiting page", c.name, res.Header.Get("Location"), c.room)
				}
				if res.Header.Get("Stampede-User") != "" {
					t.Errorf("%s: answered Stampede-User %q", c.name, res.Header.Get("Stampede-User"))
				}
			}
		})
	}
}

// TestForwardAuthRulesAdmitPerRoom: a buyer admitted to a rule's room
// hands the ticket over, gets that room's own cookie, and is let through
// for that room's paths (with its identity), not for another room's.
func TestForwardAuthRulesAdmitPerRoom(t *testing.T) {
	store := redisstore.New(proxyMiniredis(t))
	concert, theatre := "rules-concert-"+randomName(), "rules-theatre-"+randomName()
	rules := &gate.Rules{Rooms: []gate.RoomRule{{PathPrefix: "/concert/", Room: concert}, {PathPrefix: "/theatre/", Room: theatre}}}
	addr, srv := startForwardAuth(t, context.Background(), store, "rules-default-"+randomName(), rules)
	for _, room := range []string{concert, theatre} {
		cfg := waitroom.RoomConfig{Capacity: 5, Lease: time.Minute, AdmitInterval: 20 * time.Millisecond, Retention: waitroom.DefaultRetention}
		if err := srv.Service().Configure(context.Background(), room, cfg); err != nil {
			t.Fatal(err)
		}
	}
	w := &world{room: concert, gates: []string{"http://" + addr}}
	b := newBuyer(w)
	var tk wrclient.TicketInfo
	if st, err := b.call(0, "POST", "/v1/rooms/"+concert+"/tickets", `{}`, "", &tk); err != nil || st != http.StatusCreated {
		t.Fatalf("join: %d %v", st, err)
	}
	for end := time.Now().Add(10 * time.Second); tk.State != waitroom.StateAdmitted; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not admitted: %s", tk.State)
		}
		if _, err := b.call(0, "GET", "/v1/rooms/"+concert+"/tickets/"+url.PathEscape(tk.UserID), "", tk.TicketToken, &tk); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := b.call(0, "POST", gate.AdmitPath, "", tk.TicketToken, nil); err != nil || st != http.StatusOK {
		t.Fatalf("hand-off: %d %v", st, err)
	}
	u, _ := url.Parse("http://" + addr)
	var names []string
	for _, c := range b.hc.Jar.Cookies(u) {
		names = append(names, c.Name)
	}
	if !slices.Contains(names, "stampede_admission_"+concert) {
		t.Errorf("cookies %v, want stampede_admission_%s", names, concert)
	}
	ask := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+gate.AuthPath, nil)
		req.Header.Set("X-Forwarded-Uri", path)
		res, err := b.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode, res.Header.Get("Stampede-User")
	}
	if st, user := ask("/concert/seats"); st != 200 || user != tk.UserID {
		t.Errorf("concert: %d with Stampede-User %q, want 200 with %q", st, user, tk.UserID)
	}
	if st, user := ask("/theatre/seats"); st != 303 || user != "" {
		t.Errorf("theatre with the concert's admission: %d %q, want 303 to its waiting page", st, user)
	}
}

// TestForwardAuthRulesBadInput: every bad field of the rules at once,
// named by its JSON path.
func TestForwardAuthRulesBadInput(t *testing.T) {
	store := redisstore.New(proxyMiniredis(t))
	_, srv := startForwardAuth(t, context.Background(), store, "rules-bad-"+randomName(), nil)
	cfg := gate.DefaultConfig()
	cfg.Room, cfg.Logger = "rules-bad", slog.New(slog.DiscardHandler)
	rules := &gate.Rules{
		Rooms:     []gate.RoomRule{{Room: "bad room"}, {PathPrefix: "concert", Room: "ok"}, {Host: "a/b", Room: "ok"}},
		Bypass:    gate.Bypass{PathPrefixes: []string{"/", "static"}, CIDRs: []string{"10.0.0.0/33", "10.0.0.0/8"}, Secret: "short"},
		Unmatched: "maybe",
	}
	_, err := gate.NewForwardAuth(withWaitroom(cfg, srv), rules)
	var got []string
	for _, e := range stampede.FieldErrors(err) {
		got = append(got, e.Field)
	}
	want := []string{"rules.rooms[0].room", "rules.rooms[1].path_prefix", "rules.rooms[2].host", "rules.bypass.path_prefixes[0]",
		"rules.bypass.path_prefixes[1]", "rules.bypass.cidrs[0]", "rules.bypass.secret", "rules.unmatched"}
	if !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v (%v)", got, want, err)
	}
	if stampede.ClassOf(err) != stampede.Invalid || !strings.Contains(err.Error(), "CIDR") {
		t.Errorf("error %v: want Invalid naming what a CIDR is", err)
	}
}
