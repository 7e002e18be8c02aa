package gate_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// TestForwardAuthBadInput: what a proxy or a form sends wrong is answered
// 4xx problem+json naming the field, never 5xx.
func TestForwardAuthBadInput(t *testing.T) {
	store := redisstore.New(proxyMiniredis(t))
	addr, _ := startForwardAuth(t, context.Background(), store, "gate-fa-bad-"+randomName(), nil)
	base := "http://" + addr
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cases := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		field                    string
	}{
		{"uri not a path", "GET", gate.AuthPath, "", map[string]string{"X-Forwarded-Uri": "http://evil.example/x"}, 400, "X-Forwarded-Uri"},
		{"uri with a space", "GET", gate.AuthPath, "", map[string]string{"X-Original-URI": "/a b"}, 400, "X-Forwarded-Uri"},
		{"method with a space", "GET", gate.AuthPath, "", map[string]string{"X-Forwarded-Method": "GE T"}, 400, "X-Forwarded-Method"},
		{"wait: uri not a path", "GET", gate.WaitPath, "", map[string]string{"X-Forwarded-Uri": "//evil.example"}, 400, "X-Forwarded-Uri"},
		{"release: next off site", "POST", gate.ReleasePath, "next=//evil.example/", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 400, "next"},
		{"release: next absolute", "POST", gate.ReleasePath, "next=https://evil.example/", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 400, "next"},
		{"release: GET", "GET", gate.ReleasePath, "", nil, 405, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			res, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var p struct {
				Field string `json:"field"`
			}
			json.Unmarshal(raw, &p)
			if res.StatusCode != c.status || res.Header.Get("Content-Type") != "application/problem+json" || p.Field != c.field {
				t.Errorf("%d %s %s, want %d problem+json naming %q", res.StatusCode, res.Header.Get("Content-Type"), raw, c.status, c.field)
			}
		})
	}
}

// TestForwardAuthAnswers: without an admission, the default refusal is
// the gate's (303 to the waiting page remembering the address asked for,
// taken from X-Forwarded-Uri or, for Envoy, from the path after the auth
// path), and deny=401 gives nginx a bare 401; an Envoy-style request with
// ?deny=401 in the original query keeps the default refusal.
func TestForwardAuthAnswers(t *testing.T) {
	store := redisstore.New(proxyMiniredis(t))
	room := "gate-fa-answers-" + randomName()
	addr, _ := startForwardAuth(t, context.Background(), store, room, nil)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		name, path, uri string
		status          int
		back            string
	}{
		{"caddy", gate.AuthPath, "/shop?id=1", 303, "%2Fshop%3Fid%3D1"},
		{"envoy", gate.AuthPath + "/shop/7?deny=401", "", 303, "%2Fshop%2F7%3Fdeny%3D401"},
		{"nginx", gate.AuthPath + "?deny=401", "/shop", 401, ""},
	} {
		req, _ := http.NewRequest("GET", "http://"+addr+c.path, nil)
		if c.uri != "" {
			req.Header.Set("X-Forwarded-Uri", c.uri)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", c.name, res.StatusCode, c.status)
		}
		if c.status == 303 {
			if loc := res.Header.Get("Location"); loc != "/rooms/"+room+"?join=anonymous" {
				t.Errorf("%s: Location %q", c.name, loc)
			}
			if ck := strings.Join(res.Header.Values("Set-Cookie"), ";"); !strings.Contains(ck, "stampede_admission_return="+c.back) {
				t.Errorf("%s: Set-Cookie %q, want the return address %s", c.name, ck, c.back)
			}
		}
	}
}
