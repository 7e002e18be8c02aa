package console_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/console"
)

// TestLoginThrottledLogoutRevokes: after LoginFailures wrong tokens from
// one address the login answers 429, even to the right token, until the
// minute ends; a session that logged out is refused afterwards even when
// its cookie is sent again.
func TestLoginThrottledLogoutRevokes(t *testing.T) {
	r := newRig(t, nil)
	for i := range console.LoginFailures {
		if resp := r.login(t, "wrong-token-"+string(rune('a'+i))); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong login %d = %d, want 401", i, resp.StatusCode)
		}
	}
	for _, tok := range []string{"wrong-again", adminToken} {
		if resp := r.login(t, tok); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Errorf("login with %q after %d wrong = %d (Retry-After %q), want 429", tok, console.LoginFailures, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	r.clock.Add(61 * time.Second)
	csrf := r.csrf(t) // logs in
	var session *http.Cookie
	for _, c := range r.client.Jar.Cookies(mustURL(t, r.console.URL+"/console")) {
		if c.Name == console.CookieName {
			session = c
		}
	}
	if session == nil {
		t.Fatal("no session cookie after the login")
	}
	if code, _ := r.send(t, http.MethodPost, "/console/logout", csrf, ""); code != http.StatusNoContent {
		t.Fatalf("logout = %d", code)
	}
	req, _ := http.NewRequest(http.MethodGet, r.console.URL+"/console/api/snapshot", nil)
	req.AddCookie(session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the logged-out session's cookie replayed = %d, want 401", resp.StatusCode)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
