package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom/client"
)

// TestRoomLogVerify runs a real `serve waitroom` through an opening: the
// public view publishes a commitment before it and the seed after; the
// log written by `stampede room log` passes `stampede room verify` (a
// buyer finds their own entry), and fails once an entry is changed or
// with another seed; a bad page number is a 400 naming the field.
func TestRoomLogVerify(t *testing.T) {
	clearServiceEnv(t)
	const token = "room-admin-token-0123456789"
	addr, _ := startServe(t, "waitroom", "--admin-token", token, "--allow-unsigned-users", "--join-rate", "0")
	url := "http://" + addr
	ctx := context.Background()
	opens := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	if _, _, err := execute(t, "room", "create", "fair", "--capacity", "4", "--set", `{"opens_at": "`+opens+`"}`, "--url", url, "--admin-token", token); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{BaseURL: url, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for i := range 10 {
		u := fmt.Sprintf("buyer-%d", i)
		ti, err := c.Join(ctx, "fair", client.JoinRequest{UserID: u})
		if err != nil {
			t.Fatalf("join %s: %v", u, err)
		}
		tokens[u] = ti.TicketToken
	}
	view := func() map[string]any {
		resp, err := http.Get(url + "/v1/rooms/fair")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Fairness map[string]any `json:"fairness"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v.Fairness
	}
	before := view()
	commitment, _ := before["commitment"].(string)
	if len(commitment) != 64 || before["seed"] != nil {
		t.Fatalf("before opening the view's fairness is %v: want a commitment and no seed", before)
	}
	var seed string
	for deadline := time.Now().Add(10 * time.Second); seed == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no seed revealed 10 s after the opening")
		}
		seed, _ = view()["seed"].(string)
	}
	// Two of the admitted leave, two more are let in: a second pass.
	var released []string
	for u, tok := range tokens {
		if ti, err := c.Ticket(ctx, "fair", u, tok); err == nil && ti.State == "admitted" && len(released) < 2 {
			if _, err := c.Leave(ctx, "fair", u, tok); err != nil {
				t.Fatal(err)
			}
			released = append(released, u)
		}
	}
	if len(released) != 2 {
		t.Fatalf("released %v, want two admitted buyers", released)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if n, _ := view()["log_length"].(float64); n >= 2+6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log holds %v entries, want 8", view()["log_length"])
		}
	}
	out, _, err := execute(t, "room", "log", "fair", "--url", url, "--admin-token", token)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "fair.log")
	if err := os.WriteFile(good, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	res, _, err := execute(t, "room", "verify", "--log", good, "--seed", seed, "--commitment", commitment, "--user", released[0])
	if err != nil || !strings.Contains(res, "OK") || !strings.Contains(res, "you: entry") || !strings.Contains(res, "6 admissions") {
		t.Fatalf("verify of the exported log: %v\n%s", err, res)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f := strings.Fields(lines[3])
	f[6] = "1" // the slots held after the second admission
	lines[3] = strings.Join(f, " ")
	bad := filepath.Join(dir, "tampered.log")
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, _, err := execute(t, "room", "verify", "--log", bad, "--seed", seed); err == nil || !strings.Contains(res, "FAIL") {
		t.Errorf("verify passed a tampered log:\n%s", res)
	}
	if res, _, err := execute(t, "room", "verify", "--log", good, "--seed", strings.Repeat("0", 64)); err == nil || !strings.Contains(res, "does not match") {
		t.Errorf("verify passed with a wrong seed:\n%s", res)
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/rooms/fair/log?from=zero", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Field string `json:"field"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || p.Field != "from" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("from=zero: %d %q, want a 400 problem naming from", resp.StatusCode, p.Field)
	}
}
