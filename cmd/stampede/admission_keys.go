package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// The waiting room's key set is fetched again when a token names a key the
// cached set lacks, at most once per jwksRefetchEvery, and when the cached
// set is older than jwksMaxAge (the waiting room's Cache-Control).
const (
	jwksRefetchEvery = time.Second
	jwksMaxAge       = 5 * time.Minute
	jwksMaxBytes     = 1 << 20
)

// waitroomKeys is a protocol.KeySource over a waiting room's GET
// /.well-known/jwks.json: the set is fetched on first use and cached. With
// several base URLs (the instances of one waiting room, or its gates),
// each is tried in turn until one answers. Safe for concurrent use.
type waitroomKeys struct {
	urls    []string
	hc      *http.Client
	timeout time.Duration
	now     func() time.Time

	fetch   sync.Mutex // one fetch at a time
	mu      sync.Mutex // guards what follows
	keys    jose.JSONWebKeySet
	have    bool
	fetched time.Time // when keys were fetched
	tried   time.Time // when a fetch was last tried
}

// newWaitroomKeys returns the key source of the waiting room at the
// comma-separated base URLs in list.
func newWaitroomKeys(list string, hc *http.Client, timeout time.Duration) (*waitroomKeys, error) {
	k := &waitroomKeys{hc: hc, timeout: timeout, now: time.Now}
	for u := range strings.SplitSeq(list, ",") {
		u = strings.TrimSpace(u)
		p, err := url.Parse(u)
		if u == "" || err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, stampede.InvalidField("waitroom", "must be the waiting room's http or https base URL (or several, comma-separated), got %q", u)
		}
		k.urls = append(k.urls, strings.TrimSuffix(u, "/")+"/.well-known/jwks.json")
	}
	return k, nil
}

// AdmissionKeys implements protocol.KeySource: the cached set, fetched
// first when there is none yet or it is older than jwksMaxAge (an old set
// is kept when the waiting room does not answer).
func (k *waitroomKeys) AdmissionKeys(ctx context.Context) (jose.JSONWebKeySet, error) {
	k.mu.Lock()
	keys, have, fresh := k.keys, k.have, k.now().Sub(k.fetched) < jwksMaxAge
	k.mu.Unlock()
	if have && fresh {
		return keys, nil
	}
	if _, err := k.refresh(ctx); err != nil && !have {
		return jose.JSONWebKeySet{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys, nil
}

// refresh fetches the set again unless a fetch was tried less than
// jwksRefetchEvery ago; it reports whether the set changed.
func (k *waitroomKeys) refresh(ctx context.Context) (bool, error) {
	k.fetch.Lock()
	defer k.fetch.Unlock()
	k.mu.Lock()
	if !k.tried.IsZero() && k.now().Sub(k.tried) < jwksRefetchEvery {
		k.mu.Unlock()
		return false, nil
	}
	k.tried = k.now()
	k.mu.Unlock()
	var errs []error
	for _, u := range k.urls {
		set, err := k.get(ctx, u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		changed := !sameKeyIDs(k.keys, set)
		k.keys, k.have, k.fetched = set, true, k.now()
		return changed, nil
	}
	return false, fmt.Errorf("the waiting room's keys: %w", errors.Join(errs...))
}

// get fetches one key set.
func (k *waitroomKeys) get(ctx context.Context, u string) (jose.JSONWebKeySet, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return jose.JSONWebKeySet{}, fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, jwksMaxBytes)).Decode(&set); err != nil {
		return jose.JSONWebKeySet{}, fmt.Errorf("GET %s: %w", u, err)
	}
	if len(set.Keys) == 0 {
		return jose.JSONWebKeySet{}, fmt.Errorf("GET %s: no keys", u)
	}
	return set, nil
}

// sameKeyIDs reports whether a and b hold the same key ids, in order.
func sameKeyIDs(a, b jose.JSONWebKeySet) bool {
	if len(a.Keys) != len(b.Keys) {
		return false
	}
	for i := range a.Keys {
		if a.Keys[i].KeyID != b.Keys[i].KeyID {
			return false
		}
	}
	return true
}

// refetchingVerifier is a protocol.AdmissionVerifier over waitroomKeys
// that fetches the key set again when a token's signature does not verify
// (a key the waiting room rotated in since), at most once per
// jwksRefetchEvery, and then verifies once more.
type refetchingVerifier struct {
	protocol.AdmissionVerifier
	keys *waitroomKeys
}

// Verify implements checkout.Admissions.
func (v refetchingVerifier) Verify(ctx context.Context, token, user string) (protocol.AdmissionClaims, error) {
	c, err := v.AdmissionVerifier.Verify(ctx, token, user)
	if err == nil || stampede.As(err).Message != protocol.MsgSignature {
		return c, err
	}
	if changed, rerr := v.keys.refresh(ctx); rerr != nil || !changed {
		return c, err
	}
	return v.AdmissionVerifier.Verify(ctx, token, user)
}

// waitroomChecker is a protocol.AdmissionChecker over the waiting room's
// online check (POST /v1/rooms/{room}/admissions/check with the checkout
// key), trying each instance in turn until one answers.
type waitroomChecker struct {
	cs []*waitroom.Client
}

// newWaitroomChecker returns the online checker of the waiting room at
// the comma-separated base URLs in list.
func newWaitroomChecker(list, checkoutKey string, hc *http.Client, timeout time.Duration) (*waitroomChecker, error) {
	var c waitroomChecker
	for u := range strings.SplitSeq(list, ",") {
		cfg := waitroom.DefaultClientConfig()
		cfg.BaseURL, cfg.CheckoutKey, cfg.Timeout, cfg.HTTPClient = strings.TrimSpace(u), checkoutKey, timeout, hc
		wc, err := waitroom.NewClient(cfg)
		if err != nil {
			if e := stampede.As(err); e.Field == "CheckoutKey" {
				return nil, stampede.InvalidField("checkout_key", "%s", e.Message)
			}
			return nil, stampede.InvalidField("waitroom", "%s", stampede.As(err).Message)
		}
		c.cs = append(c.cs, wc)
	}
	return &c, nil
}

// CheckAdmission implements protocol.AdmissionChecker. The waiting room's
// refusal of the token itself is Forbidden naming the admission header;
// any other failure (no answer, 5xx, a rejected checkout key) is an error
// the verifier answers with Unavailable.
func (c *waitroomChecker) CheckAdmission(ctx context.Context, room, token string) (protocol.AdmissionStatus, error) {
	var (
		a   waitroom.Admission
		err error
	)
	for _, wc := range c.cs {
		a, err = wc.Check(ctx, room, token)
		if err == nil || ctx.Err() != nil {
			break
		}
		if e, ok := errors.AsType[*stampede.Error](err); ok && e.Field == "admission_token" {
			return protocol.AdmissionStatus{}, &stampede.Error{Code: stampede.Forbidden, Field: protocol.HeaderAdmission,
				Message: "the waiting room does not accept the admission token"}
		}
	}
	if err != nil {
		return protocol.AdmissionStatus{}, fmt.Errorf("the waiting room's online check: %w", err)
	}
	return protocol.AdmissionStatus{Held: a.Held, Reason: a.Reason, User: a.UserID, ExpiresAt: a.ExpiresAt}, nil
}
