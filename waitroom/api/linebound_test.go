package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/waitroom/api"
)

// TestJoinPrefixLimitBoundsRotatingAddresses: 300 addresses of one /24,
// 10 joins each (what one host with a routed /24 can send), get no more
// joins than the prefix bucket holds; another network is not affected,
// and the refusal names the network.
func TestJoinPrefixLimitBoundsRotatingAddresses(t *testing.T) {
	cfg := api.DefaultJoinLimitConfig()
	e := newAbuseEnv(t, cfg)
	room := e.room(t, `{"capacity":5}`)
	joined, limited := 0, 0
	var last answer
	for n := range 3000 {
		// 300 addresses, 10 each: .1 to .255 of 198.51.100.0/24, then
		// ::1 to ::45 of one IPv6 /48 spread over /64s.
		i := n % 300
		peer := fmt.Sprintf("198.51.100.%d:4000", 1+i%255)
		if i >= 255 {
			peer = fmt.Sprintf("[2001:db8:7:%x::1]:4000", i)
		}
		a := e.do(t, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"r`+strconv.Itoa(n)+`"}`, peer, nil)
		switch a.status {
		case http.StatusCreated:
			joined++
		case http.StatusTooManyRequests:
			limited++
			last = a
		default:
			t.Fatalf("join %d from %s = %d %s", n, peer, a.status, a.raw)
		}
	}
	// The clock does not move: each prefix gets its burst, no more.
	if want := 2 * cfg.PrefixBurst; joined != want {
		t.Fatalf("3000 joins from 300 rotating addresses of two prefixes: %d joined, want %d (the prefix bursts)", joined, want)
	}
	if !strings.Contains(last.str("detail"), "network") || last.header.Get("Retry-After") == "" {
		t.Errorf("the refusal = %s (Retry-After %q), want it to name the network and say when", last.raw, last.header.Get("Retry-After"))
	}
	if a := e.do(t, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"other"}`, "203.0.113.5:1", nil); a.status != http.StatusCreated {
		t.Errorf("a join from another network = %d %s", a.status, a.raw)
	}
	// Turned off, the same crowd is bound by the per-address limit only.
	cfg.PrefixRate = 0
	e = newAbuseEnv(t, cfg)
	room = e.room(t, `{"capacity":5}`)
	joined = 0
	for n := range 300 {
		if a := e.do(t, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"s`+strconv.Itoa(n)+`"}`, fmt.Sprintf("198.51.100.%d:1", 1+n%255), nil); a.status == http.StatusCreated {
			joined++
		}
	}
	if joined != 300 {
		t.Errorf("without the prefix limit, 300 joins from 255 addresses: %d joined, want 300", joined)
	}
}

// TestRoomLineBoundsOverHTTP: a room's max_waiting refuses the join past
// it with 503 line_full and Retry-After, and max_joins_per_second refuses
// a burst past it with 503 joins_throttled; bad values are a 400 naming
// the field; the defaults show in the admin view.
func TestRoomLineBoundsOverHTTP(t *testing.T) {
	e := newAbuseEnv(t, api.JoinLimitConfig{MaxClients: 1})
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	room := e.room(t, `{"capacity":1}`)
	a := e.do(t, "GET", "/v1/rooms/"+room, "", "127.0.0.1:1", admin)
	cfg, _ := a.json["config"].(map[string]any)
	if cfg["max_waiting"] != 1e6 || cfg["max_joins_per_second"] != 0.0 {
		t.Fatalf("default bounds = %v, %v; want 1000000 and 0: %s", cfg["max_waiting"], cfg["max_joins_per_second"], a.raw)
	}
	for field, body := range map[string]string{
		"max_waiting":          `{"max_waiting":-1}`,
		"max_joins_per_second": `{"max_joins_per_second":1.5}`,
	} {
		a := e.do(t, "PATCH", "/v1/rooms/"+room, body, "127.0.0.1:1", admin)
		if a.status != http.StatusBadRequest || !strings.Contains(string(a.raw), field) {
			t.Errorf("PATCH %s = %d %s, want 400 naming %s", body, a.status, a.raw, field)
		}
	}
	join := func(user string) answer {
		return e.do(t, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"`+user+`"}`, "192.0.2.1:1", nil)
	}
	if a := e.do(t, "PATCH", "/v1/rooms/"+room, `{"max_waiting":2}`, "127.0.0.1:1", admin); a.status != http.StatusOK {
		t.Fatalf("PATCH max_waiting = %d %s", a.status, a.raw)
	}
	for _, u := range []string{"a", "b"} {
		if a := join(u); a.status != http.StatusCreated {
			t.Fatalf("join %s = %d %s", u, a.status, a.raw)
		}
	}
	a = join("c")
	if a.status != http.StatusServiceUnavailable || a.errCode() != "line_full" || a.header.Get("Retry-After") != "30" {
		t.Fatalf("a join past max_waiting = %d %s (Retry-After %q), want 503 line_full, Retry-After 30", a.status, a.raw, a.header.Get("Retry-After"))
	}
	if a := e.do(t, "PATCH", "/v1/rooms/"+room, `{"max_waiting":0,"max_joins_per_second":1}`, "127.0.0.1:1", admin); a.status != http.StatusOK {
		t.Fatalf("PATCH max_joins_per_second = %d %s", a.status, a.raw)
	}
	// The bucket holds one second's worth: one join, then a refusal.
	if a := join("c"); a.status != http.StatusCreated {
		t.Fatalf("join c = %d %s", a.status, a.raw)
	}
	a = join("d")
	if a.status != http.StatusServiceUnavailable || a.errCode() != "joins_throttled" || a.header.Get("Retry-After") != "1" {
		t.Fatalf("a join past max_joins_per_second = %d %s, want 503 joins_throttled, Retry-After 1", a.status, a.raw)
	}
}
