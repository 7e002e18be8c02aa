package api

import (
	"container/list"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/waitroom"
)

// JoinLimitConfig configures the per-client limit on joins: a token bucket
// per client address, and a larger one per network prefix (an IPv4 /24,
// an IPv6 /48), kept in memory by each instance. The prefix bucket bounds
// a crowd that rotates addresses within its network, as one host can.
type JoinLimitConfig struct {
	// Rate is the joins per second a client address earns; 0 turns the
	// limit off (the prefix limit too).
	Rate float64
	// Burst is the most joins a client address may make at once (the
	// bucket's size); at least 1 when Rate is set.
	Burst int
	// PrefixRate is the joins per second all the addresses of one prefix
	// (IPv4 /24, IPv6 /48) earn together; 0 turns the prefix limit off.
	PrefixRate float64
	// PrefixBurst is the prefix bucket's size; at least 1 when PrefixRate
	// is set.
	PrefixBurst int
	// MaxClients bounds the buckets kept: past it the least recently seen
	// client's bucket is dropped (that client starts again with a full
	// bucket). It bounds memory whatever addresses arrive.
	MaxClients int
	// TrustedProxies are the networks whose connections may name the
	// client in X-Forwarded-For. From any other peer the header is
	// ignored and the peer's own address is the client.
	TrustedProxies []netip.Prefix
}

// DefaultJoinLimitConfig allows 1 join per second per address with a burst
// of 10, and 20 per second per prefix with a burst of 200, over at most
// 100,000 addresses (and as many prefixes), trusting no proxy.
func DefaultJoinLimitConfig() JoinLimitConfig {
	return JoinLimitConfig{Rate: 1, Burst: 10, PrefixRate: 20, PrefixBurst: 200, MaxClients: 100_000}
}

// Validate reports every unusable field by its snake_case name, the
// words of its `serve waitroom` flag (join_rate, join_burst,
// join_clients, trusted_proxy).
func (c JoinLimitConfig) Validate() error {
	var f stampede.Fields
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		f.Add("join_rate", "must be 0 (off) or a positive number of joins per second, got %v", c.Rate)
	}
	if c.Rate > 0 && c.Burst < 1 {
		f.Add("join_burst", "must be at least 1 when the rate is set, got %d", c.Burst)
	}
	if c.PrefixRate < 0 || math.IsNaN(c.PrefixRate) || math.IsInf(c.PrefixRate, 0) {
		f.Add("join_prefix_rate", "must be 0 (off) or a positive number of joins per second, got %v", c.PrefixRate)
	}
	if c.PrefixRate > 0 && c.PrefixBurst < 1 {
		f.Add("join_prefix_burst", "must be at least 1 when the prefix rate is set, got %d", c.PrefixBurst)
	}
	if c.Rate > 0 && c.MaxClients < 1 {
		f.Add("join_clients", "must be at least 1 when the rate is set, got %d", c.MaxClients)
	}
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			f.Add("trusted_proxy", "entry %d is not a valid prefix", i)
		}
	}
	return f.Err()
}

// ParseTrustedProxies parses a comma-separated list of CIDR prefixes (a
// bare address counts as a /32 or /128), as given to --trusted-proxy.
func ParseTrustedProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for part := range strings.SplitSeq(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "/") {
			a, err := netip.ParseAddr(part)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a CIDR prefix nor an address", part)
			}
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR prefix: %v", part, err)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// joinLimiter is a token bucket per key (a client address or a prefix)
// with LRU eviction.
type joinLimiter struct {
	rate       float64
	burst      int
	maxClients int
	now        func() time.Time

	mu      sync.Mutex
	buckets map[netip.Addr]*list.Element // of *bucket
	lru     list.List                    // front: most recently seen
}

// bucket is one client's tokens as of last.
type bucket struct {
	addr   netip.Addr
	tokens float64
	last   time.Time
}

// newJoinLimiter returns a limiter of rate and burst (already validated)
// over at most maxClients keys, reading the time from now; nil when rate
// is 0.
func newJoinLimiter(rate float64, burst, maxClients int, now func() time.Time) *joinLimiter {
	if rate <= 0 {
		return nil
	}
	return &joinLimiter{rate: rate, burst: burst, maxClients: maxClients, now: now, buckets: map[netip.Addr]*list.Element{}}
}

// allow takes one token from addr's bucket. When the bucket is empty it
// returns false and how long until a token is there.
func (l *joinLimiter) allow(addr netip.Addr) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var b *bucket
	if el, ok := l.buckets[addr]; ok {
		l.lru.MoveToFront(el)
		b = el.Value.(*bucket)
		if dt := now.Sub(b.last).Seconds(); dt > 0 {
			b.tokens = min(float64(l.burst), b.tokens+dt*l.rate)
		}
		b.last = now
	} else {
		for len(l.buckets) >= l.maxClients {
			old := l.lru.Back()
			delete(l.buckets, old.Value.(*bucket).addr)
			l.lru.Remove(old)
		}
		b = &bucket{addr: addr, tokens: float64(l.burst), last: now}
		l.buckets[addr] = l.lru.PushFront(b)
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, wait
}

// clientKey is the bucket key of a client address: IPv4 addresses as they
// are, IPv6 addresses by their /64 (one subscriber usually holds a whole
// /64, so single addresses would be free to rotate).
func clientKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// prefixKey is the prefix bucket's key of a client address: its IPv4 /24
// or its IPv6 /48 (a site's usual allocation).
func prefixKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	bits := 24
	if a.Is6() {
		bits = 48
	}
	p, _ := a.Prefix(bits)
	return p.Addr()
}

// trusted reports whether a is in one of prefixes.
func trusted(prefixes []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr returns the address of the client that sent r: the direct
// peer, unless the peer is a trusted proxy, in which case the
// X-Forwarded-For chain is read from the right and the first address that
// is not a trusted proxy is the client (the left-most, if all are
// trusted). An unparsable entry stops the walk at the last good address.
func clientAddr(r *http.Request, proxies []netip.Prefix) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	peer = peer.Unmap().WithZone("")
	if len(proxies) == 0 || !trusted(proxies, peer) {
		return peer, true
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		client = a.Unmap().WithZone("")
		if !trusted(proxies, client) {
			break
		}
	}
	return client, true
}

// limitJoin answers a rate_limited error when the client of r has used up
// its joins.
func (h *handler) limitJoin(r *http.Request) error {
	if h.limiter == nil {
		return nil
	}
	addr, ok := clientAddr(r, h.cfg.JoinLimit.TrustedProxies)
	if !ok {
		return nil // not an IP peer (a test's or a Unix socket's): nothing to key on
	}
	what := "your address"
	allowed, wait := h.limiter.allow(clientKey(addr))
	if allowed {
		// The address's own token is spent even if its network's bucket
		// refuses: a rotating crowd pays on both.
		if allowed, wait = h.prefixLimiter.allow(prefixKey(addr)); allowed {
			return nil
		}
		what = "your network"
	}
	wait = max(time.Second, time.Duration(math.Ceil(wait.Seconds()))*time.Second)
	return &waitroom.Error{Code: waitroom.CodeRateLimited, RetryAfter: wait,
		Message: fmt.Sprintf("too many joins from %s; try again in %d s", what, int(wait.Seconds()))}
}
