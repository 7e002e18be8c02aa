package waitroom

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

var (
	tokenSecret = []byte("0123456789abcdef0123456789abcdef") // 32 bytes
	tokenEpoch  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

// tokenClock is a settable clock for Signer.
type tokenClock struct{ t time.Time }

func (c *tokenClock) now() time.Time { return c.t }

func newTestSigner(t testing.TB) (*Signer, *tokenClock) {
	t.Helper()
	clk := &tokenClock{t: tokenEpoch}
	s, err := NewSigner(tokenSecret, clk.now)
	if err != nil {
		t.Fatalf("NewSigner: %v", err)
	}
	return s, clk
}

func ticketClaims() Claims {
	return Claims{Kind: TicketToken, Room: "drop-42", User: "alice", Generation: 1, Expires: tokenEpoch.Add(time.Hour)}
}

func admissionClaims() Claims {
	return Claims{Kind: AdmissionToken, Room: "drop-42", User: "alice", Seq: 17, Expires: tokenEpoch.Add(5 * time.Minute)}
}

func mustSign(t testing.TB, s *Signer, c Claims) string {
	t.Helper()
	tok, err := s.Sign(c)
	if err != nil {
		t.Fatalf("Sign(%+v): %v", c, err)
	}
	return tok
}

// wantTokenError fails unless err is an unauthorized *Error with message msg
// that does not leak the secret.
func wantTokenError(t *testing.T, err error, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want *Error %q", err, err, msg)
	}
	if e.Code != CodeUnauthorized || e.Message != msg {
		t.Fatalf("error = {Code: %q, Message: %q}, want {%q, %q}", e.Code, e.Message, CodeUnauthorized, msg)
	}
	if strings.Contains(err.Error(), string(tokenSecret)) {
		t.Fatalf("error %q contains the secret", err)
	}
}

func wantFieldError(t *testing.T, err error, code Code, field string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want *Error on %q", err, err, field)
	}
	if e.Code != code || e.Field != field {
		t.Fatalf("error = {Code: %q, Field: %q} (%v), want {%q, %q}", e.Code, e.Field, err, code, field)
	}
}

func TestTokenRoundTrip(t *testing.T) {
	s, _ := newTestSigner(t)
	for _, c := range []Claims{ticketClaims(), admissionClaims()} {
		t.Run(string(c.Kind), func(t *testing.T) {
			tok := mustSign(t, s, c)
			if len(tok) > 200 || strings.ContainsAny(tok, "+/= \n") || strings.Count(tok, ".") != 1 {
				t.Fatalf("token %q is not compact URL-safe", tok)
			}
			got, err := s.Verify(tok, c.Kind)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := c
			want.IssuedAt = tokenEpoch // filled in from the clock
			if got.Kind != want.Kind || got.Room != want.Room || got.User != want.User || got.Seq != want.Seq ||
				!got.IssuedAt.Equal(want.IssuedAt) || !got.Expires.Equal(want.Expires) {
				t.Fatalf("Verify = %+v, want %+v", got, want)
			}
			if again := mustSign(t, s, got); again != tok {
				t.Fatalf("re-signing the verified claims gave %q, want %q", again, tok)
			}
		})
	}
}

func TestTokenPayloadFormat(t *testing.T) {
	s, _ := newTestSigner(t)
	for _, tc := range []struct {
		c    Claims
		want string
	}{
		{ticketClaims(), `{"k":"ticket","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400,"g":1}`},
		{admissionClaims(), `{"k":"admission","r":"drop-42","u":"alice","exp":1772366700,"iat":1772366400,"seq":17}`},
	} {
		tok := mustSign(t, s, tc.c)
		enc, _, _ := strings.Cut(tok, ".")
		body, err := b64.DecodeString(enc)
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != tc.want {
			t.Errorf("payload = %s, want %s", body, tc.want)
		}
	}
}

func TestTokenSubSecondTimesTruncated(t *testing.T) {
	s, clk := newTestSigner(t)
	clk.t = tokenEpoch.Add(700 * time.Millisecond)
	c := ticketClaims()
	c.Expires = c.Expires.Add(900 * time.Millisecond)
	got, err := s.Verify(mustSign(t, s, c), TicketToken)
	if err != nil {
		t.Fatal(err)
	}
	if !got.IssuedAt.Equal(tokenEpoch) || !got.Expires.Equal(tokenEpoch.Add(time.Hour)) {
		t.Fatalf("times = %v, %v; want whole seconds", got.IssuedAt, got.Expires)
	}
}

