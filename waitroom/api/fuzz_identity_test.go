package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
)

// identityFuzzEnv is one handler-only server for a fuzz target, with a room.
func identityFuzzEnv(f *testing.F) (*env, string) {
	e := newEnvWith(f, miniBackend(f), false, func(o *api.Config) {
		o.AllowUnsignedUsers = false
		o.SiteSecret, o.CheckoutKey = siteSecret, checkoutKey
	})
	return e, e.newRoom(f, `{"capacity":2,"admit_interval_ms":60000}`)
}

// serve sends one request straight to the handler.
func (e *env) serve(method, path, body, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, r)
	return rec
}

// FuzzJoinIdentity: any join body and bearer answer 2xx or a 4xx problem,
// never 500, and never a ticket for a user the request cannot prove.
func FuzzJoinIdentity(f *testing.F) {
	e, room := identityFuzzEnv(f)
	exp := time.Now().Add(time.Hour)
	for _, s := range []string{`{}`, `{"user_id":"a"}`, signedJoin(room, "a", exp), `{"user_id":"anon-x"}`, `{"user_sig":"x"}`,
		`{"user_id":"a","user_sig":"` + strings.Repeat("f", 64) + `","user_expires":99999999999}`, `{"user_expires":-1}`, `[]`, `{"user_id":null}`} {
		f.Add(s, "")
		f.Add(s, "Bearer x.y")
	}
	f.Fuzz(func(t *testing.T, body, auth string) {
		if strings.ContainsAny(auth, "\r\n\x00") {
			return
		}
		rec := e.serve("POST", "/v1/rooms/"+room+"/tickets", body, auth)
		if rec.Code >= 500 {
			t.Fatalf("join %q (auth %q) = %d %s", body, auth, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("join %q = %d with %q", body, rec.Code, rec.Header().Get("Content-Type"))
		}
		if rec.Code == http.StatusOK {
			t.Fatalf("join %q (auth %q) returned an existing ticket without its token: %s", body, auth, rec.Body)
		}
	})
}

// FuzzAdmissionCheck: any body and token to the check and done endpoints
// answer 200 or a 4xx problem, never 500, and never hold=true for a
// token the server did not sign.
func FuzzAdmissionCheck(f *testing.F) {
	e, room := identityFuzzEnv(f)
	for _, s := range []string{`{"admission_token":"a.b.c"}`, `{"admission_token":"eyJhbGciOiJFZERTQSJ9.e30.AAAA"}`, `{}`, `{"admission_token":1}`, `null`, ``} {
		f.Add(s, true)
		f.Add(s, false)
	}
	key := "Bearer " + checkoutKey
	f.Fuzz(func(t *testing.T, body string, done bool) {
		path := "/v1/rooms/" + room + "/admissions/check"
		if done {
			path = "/v1/rooms/" + room + "/admissions/done"
		}
		rec := e.serve("POST", path, body, key)
		if rec.Code >= 500 || (rec.Code >= 300 && rec.Code < 400) {
			t.Fatalf("%s %q = %d %s", path, body, rec.Code, rec.Body)
		}
		if rec.Code == 200 && strings.Contains(rec.Body.String(), `"held":true`) {
			t.Fatalf("%s %q: held for an unsigned token: %s", path, body, rec.Body)
		}
	})
}

// FuzzVerifyAdmissionJWT: the offline verifier never panics and never
// accepts a token it did not sign.
func FuzzVerifyAdmissionJWT(f *testing.F) {
	s, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: testSecret, Epoch: "1"}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := s.Sign(waitroom.AdmissionClaims{Room: "r", User: "u", Seq: 1, Expires: time.Now().Add(time.Hour)})
	f.Add(good)
	f.Add(noncanonical(good))
	f.Add("a.b.c")
	f.Add("")
	f.Add(strings.Repeat("A", 5000))
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := s.Verify(tok, "r")
		if err == nil && tok != good {
			t.Fatalf("accepted %q as %+v", tok, c)
		}
	})
}

// noncanonical returns tok with its last character's unused bits set
// otherwise: another spelling of the same signature bytes.
func noncanonical(tok string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, tok[len(tok)-1])
	return tok[:len(tok)-1] + string(alphabet[i^1])
}

// TestAdmissionJWTRefusesNonCanonicalEncoding: a token whose signature
// is spelled otherwise (the unused bits of its last base64url character
// set) decodes to the same bytes, but is not the token signed: refused.
func TestAdmissionJWTRefusesNonCanonicalEncoding(t *testing.T) {
	s, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: testSecret, Epoch: "1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	good, err := s.Sign(waitroom.AdmissionClaims{Room: "r", User: "u", Seq: 1, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(good, "r"); err != nil {
		t.Fatalf("the signed token: %v", err)
	}
	bad := noncanonical(good)
	if _, err := s.Verify(bad, "r"); waitroom.ErrorCode(err) != waitroom.CodeUnauthorized {
		t.Fatalf("Verify(%q) = %v, want unauthorized (the signed token is %q)", bad, err, good)
	}
}

// FuzzVerifyUser: a trusted join's signature check never panics and
// accepts only SignUser's answer.
func FuzzVerifyUser(f *testing.F) {
	exp := time.Now().Add(time.Hour).Unix()
	good := waitroom.SignUser(siteSecret, "r", "u", time.Unix(exp, 0))
	f.Add("u", good, exp)
	f.Add("u", strings.ToUpper(good), exp)
	f.Add("v", good, exp)
	f.Add("u", "zz", int64(0))
	f.Fuzz(func(t *testing.T, user, sig string, expires int64) {
		err := waitroom.VerifyUser(siteSecret, "r", user, sig, expires, time.Now())
		if err == nil && (user != "u" || expires != exp || !strings.EqualFold(sig, good)) {
			t.Fatalf("accepted user %q sig %q expires %d", user, sig, expires)
		}
	})
}
