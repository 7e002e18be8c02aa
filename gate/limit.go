package gate

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// visitorLimits holds one token bucket per admission: VisitorRate
// requests a second, VisitorBurst at once. A bucket idle long enough to be
// full again is the same as a new one, so it is dropped (every sweepEvery,
// and once the map holds maxEntries); past that, arbitrary ones are
// (their visitors start again with a full bucket).
type visitorLimits struct {
	rate  rate.Limit
	burst int
	// refill is how long an empty bucket takes to fill.
	refill time.Duration

	mu      sync.Mutex
	buckets map[admissionKey]*bucket
	// sweptAt is when the idle buckets were last dropped (at most
	// sweepEvery apart).
	sweptAt time.Time
}

// bucket is one admission's limiter and when it was last used.
type bucket struct {
	lim  *rate.Limiter
	last time.Time
}

func newVisitorLimits(perSecond float64, burst int) *visitorLimits {
	if perSecond <= 0 {
		return nil
	}
	return &visitorLimits{rate: rate.Limit(perSecond), burst: burst,
		refill: time.Duration(float64(burst) / perSecond * float64(time.Second)), buckets: map[admissionKey]*bucket{}}
}

// allow takes one token from k's bucket at now, or reports how long until
// one is there.
func (v *visitorLimits) allow(k admissionKey, now time.Time) (bool, time.Duration) {
	if v == nil {
		return true, 0
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	b := v.buckets[k]
	if b == nil {
		if len(v.buckets) >= maxEntries || now.Sub(v.sweptAt) >= sweepEvery {
			v.evict(now)
		}
		b = &bucket{lim: rate.NewLimiter(v.rate, v.burst)}
		v.buckets[k] = b
	}
	b.last = now
	if b.lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - b.lim.TokensAt(now)
	return false, time.Duration(missing / float64(v.rate) * float64(time.Second))
}

// evict drops the buckets idle long enough to be full, then, past
// maxEntries, arbitrary ones down to 90% of it; v.mu is held.
func (v *visitorLimits) evict(now time.Time) {
	v.sweptAt = now
	for k, b := range v.buckets {
		if now.Sub(b.last) >= v.refill {
			delete(v.buckets, k)
		}
	}
	for k := range v.buckets {
		if len(v.buckets) < maxEntries*9/10 {
			break
		}
		delete(v.buckets, k)
	}
}

// tooMany answers a request over its visitor's limit, without touching
// the store: 429 with Retry-After; problem+json for an API client or a
// sub-resource, a short page that reloads itself for a page.
func tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	secs := int(max(1, math.Ceil(wait.Seconds())))
	if wantsJSON(r) || !isNavigation(r) || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		httpapi.WriteProblem(w, &stampede.Error{Code: stampede.RateLimited, RetryAfter: time.Duration(secs) * time.Second,
			Message: "too many requests from this visitor: slow down"}, "stampede-gate")
		return
	}
	h := w.Header()
	h.Set("Retry-After", strconv.Itoa(secs))
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	if r.Method == http.MethodHead {
		return
	}
	fmt.Fprintf(w, `<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="%d">`+
		`<meta name="viewport" content="width=device-width, initial-scale=1"><title>One moment</title></head>`+
		`<body><p>Too many requests at once. This page reloads in %d s; your place is kept.</p>`+
		`<p><a href="">Reload now</a></p></body></html>`+"\n", secs, secs)
}
