package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeForwardAuthRejectsBadFlags: every bad flag of the forward-auth
// server at once, each named as on the command line; it has no
// --upstream (the proxy sends requests to the checkout).
func TestServeForwardAuthRejectsBadFlags(t *testing.T) {
	for _, env := range []string{envRedis, envSecret, envAdminToken} {
		t.Setenv(env, "")
	}
	_, _, err := execute(t, "serve", "forward-auth", "--admin-token=0123456789abcdef",
		"--room", "bad room", "--check-cache", "5s", "--max-session", "0s",
		"--visitor-rate", "-1", "--visitor-burst", "-2", "--check-concurrency", "0", "--check-backoff", "0s")
	if err == nil {
		t.Fatal("serve forward-auth accepted bad flags")
	}
	for _, want := range []string{"--room:", "--check-cache:", "--max-session:", "--visitor-rate:", "--visitor-burst:", "--check-concurrency:", "--check-backoff:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "upstream") {
		t.Errorf("error %q names --upstream, which serve forward-auth does not have", err)
	}
	if _, _, err := execute(t, "serve", "forward-auth", "--admin-token=0123456789abcdef", "--upstream", "http://x"); err == nil || !strings.Contains(err.Error(), "upstream") {
		t.Errorf("serve forward-auth --upstream: %v, want an unknown flag", err)
	}
}

// TestServeForwardAuthAnswers starts `stampede serve forward-auth` and asks
// it as nginx does: a visitor without an admission gets a bare 401 with
// ?deny=401, and the wait path sends a page to the waiting room; the
// waiting room's page and API are served beside.
func TestServeForwardAuthAnswers(t *testing.T) {
	for _, env := range []string{envRedis, envSecret, envAdminToken} {
		t.Setenv(env, "")
	}
	addr, _ := startServe(t, "forward-auth", "--admin-token=0123456789abcdef", "--room", "drop")
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, header map[string]string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	if res := get("/.stampede/auth?deny=401", map[string]string{"X-Forwarded-Uri": "/shop"}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("auth without an admission: %d, want 401", res.StatusCode)
	}
	res := get("/.stampede/wait", map[string]string{"X-Forwarded-Uri": "/shop", "Accept": "text/html"})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/rooms/drop?join=anonymous" {
		t.Errorf("wait: %d to %q, want 303 to /rooms/drop?join=anonymous", res.StatusCode, res.Header.Get("Location"))
	}
	if res := get("/.well-known/jwks.json", nil); res.StatusCode != http.StatusOK {
		t.Errorf("jwks: %d, want 200", res.StatusCode)
	}
}

// TestServeForwardAuthRejectsBadRules: a --rules file with bad fields is
// refused before anything starts, naming the flag and each field by its
// JSON path; an unknown key is refused too.
func TestServeForwardAuthRejectsBadRules(t *testing.T) {
	for _, env := range []string{envRedis, envSecret, envAdminToken} {
		t.Setenv(env, "")
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"rooms":[{"path_prefix":"concert","room":"c"}],"bypass":{"cidrs":["10.0.0.0/99"]},"unmatched":"maybe"}`), 0o644)
	_, _, err := execute(t, "serve", "forward-auth", "--admin-token=0123456789abcdef", "--room", "drop", "--rules", bad)
	if err == nil {
		t.Fatal("serve forward-auth accepted bad rules")
	}
	for _, want := range []string{"--rules", "rooms[0].path_prefix:", "bypass.cidrs[0]:", "unmatched:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	unknown := filepath.Join(dir, "unknown.json")
	os.WriteFile(unknown, []byte(`{"room":[]}`), 0o644)
	if _, _, err := execute(t, "serve", "forward-auth", "--admin-token=0123456789abcdef", "--room", "drop", "--rules", unknown); err == nil || !strings.Contains(err.Error(), `unknown field "room"`) {
		t.Errorf("rules with an unknown key: %v, want an error naming it", err)
	}
}
