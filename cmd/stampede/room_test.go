package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRoomCommands drives a real `serve waitroom` with `stampede room` as
// an operator would: create with only a capacity (every other field takes
// its default), read, patch (a merge: the template keeps what the patch
// does not name), pause, resume, close, list and delete; bad input and a
// wrong token come back as the server's problem, naming the field.
func TestRoomCommands(t *testing.T) {
	clearServiceEnv(t) // the in-process Redis: nothing left behind on a shared one
	const token = "room-admin-token-0123456789"
	addr, _ := startServe(t, "waitroom", "--admin-token", token)
	url := "http://" + addr
	room := func(args ...string) (map[string]any, error) {
		t.Helper()
		out, errOut, err := execute(t, append(append([]string{"room"}, args...), "--url", url, "--admin-token", token)...)
		if err != nil {
			return nil, err
		}
		var got map[string]any
		if strings.TrimSpace(out) != "" {
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("room %v printed %q (%s): %v", args, out, errOut, err)
			}
		}
		return got, nil
	}
	must := func(args ...string) map[string]any {
		t.Helper()
		got, err := room(args...)
		if err != nil {
			t.Fatalf("room %v: %v", args, err)
		}
		return got
	}
	config := func(v map[string]any) map[string]any {
		if c, ok := v["config"].(map[string]any); ok {
			return c
		}
		return v
	}

	created := must("create", "concert", "--capacity", "7", "--set", `{"template":{"title":"Concert","primary_color":"#123456"}}`)
	if created["capacity"] != 7.0 || created["lease_seconds"].(float64) <= 0 {
		t.Errorf("create: %v, want capacity 7 and a default lease", created)
	}
	must("patch", "concert", `{"template":{"title":"Concert 2"}}`)
	got := config(must("get", "concert"))
	tpl, _ := got["template"].(map[string]any)
	if got["capacity"] != 7.0 || tpl["title"] != "Concert 2" || tpl["primary_color"] != "#123456" {
		t.Errorf("after the patch: capacity %v, template %v; want 7 and the colour kept", got["capacity"], tpl)
	}
	if c := config(must("pause", "concert")); c["paused"] != true {
		t.Errorf("pause: %v", c)
	}
	if c := config(must("resume", "concert")); c["paused"] != false {
		t.Errorf("resume: %v", c)
	}
	if c := config(must("close", "concert", "--message", "Sold out")); c["closed"] != true || c["closed_message"] != "Sold out" {
		t.Errorf("close: %v", c)
	}
	if out, _, err := execute(t, "room", "list", "--url", url, "--admin-token", token); err != nil || !strings.Contains(out, `"concert"`) {
		t.Errorf("list: %v %s", err, out)
	}

	// Refusals: named fields, the server's words; nothing created.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "bad"}, "--capacity is required"},
		{[]string{"create", "bad", "--capacity", "0"}, "capacity"},
		{[]string{"create", "bad", "--capacity", "2", "--set", `{"lease_seconds": -1}`}, "lease_seconds"},
		{[]string{"create", "bad", "--capacity", "2", "--set", `[1]`}, "--set: must be a JSON object"},
		{[]string{"patch", "concert", `{"capacity": "many"}`}, "capacity"},
		{[]string{"get", "nowhere"}, "nowhere"},
		{[]string{"delete", "concert"}, "--yes is required"},
	} {
		if _, err := room(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("room %v: error %v, want one naming %q", tc.args, err, tc.want)
		}
	}
	if _, _, err := execute(t, "room", "get", "concert", "--url", url, "--admin-token", "wrong-token-0123456789"); err == nil ||
		!strings.Contains(strings.ToLower(err.Error()), "admin token") {
		t.Errorf("a wrong token: %v, want the server's refusal", err)
	}
	if _, _, err := execute(t, "room", "list", "--url", "ftp://x", "--admin-token", token); err == nil || !strings.Contains(err.Error(), "--url:") {
		t.Errorf("a bad --url: %v, want one naming --url", err)
	}
	if _, err := room("get", "bad"); err == nil {
		t.Error("a refused create made the room")
	}

	must("delete", "concert", "--yes")
	if _, err := room("get", "concert"); err == nil {
		t.Error("the room is still there after delete")
	}
}

// TestWaitroomKeepsItsStateAcrossARestart: without --redis, serve waitroom
// keeps its rooms and tickets in --data-dir across a clean stop (the
// in-process Redis's snapshot), and its generated secret with them, so a
// ticket token issued before the restart still reads its ticket after it.
// With an empty --data-dir nothing is kept.
func TestWaitroomKeepsItsStateAcrossARestart(t *testing.T) {
	clearServiceEnv(t) // the in-process Redis is what --data-dir keeps
	t.Setenv(envSecret, "")
	const token = "room-admin-token-0123456789"
	dir := t.TempDir()
	start := func(dataDir string) (string, func()) {
		t.Helper()
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		logs, done := runCmd(ctx, "serve", "waitroom", "--http", addr, "--admin-token", token, "--data-dir", dataDir, "--allow-unsigned-users")
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("serve waitroom did not start: %s", logs.String())
			}
		}
		return "http://" + addr, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve waitroom: %v\n%s", err, logs.String())
			}
		}
	}
	url, stop := start(dir)
	if _, _, err := execute(t, "room", "create", "keep", "--capacity", "1", "--set", `{"paused": true}`, "--url", url, "--admin-token", token); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url+"/v1/rooms/keep/tickets", "application/json", strings.NewReader(`{"user_id":"ada"}`))
	if err != nil {
		t.Fatal(err)
	}
	var ticket struct {
		Token string `json:"ticket_token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ticket)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || ticket.Token == "" {
		t.Fatalf("join: %d %v", resp.StatusCode, err)
	}
	stop()

	url, stop = start(dir)
	out, _, err := execute(t, "room", "get", "keep", "--url", url, "--admin-token", token)
	if err != nil || !strings.Contains(out, `"paused": true`) {
		t.Errorf("after a restart: %v %s; want the paused room back", err, out)
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/rooms/keep/tickets/ada", nil)
	req.Header.Set("Authorization", "Bearer "+ticket.Token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the ticket after a restart: %v %v; want 200 with the old token", resp.Status, err)
	} else {
		resp.Body.Close()
	}
	stop()

	// No data directory: nothing kept.
	url, stop = start("")
	defer stop()
	if _, _, err := execute(t, "room", "get", "keep", "--url", url, "--admin-token", token); err == nil {
		t.Error("with --data-dir \"\" the room came back")
	}
}
