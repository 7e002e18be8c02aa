package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/stampede-lab/stampede"
)

// FailureThrottle limits guesses of a secret (an admin token, a console
// login): each client prefix (ClientPrefix) may fail at most Max times in
// Window; past that it is refused, right or wrong, until the window
// ends. Success does not reset the count, so that a guesser cannot mix
// in a right answer it already knows. Only failing prefixes are
// remembered, and expired ones are dropped whenever the table reaches
// maxThrottled.
type FailureThrottle struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu sync.Mutex
	m  map[netip.Prefix]*failures
}

// failures counts one prefix's failures since start.
type failures struct {
	start time.Time
	n     int
}

// maxThrottled bounds the prefixes a FailureThrottle remembers.
const maxThrottled = 100_000

// NewFailureThrottle allows max failures per client prefix per window
// (now nil: time.Now).
func NewFailureThrottle(max int, window time.Duration, now func() time.Time) *FailureThrottle {
	if now == nil {
		now = time.Now
	}
	return &FailureThrottle{max: max, window: window, now: now, m: map[netip.Prefix]*failures{}}
}

// ClientPrefix is the network a request comes from, as throttles count
// it: the /32 of an IPv4 address, the /64 of an IPv6 one (one host
// usually holds a whole /64).
func ClientPrefix(r *http.Request) netip.Prefix {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// Check answers a RateLimited error (with Retry-After) when r's prefix
// has used up its failures, else nil. what names the secret.
func (t *FailureThrottle) Check(r *http.Request, what string) error {
	p := ClientPrefix(r)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.m[p]
	if f == nil || now.Sub(f.start) >= t.window {
		return nil
	}
	if f.n < t.max {
		return nil
	}
	return &stampede.Error{Code: stampede.RateLimited, RetryAfter: f.start.Add(t.window).Sub(now).Round(time.Second) + time.Second,
		Message: "too many wrong " + what + " attempts from this address; wait"}
}

// Fail counts a wrong guess from r's prefix.
func (t *FailureThrottle) Fail(r *http.Request) {
	p := ClientPrefix(r)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.m[p]
	if f == nil || now.Sub(f.start) >= t.window {
		if f == nil && len(t.m) >= maxThrottled {
			for k, v := range t.m {
				if now.Sub(v.start) >= t.window {
					delete(t.m, k)
				}
			}
		}
		f = &failures{start: now}
		t.m[p] = f
	}
	f.n++
}
