package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/protocol"
)

// JWKSPath is where a waiting room serves its admission keys.
const JWKSPath = "/.well-known/jwks.json"

// KeysConfig configures Keys.
type KeysConfig struct {
	// BaseURL is the waiting room's address, such as
	// "https://queue.example.com".
	BaseURL string
	// Others are more addresses of the same waiting room (its other
	// instances, or its gates, which serve the same keys): a fetch tries
	// BaseURL, then each of them in turn, until one answers.
	Others []string
	// Timeout bounds every fetch from one address.
	Timeout time.Duration
	// MaxAge is how long a fetched key set is used before it is fetched
	// again.
	MaxAge time.Duration
	// MinRefresh bounds the fetches a token with an unknown kid causes:
	// at most one per MinRefresh, so that forged kids cannot make Keys
	// hammer the waiting room.
	MinRefresh time.Duration
	// HTTPClient sends the requests; nil means a new http.Client.
	HTTPClient *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultKeysConfig returns a two-second timeout, five-minute caching
// (the waiting room's Cache-Control) and at most one refresh for an
// unknown kid every ten seconds; BaseURL must be set.
func DefaultKeysConfig() KeysConfig {
	return KeysConfig{Timeout: 2 * time.Second, MaxAge: 5 * time.Minute, MinRefresh: 10 * time.Second}
}

// Validate reports every unusable field by its snake_case name.
func (c KeysConfig) Validate() error {
	var f stampede.Fields
	for _, b := range append([]string{c.BaseURL}, c.Others...) {
		if u, err := url.Parse(b); b == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			f.Add("base_url", "must be an http or https URL, got %q", b)
		}
	}
	if c.Timeout <= 0 {
		f.Add("timeout", "must be positive, got %s", c.Timeout)
	}
	if c.MaxAge <= 0 {
		f.Add("max_age", "must be positive, got %s", c.MaxAge)
	}
	if c.MinRefresh < 0 {
		f.Add("min_refresh", "must not be negative, got %s", c.MinRefresh)
	}
	return f.Err()
}

// Keys is a protocol.KeySource (and protocol.KeyRefresher) over a waiting
// room's JWKS: fetched on first use, cached for MaxAge, and fetched again
// for a token whose kid it does not hold, at most once per MinRefresh.
// When a fetch fails, a cached set is still used. Safe for concurrent use.
type Keys struct {
	cfg  KeysConfig
	urls []string
	hc   *http.Client

	mu      sync.Mutex
	keys    jose.JSONWebKeySet
	fetched time.Time // zero: never
	tried   time.Time // the last refresh for an unknown kid
}

var _ protocol.KeyRefresher = (*Keys)(nil)

// NewKeys returns Keys for cfg. It fetches nothing yet.
func NewKeys(cfg KeysConfig) (*Keys, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	k := &Keys{cfg: cfg, hc: hc}
	for _, b := range append([]string{cfg.BaseURL}, cfg.Others...) {
		k.urls = append(k.urls, strings.TrimSuffix(b, "/")+JWKSPath)
	}
	return k, nil
}

// AdmissionKeys returns the cached key set, fetching it when it is
// missing or older than MaxAge.
func (k *Keys) AdmissionKeys(ctx context.Context) (jose.JSONWebKeySet, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.fetched.IsZero() && k.cfg.Now().Sub(k.fetched) < k.cfg.MaxAge {
		return k.keys, nil
	}
	return k.fetchLocked(ctx)
}

// RefreshAdmissionKeys returns the key set, fetched again when it lacks
// kid and no refresh for an unknown kid happened within MinRefresh.
func (k *Keys) RefreshAdmissionKeys(ctx context.Context, kid string) (jose.JSONWebKeySet, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.cfg.Now()
	if len(k.keys.Key(kid)) > 0 || (!k.tried.IsZero() && now.Sub(k.tried) < k.cfg.MinRefresh) {
		return k.keys, nil
	}
	k.tried = now
	return k.fetchLocked(ctx)
}

// fetchLocked gets the key set; on failure it keeps (and returns) a
// cached one if there is one. k.mu is held.
func (k *Keys) fetchLocked(ctx context.Context) (jose.JSONWebKeySet, error) {
	keys, err := k.get(ctx)
	if err != nil {
		if !k.fetched.IsZero() {
			return k.keys, nil
		}
		return jose.JSONWebKeySet{}, err
	}
	k.keys, k.fetched = keys, k.cfg.Now()
	return keys, nil
}

// get fetches the JWKS from the first address that answers.
func (k *Keys) get(ctx context.Context) (jose.JSONWebKeySet, error) {
	var err error
	for _, u := range k.urls {
		var set jose.JSONWebKeySet
		if set, err = k.getFrom(ctx, u); err == nil || ctx.Err() != nil {
			return set, err
		}
	}
	return jose.JSONWebKeySet{}, err
}

// getFrom fetches the JWKS at url once.
func (k *Keys) getFrom(ctx context.Context, url string) (jose.JSONWebKeySet, error) {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.hc.Do(req)
	if err != nil {
		return jose.JSONWebKeySet{}, fmt.Errorf("waitroom client: GET %s: %w", JWKSPath, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return jose.JSONWebKeySet{}, httpapi.ReadProblem(resp)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return jose.JSONWebKeySet{}, fmt.Errorf("waitroom client: GET %s: decoding the key set: %w", JWKSPath, err)
	}
	return set, nil
}