func TestVerifyTampered(t *testing.T) {
	s, _ := newTestSigner(t)
	tok := mustSign(t, s, admissionClaims())
	enc, mac, _ := strings.Cut(tok, ".")
	body, _ := b64.DecodeString(enc)

	t.Run("payload", func(t *testing.T) {
		forged := bytes.Replace(body, []byte(`"alice"`), []byte(`"mallory"`), 1)
		_, err := s.Verify(b64.EncodeToString(forged)+"."+mac, AdmissionToken)
		wantTokenError(t, err, msgSignature)
	})
	t.Run("payload seq", func(t *testing.T) {
		forged := bytes.Replace(body, []byte(`"seq":17`), []byte(`"seq":1`), 1)
		_, err := s.Verify(b64.EncodeToString(forged)+"."+mac, AdmissionToken)
		wantTokenError(t, err, msgSignature)
	})
	t.Run("signature", func(t *testing.T) {
		raw, _ := b64.DecodeString(mac)
		raw[0] ^= 1
		_, err := s.Verify(enc+"."+b64.EncodeToString(raw), AdmissionToken)
		wantTokenError(t, err, msgSignature)
	})
	t.Run("signature trailing bits", func(t *testing.T) {
		// 32 bytes are 43 characters with two unused bits; flipping
		// them must not give a second valid spelling.
		last := mac[len(mac)-1]
		alt := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", last) ^ 1
		alias := mac[:len(mac)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[alt])
		_, err := s.Verify(enc+"."+alias, AdmissionToken)
		wantTokenError(t, err, msgMalformed)
	})
	t.Run("wrong secret", func(t *testing.T) {
		other, err := NewSigner([]byte("fedcba9876543210fedcba9876543210"), func() time.Time { return tokenEpoch })
		if err != nil {
			t.Fatal(err)
		}
		_, err = other.Verify(tok, AdmissionToken)
		wantTokenError(t, err, msgSignature)
	})
}

func TestVerifyWrongKind(t *testing.T) {
	s, _ := newTestSigner(t)
	ticket := mustSign(t, s, ticketClaims())
	admission := mustSign(t, s, admissionClaims())
	_, err := s.Verify(ticket, AdmissionToken)
	wantTokenError(t, err, msgWrongKind)
	_, err = s.Verify(admission, TicketToken)
	wantTokenError(t, err, msgWrongKind)

	// A payload claiming another kind than its MAC covers (which Sign never
	// makes) is refused too.
	body := []byte(`{"k":"admission","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400,"seq":1}`)
	forged := b64.EncodeToString(body) + "." + b64.EncodeToString(s.mac(TicketToken, body))
	_, err = s.Verify(forged, TicketToken)
	wantTokenError(t, err, msgWrongKind)

	var e *Error
	if _, err := s.Verify(ticket, "session"); !errors.As(err, &e) || e.Code != CodeInternal {
		t.Fatalf("Verify with unknown kind: %v, want internal error", err)
	}
}

func TestVerifyExpired(t *testing.T) {
	s, clk := newTestSigner(t)
	c := ticketClaims()
	tok := mustSign(t, s, c)

	clk.t = c.Expires.Add(-time.Second)
	if _, err := s.Verify(tok, TicketToken); err != nil {
		t.Fatalf("a second before expiry: %v", err)
	}
	clk.t = c.Expires
	_, err := s.Verify(tok, TicketToken)
	wantTokenError(t, err, msgExpired)
	clk.t = c.Expires.Add(time.Hour)
	_, err = s.Verify(tok, TicketToken)
	wantTokenError(t, err, msgExpired)
}

