package gate

import (
	"sync"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
)

// tokenCache remembers the admission tokens whose signature verified, so
// that a cookie sent with every request is verified once: by the token's
// text, until keep (the token's expiry, or for the forward-auth server the
// end of its admission's session, when a stale token still counts). Those
// of no use are dropped every sweepEvery; at most maxEntries, past which
// arbitrary ones are dropped too. Failed verifications are not remembered.
type tokenCache struct {
	mu sync.Mutex
	m  map[string]verified
	// sweptAt is when the entries of no use were last dropped (at most
	// sweepEvery apart).
	sweptAt time.Time
}

// verified is a token's claims and when its entry is of no use any more.
type verified struct {
	claims protocol.AdmissionClaims
	keep   time.Time
}

// verify returns token's claims as protocol.VerifyAdmission would at now
// for g's room; with stale, a token past its expiry still verifies while
// its admission could hold (before its start plus MaxSession), and stale
// reports that it is past its expiry.
func (g *Gate) verify(token string, allowStale bool) (protocol.AdmissionClaims, bool, error) {
	now := g.cfg.Now()
	tc := g.tokens
	tc.mu.Lock()
	v, ok := tc.m[token]
	tc.mu.Unlock()
	if !ok {
		c, err := protocol.VerifyAdmission(token, g.cfg.Admissions.JWKS(), g.cfg.Room, now)
		if err != nil && allowStale && stampede.As(err).Message == protocol.MsgExpired {
			var exp time.Time
			if exp, err = tokenExpiry(token); err == nil {
				c, err = protocol.VerifyAdmission(token, g.cfg.Admissions.JWKS(), g.cfg.Room, exp.Add(-time.Second))
			}
		}
		if err != nil {
			return c, false, err
		}
		v = verified{claims: c, keep: c.Expires}
		if allowStale {
			v.keep = c.AdmittedAt.Add(g.cfg.MaxSession)
		}
		tc.add(token, v, now)
	}
	c := v.claims
	switch {
	case now.Before(c.Expires):
		return c, false, nil
	case allowStale && now.Before(c.AdmittedAt.Add(g.cfg.MaxSession)):
		return c, true, nil
	case allowStale:
		return c, false, stampede.Errorf(stampede.Unauthorized, "the admission's session is over")
	default:
		return c, false, &stampede.Error{Code: stampede.Unauthorized, Message: protocol.MsgExpired}
	}
}

// add remembers token's verification.
func (tc *tokenCache) add(token string, v verified, now time.Time) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.m) >= maxEntries || now.Sub(tc.sweptAt) >= sweepEvery {
		tc.sweptAt = now
		for k, e := range tc.m {
			if !now.Before(e.keep) {
				delete(tc.m, k)
			}
		}
	}
	if len(tc.m) >= maxEntries {
		for k := range tc.m { // still full: drop arbitrary ones
			if len(tc.m) < maxEntries*9/10 {
				break
			}
			delete(tc.m, k)
		}
	}
	tc.m[token] = v
}