func TestVerifyMalformed(t *testing.T) {
	s, _ := newTestSigner(t)
	tok := mustSign(t, s, ticketClaims())
	enc, mac, _ := strings.Cut(tok, ".")
	signed := func(body string) string { // a valid MAC over a hand-made payload
		return b64.EncodeToString([]byte(body)) + "." + b64.EncodeToString(s.mac(TicketToken, []byte(body)))
	}
	for name, bad := range map[string]string{
		"empty":               "",
		"dot only":            ".",
		"no dot":              enc + mac,
		"two dots":            tok + ".",
		"dot inside":          enc + "." + mac[:10] + "." + mac[10:],
		"empty payload":       "." + mac,
		"empty signature":     enc + ".",
		"bad base64 payload":  "!!!!" + "." + mac,
		"padded":              enc + "==." + mac,
		"std alphabet":        strings.NewReplacer("-", "+", "_", "/").Replace(tok) + "+/",
		"newline":             enc[:5] + "\n" + enc[5:] + "." + mac,
		"space":               " " + tok,
		"short signature":     enc + "." + mac[:20],
		"long signature":      enc + "." + mac + "AAAA",
		"bad length":          enc + strings.Repeat("A", (5-len(enc)%4)%4) + "." + mac, // 4n+1 characters
		"huge":                strings.Repeat("A", maxTokenLen) + "." + mac,
		"huge valid shape":    signed(`{"k":"ticket","r":"` + strings.Repeat("r", maxTokenLen) + `","u":"u","exp":1772370000,"iat":1772366400}`),
		"not json":            signed("hello"),
		"json array":          signed(`["ticket"]`),
		"unknown field":       signed(`{"k":"ticket","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400,"x":1}`),
		"trailing data":       signed(`{"k":"ticket","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400}{}`),
		"whitespace":          signed(`{"k":"ticket", "r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400}`),
		"field order":         signed(`{"r":"drop-42","k":"ticket","u":"alice","exp":1772370000,"iat":1772366400}`),
		"upper-case key":      signed(`{"K":"ticket","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400}`),
		"duplicate key":       signed(`{"k":"ticket","r":"drop-42","u":"alice","u":"bob","exp":1772370000,"iat":1772366400}`),
		"escaped":             signed(`{"k":"ticket","r":"drop-42","u":"\u0061lice","exp":1772370000,"iat":1772366400}`),
		"empty room":          signed(`{"k":"ticket","r":"","u":"alice","exp":1772370000,"iat":1772366400}`),
		"empty user":          signed(`{"k":"ticket","r":"drop-42","u":"","exp":1772370000,"iat":1772366400}`),
		"missing exp":         signed(`{"k":"ticket","r":"drop-42","u":"alice","iat":1772366400}`),
		"float exp":           signed(`{"k":"ticket","r":"drop-42","u":"alice","exp":1.7e9,"iat":1772366400}`),
		"ticket with seq":     signed(`{"k":"ticket","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400,"seq":0}`),
		"exp before iat":      signed(`{"k":"ticket","r":"drop-42","u":"alice","exp":1772366400,"iat":1772370000,"g":1}`),
		"ticket without join": signed(`{"k":"ticket","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400}`),
		"ticket with join 0":  signed(`{"k":"ticket","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400,"g":0}`),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Verify(bad, TicketToken)
			wantTokenError(t, err, msgMalformed)
		})
	}

	// An admission payload without seq, or with a join generation, under
	// a valid admission MAC.
	for _, body := range []string{
		`{"k":"admission","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400}`,
		`{"k":"admission","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400,"seq":1,"g":1}`,
	} {
		_, err := s.Verify(b64.EncodeToString([]byte(body))+"."+b64.EncodeToString(s.mac(AdmissionToken, []byte(body))), AdmissionToken)
		wantTokenError(t, err, msgMalformed)
	}
}

func TestSignMissingFields(t *testing.T) {
	s, _ := newTestSigner(t)
	for _, tc := range []struct {
		field string
		edit  func(*Claims)
	}{
		{"kind", func(c *Claims) { c.Kind = "" }},
		{"kind", func(c *Claims) { c.Kind = "session" }},
		{"room", func(c *Claims) { c.Room = "" }},
		{"room", func(c *Claims) { c.Room = "\xff" }},
		{"user", func(c *Claims) { c.User = "" }},
		{"user", func(c *Claims) { c.User = "a\xc0b" }},
		{"expires", func(c *Claims) { c.Expires = time.Time{} }},
		{"expires", func(c *Claims) { c.Expires = tokenEpoch }},
		{"expires", func(c *Claims) { c.Expires = tokenEpoch.Add(999 * time.Millisecond) }},
		{"issued_at", func(c *Claims) { c.IssuedAt = time.Unix(-5, 0) }},
		{"seq", func(c *Claims) { c.Seq = -1 }},
		{"seq", func(c *Claims) { c.Kind = TicketToken }},                  // a ticket with a seq
		{"generation", func(c *Claims) { c.Generation = 3 }},               // an admission with a join
		{"generation", func(c *Claims) { c.Kind, c.Seq = TicketToken, 0 }}, // a ticket without its join
	} {
		c := admissionClaims()
		tc.edit(&c)
		tok, err := s.Sign(c)
		if tok != "" {
			t.Errorf("Sign(%+v) returned a token with its error", c)
		}
		wantFieldError(t, err, CodeInvalid, tc.field)
	}

	// Claims too long for a token.
	c := ticketClaims()
	c.User = strings.Repeat("u", maxTokenLen)
	var e *Error
	if _, err := s.Sign(c); !errors.As(err, &e) || e.Code != CodeInvalid {
		t.Fatalf("Sign of an oversized token: %v, want invalid", err)
	}
}

func TestNewSignerShortSecret(t *testing.T) {
	for _, secret := range [][]byte{nil, {}, tokenSecret[:31]} {
		s, err := NewSigner(secret, nil)
		if s != nil {
			t.Errorf("NewSigner(%d bytes) returned a signer", len(secret))
		}
		wantFieldError(t, err, CodeInvalid, "secret")
		if !strings.Contains(err.Error(), "secret") {
			t.Errorf("error %q does not name the secret", err)
		}
	}
	if _, err := NewSigner(tokenSecret, nil); err != nil {
		t.Fatalf("NewSigner(32 bytes): %v", err)
	}
}

func TestSignerCopiesSecretAndDefaultsClock(t *testing.T) {
	secret := bytes.Clone(tokenSecret)
	s, err := NewSigner(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := ticketClaims()
	c.Expires = time.Now().Add(time.Hour)
	tok := mustSign(t, s, c)
	secret[0] ^= 0xff
	got, err := s.Verify(tok, TicketToken)
	if err != nil {
		t.Fatalf("Verify after the caller changed its secret: %v", err)
	}
	if d := time.Since(got.IssuedAt); d < -time.Second || d > time.Minute {
		t.Fatalf("IssuedAt = %v, not from time.Now", got.IssuedAt)
	}
}

func TestZeroSignerRefuses(t *testing.T) {
	for _, s := range []*Signer{nil, {}} {
		if _, err := s.Sign(ticketClaims()); err == nil {
			t.Error("zero Signer signed")
		}
		if _, err := s.Verify("e30.e30", TicketToken); err == nil {
			t.Error("zero Signer verified")
		}
	}
}

func TestVerifyAdmission(t *testing.T) {
	s, _ := newTestSigner(t)
	c := admissionClaims()
	tok := mustSign(t, s, c)
	now := tokenEpoch.Add(time.Minute)

	got, err := VerifyAdmission(tok, tokenSecret, "drop-42", now)
	if err != nil {
		t.Fatalf("VerifyAdmission: %v", err)
	}
	if got.User != "alice" || got.Seq != 17 || got.Kind != AdmissionToken {
		t.Fatalf("VerifyAdmission = %+v", got)
	}

	var e *Error
	if _, err := VerifyAdmission(tok, tokenSecret, "drop-43", now); !errors.As(err, &e) || e.Code != CodeForbidden {
		t.Fatalf("wrong room: %v, want forbidden", err)
	}
	_, err = VerifyAdmission(tok, tokenSecret, "drop-42", c.Expires)
	wantTokenError(t, err, msgExpired)
	_, err = VerifyAdmission(mustSign(t, s, ticketClaims()), tokenSecret, "drop-42", now)
	wantTokenError(t, err, msgWrongKind)
	_, err = VerifyAdmission(tok, []byte("fedcba9876543210fedcba9876543210"), "drop-42", now)
	wantTokenError(t, err, msgSignature)
	_, err = VerifyAdmission(tok, tokenSecret[:16], "drop-42", now)
	wantFieldError(t, err, CodeInvalid, "secret")
	_, err = VerifyAdmission(tok, tokenSecret, "", now)
	wantFieldError(t, err, CodeInvalid, "room")
	_, err = VerifyAdmission(tok, tokenSecret, "drop-42", time.Time{})
	wantFieldError(t, err, CodeInvalid, "now")
}

// FuzzVerify checks that Verify never panics, fails only with unauthorized
// errors, and accepts only what Sign makes: a token that verifies is byte
// for byte Sign's output for its claims. Besides the input as a token, it
// tries the input as a payload under a valid MAC, which exercises the
// strictness of the payload parsing that a forged MAC never reaches.
func FuzzVerify(f *testing.F) {
	s, _ := newTestSigner(f)
	ticket := mustSign(f, s, ticketClaims())
	admission := mustSign(f, s, admissionClaims())
	for _, seed := range []string{
		ticket,
		admission,
		"",
		".",
		"a.b",
		"garbage",
		"e30.e30",
		ticket + "." + admission,
		`{"k":"ticket","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400}`,
		`{"k":"admission","r":"drop-42","u":"alice","exp":1772370000,"iat":1772366400,"seq":3}`,
		`{"k":"ticket","r":"<&>\u2028","u":"\u00e9","exp":1772370000,"iat":1772366400}`,
	} {
		f.Add(seed)
	}
	check := func(t *testing.T, tok string, kind TokenKind) {
		c, err := s.Verify(tok, kind)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeUnauthorized {
				t.Fatalf("Verify(%q, %s) error %v is not unauthorized", tok, kind, err)
			}
			return
		}
		if c.Kind != kind || c.Room == "" || c.User == "" {
			t.Fatalf("Verify(%q, %s) accepted claims %+v", tok, kind, c)
		}
		again, err := s.Sign(c)
		if err != nil {
			t.Fatalf("Verify(%q, %s) accepted claims %+v that Sign refuses: %v", tok, kind, c, err)
		}
		if again != tok {
			t.Fatalf("Verify accepted %q, but Sign(%+v) = %q", tok, c, again)
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, kind := range tokenKinds {
			check(t, in, kind)
			body := []byte(in)
			check(t, b64.EncodeToString(body)+"."+b64.EncodeToString(s.mac(kind, body)), kind)
		}
	})
}
