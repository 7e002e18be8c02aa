package sale

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/retry"
	"github.com/stampede-lab/stampede/waitroom"
)

// backoff is how a buyer or a bot waits before trying again after a
// failed request, as a browser's page script should: equal jitter
// (v/2 + U(0, v/2)) on a schedule from 250 ms doubling to 30 s, and never
// sooner than the answer's Retry-After.
var backoff = func() retry.Policy {
	p, err := retry.New(retry.Config{Name: retry.EqualJitter, MaxAttempts: math.MaxInt32,
		Base: 250 * time.Millisecond, Cap: 30 * time.Second, Multiplier: 2}, nil)
	if err != nil {
		panic(err)
	}
	return p
}()

// retryWait returns the wait before the next attempt of seq after a
// failed answer (err nil) or a failed request: the next wait of seq, or
// the answer's Retry-After when that is longer.
func retryWait(seq retry.Sequence, ans answer, err error) time.Duration {
	d, _ := seq.Next()
	if err == nil {
		d = max(d, retryAfter(ans.header))
	}
	return d
}

// retryAfter parses a Retry-After header: delay seconds or an HTTP date;
// 0 when absent or unreadable.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// pollAfter is how long a waiting buyer waits before its next poll: the
// ticket's poll_after_ms as the room answered it, 1 s when it gave none.
func pollAfter(t ticketJSON) time.Duration {
	if t.PollAfterMS <= 0 {
		return time.Second
	}
	return time.Duration(t.PollAfterMS) * time.Millisecond
}

// How a buyer's sale ended, as the buyer saw it. The final accounting
// replaces it with the checkout's record when the buyer reached an order.
const (
	endTicket       = "ticket"
	endDeclined     = "declined"
	endFailed       = "failed"
	endAbandoned    = "abandoned"
	endSoldOut      = "sold_out"
	endNotAdmitted  = "not_admitted"
	endUnaccounted  = "unaccounted"
	endOrderPending = "order_pending" // an order whose end the buyer did not see
)

// Outcomes lists the categories every buyer falls in, in report order.
var Outcomes = []string{endTicket, endDeclined, endFailed, endAbandoned, endSoldOut, endNotAdmitted}

// buyer is one simulated buyer.
type buyer struct {
	n       int
	arrival time.Duration
	ip      string
	// behaviour
	queuePatience time.Duration // 0: waits for ever
	leaveAtHold   bool
	reload        bool

	// what happened
	mu         sync.Mutex
	user       string
	joinedAt   time.Time
	admittedAt time.Time
	holdID     string
	orderID    string
	paymentID  string
	// purchasedAt is when the buyer first asked to pay, settledAt when it
	// saw its order paid or failed.
	purchasedAt time.Time
	settledAt   time.Time
	end         string
	why         string // the last failure of a failed buyer
	// holdAnswer is the status of the latest answer to a hold request
	// (and its problem code, if any) of a buyer still holding.
	holdAnswer string
}

func (b *buyer) finish(end string) {
	b.mu.Lock()
	b.end = end
	b.mu.Unlock()
}

// unfinished counts the buyers who have not ended yet by where they are:
// joining (no ticket yet), waiting (not admitted), holding (no hold),
// paying (a hold, no end); the buyers holding by their latest answer.
func (c *crowd) unfinished() string {
	var joining, waiting, holding, paying int
	answers := map[string]int{}
	for _, b := range c.buyers {
		b.mu.Lock()
		switch {
		case b.end != "":
		case b.user == "":
			joining++
		case b.admittedAt.IsZero():
			waiting++
		case b.holdID == "":
			holding++
			answers[cmp.Or(b.holdAnswer, "none yet")]++
		default:
			paying++
		}
		b.mu.Unlock()
	}
	out := fmt.Sprintf("joining %d, waiting %d, holding %d, paying %d", joining, waiting, holding, paying)
	if holding > 0 {
		var parts []string
		for a, n := range answers {
			parts = append(parts, fmt.Sprintf("%s ×%d", a, n))
		}
		slices.Sort(parts)
		out += " (holding, latest answer: " + strings.Join(parts, ", ") + ")"
	}
	return out
}

// crowd runs the buyers and the bots.
type crowd struct {
	r       *rig
	cfg     Config
	hc      *http.Client
	opened  time.Time
	buyers  []*buyer
	soldOut atomic.Bool
	closed  atomic.Bool
	// counters for the report
	joins, joinErrors, botJoins, botLimited, gateRetries, rejoins atomic.Int64
}

// newCrowd draws the buyers: SurgeShare of them within Surge, the rest
// over Tail.
func newCrowd(r *rig, cfg Config, seed uint64) *crowd {
	rng := rand.New(rand.NewPCG(seed, 0x5a1e))
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second}
	c := &crowd{r: r, cfg: cfg, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	for i := range cfg.Buyers {
		var at time.Duration
		if rng.Float64() < cfg.SurgeShare || cfg.Tail == 0 {
			at = time.Duration(rng.Float64() * float64(cfg.Surge))
		} else {
			at = cfg.Surge + time.Duration(rng.Float64()*float64(cfg.Tail))
		}
		b := &buyer{n: i, arrival: at, ip: buyerIP(i)}
		if rng.Float64() < cfg.QueueAbandon {
			b.queuePatience = time.Duration(1+rng.IntN(8)) * time.Second
		}
		b.leaveAtHold = rng.Float64() < cfg.CheckoutAbandon
		b.reload = rng.Float64() < cfg.Reload
		c.buyers = append(c.buyers, b)
	}
	return c
}

// answer is one HTTP answer.
type answer struct {
	status int
	body   []byte
	header http.Header
}

// do sends one request as the buyer from ip; bearer and cookie may be
// empty.
func (c *crowd) do(ctx context.Context, method, u, ip, bearer, cookie string, body any) (answer, error) {
	return c.doKeyed(ctx, method, u, ip, bearer, cookie, "", body)
}

// doKeyed is do with an Idempotency-Key (none when empty).
func (c *crowd) doKeyed(ctx context.Context, method, u, ip, bearer, cookie, key string, body any) (answer, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Forwarded-For", ip)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: "stampede_admission", Value: cookie})
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return answer{status: resp.StatusCode, body: data, header: resp.Header}, err
}

// gate returns a gate's base URL for attempt a of buyer b (a buyer sticks
// to one gate and moves on when it fails).
func (c *crowd) gate(b *buyer, a int) string {
	g := c.r.gateURLs
	return g[(b.n+a)%len(g)]
}

// sleep is lab.Sleep.
var sleep = lab.Sleep

// ticketJSON is the part of the waiting room's ticket a buyer reads.
type ticketJSON struct {
	UserID         string `json:"user_id"`
	State          string `json:"state"`
	PollAfterMS    int64  `json:"poll_after_ms"`
	TicketToken    string `json:"ticket_token"`
	AdmissionToken string `json:"admission_token"`
}

// maxRejoins is how many times a buyer the gate sends back to the room
// (its admission gone while the room is open) joins the queue again
// before giving up.
const maxRejoins = 3

// run plays buyer b from its arrival to the end of its sale: the queue,
// then the checkout, and the queue again (a new join at its end) when the
// gate answers that the buyer's admission is gone while the room is still
// open, as the waiting page sends a browser back to the room.
func (c *crowd) run(ctx context.Context, b *buyer) {
	if !sleep(ctx, time.Until(c.opened.Add(b.arrival))) {
		b.finish(endNotAdmitted)
		return
	}
	for rejoins := 0; ; rejoins++ {
		t, ok := c.queue(ctx, b)
		if !ok {
			return
		}
		if !c.checkout(ctx, b, t) {
			return
		}
		c.rejoins.Add(1)
		if rejoins == maxRejoins {
			b.mu.Lock()
			b.why = fmt.Sprintf("hold: sent back to the room %d times", rejoins+1)
			b.mu.Unlock()
			b.finish(endFailed)
			return
		}
	}
}

// queue joins the room with a new join (a new Idempotency-Key) and waits
// in line until admitted. It returns the admitted ticket, or false once
// the buyer has ended (finish called). The buyer's join time is its first
// join's, its admission time the latest.
func (c *crowd) queue(ctx context.Context, b *buyer) (ticketJSON, bool) {
	room := "/v1/rooms/" + c.r.room
	// Join, through any gate that answers, with one Idempotency-Key for
	// every try, as the waiting page does: a try whose answer was lost
	// (a timeout, a 503 after the store took the join) gets the same
	// ticket back instead of leaving a second one in line.
	var t ticketJSON
	joinSeq := backoff.Start()
	joinKey := waitroom.AnonymousID()
	for a := 0; ; a++ {
		if ctx.Err() != nil || c.closed.Load() {
			b.finish(endNotAdmitted)
			return t, false
		}
		ans, err := c.doKeyed(ctx, http.MethodPost, c.gate(b, a)+room+"/tickets", b.ip, "", "", joinKey, map[string]any{})
		c.joins.Add(1)
		if err == nil && (ans.status == http.StatusCreated || ans.status == http.StatusOK) && json.Unmarshal(ans.body, &t) == nil && t.TicketToken != "" {
			break
		}
		c.joinErrors.Add(1)
		sleep(ctx, retryWait(joinSeq, ans, err))
	}
	b.mu.Lock()
	b.user, b.admittedAt = t.UserID, time.Time{}
	if b.joinedAt.IsZero() {
		b.joinedAt = time.Now()
	}
	joinedAt := b.joinedAt
	b.mu.Unlock()

	// Wait in the queue.
	reloaded := false
	pollSeq := backoff.Start()
	wait := pollAfter(t)
	for a, g := 0, 0; t.State != "admitted"; a++ {
		if waitroom.State(t.State).Done() {
			// Closed, left, expired, released, or abandoned: a buyer whose
			// polls failed for longer than the room's abandon_after (503s
			// while the store restarted, then backoff) lost its place.
			b.finish(endNotAdmitted)
			return t, false
		}
		if b.queuePatience > 0 && time.Since(joinedAt) > b.queuePatience {
			b.finish(endAbandoned) // walks away: stops polling
			return t, false
		}
		if !sleep(ctx, wait) {
			b.finish(endNotAdmitted)
			return t, false
		}
		var ans answer
		var err error
		if b.reload && !reloaded && a == 2 {
			// Reloads the page: joins again with its ticket (keeps its place).
			reloaded = true
			ans, err = c.do(ctx, http.MethodPost, c.gate(b, g)+room+"/tickets", b.ip, t.TicketToken, "", map[string]any{})
		} else {
			ans, err = c.do(ctx, http.MethodGet, c.gate(b, g)+room+"/tickets/"+t.UserID, b.ip, t.TicketToken, "", nil)
		}
		switch {
		case err != nil:
		case ans.status == http.StatusNotFound, ans.status == http.StatusGone,
			// The room no longer knows the ticket, or refuses its token
			// (expired, or another join's): no retry of the poll can succeed.
			ans.status == http.StatusUnauthorized, ans.status == http.StatusForbidden:
			b.mu.Lock()
			b.why = fmt.Sprintf("queue: %d %.200s", ans.status, ans.body)
			b.mu.Unlock()
			b.finish(endNotAdmitted)
			return t, false
		}
		if err != nil || ans.status/100 != 2 {
			if err != nil || ans.status != http.StatusTooManyRequests {
				g++ // try another gate
			}
			c.gateRetries.Add(1)
			wait = retryWait(pollSeq, ans, err)
			continue
		}
		pollSeq = backoff.Start()
		var nt ticketJSON
		if json.Unmarshal(ans.body, &nt) == nil && nt.State != "" {
			tok := t.TicketToken
			t = nt
			if t.TicketToken == "" {
				t.TicketToken = tok
			}
		}
		wait = pollAfter(t)
	}
	b.mu.Lock()
	b.admittedAt = time.Now()
	b.mu.Unlock()
	return t, true
}

// sentBack reports the gate's answer that the buyer's admission is gone:
// 503 naming the room to join.
func sentBack(ans answer) bool {
	return ans.status == http.StatusServiceUnavailable && strings.Contains(string(ans.body), `"join"`)
}

// holdJSON and orderJSON are the parts of the checkout's answers a buyer
// reads.
type holdJSON struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

type orderJSON struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	PaymentID     string `json:"payment_id"`
	PaymentStatus string `json:"payment_status"`
}

// checkoutPatience is how long an admitted buyer keeps trying to hold a
// seat, and then to see its order end, before giving up as a person
// would: a buyer whose admission was lost (the gate answers "the checkout
// is full") backs off up to 30 s a try, and without a bound on time kept
// the sale running until MaxSale. An order the buyer stopped watching is
// still accounted by the checkout's final record.
const checkoutPatience = 60 * time.Second

// checkout plays an admitted buyer: hold one seat, pay, wait for the end.
// It returns true, the buyer not ended, when the gate sends the buyer
// back to the room (the admission is gone) while the room is open.
func (c *crowd) checkout(ctx context.Context, b *buyer, t ticketJSON) (rejoin bool) {
	adm := t.AdmissionToken
	g := 0
	send := func(method, path string, body any) (answer, error) {
		ans, err := c.do(ctx, method, c.gate(b, g)+path, b.ip, "", adm, body)
		if err != nil || ans.status >= 500 && ans.status != http.StatusServiceUnavailable {
			g++
		}
		if err == nil {
			for _, ck := range (&http.Response{Header: ans.header}).Cookies() {
				if ck.Name == "stampede_admission" && ck.Value != "" {
					adm = ck.Value // the gate re-signed the admission
				}
			}
		}
		return ans, err
	}
	leave := func() {
		// Done with the room: give the slot back.
		_, _ = c.do(ctx, http.MethodDelete, c.gate(b, g)+"/v1/rooms/"+c.r.room+"/tickets/"+t.UserID, b.ip, t.TicketToken, "", nil)
	}
	var h holdJSON
	last := ""
	holdSeq := backoff.Start()
	holdFrom := time.Now()
	allHeld := false // the last answer: every seat left is on hold
	for a := 0; ; a++ {
		if a >= 40 || time.Since(holdFrom) > checkoutPatience || ctx.Err() != nil {
			if allHeld {
				c.soldOut.Store(true)
				b.finish(endSoldOut)
				leave()
				return false
			}
			b.mu.Lock()
			b.why = "hold: " + last
			b.mu.Unlock()
			b.finish(endFailed)
			leave()
			return false
		}
		allHeld = false
		ans, err := send(http.MethodPost, "/v1/events/"+c.r.event+"/holds", map[string]any{"seats": 1})
		answered := "error"
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %.200s", ans.status, ans.body)
			var p struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal(ans.body, &p)
			answered = strings.TrimSpace(fmt.Sprintf("%d %s", ans.status, p.Code))
		}
		b.mu.Lock()
		b.holdAnswer = answered
		b.mu.Unlock()
		if err == nil && ans.status == http.StatusCreated && json.Unmarshal(ans.body, &h) == nil && h.ID != "" {
			break
		}
		if err == nil && sentBack(ans) {
			// The gate sends the buyer back to the room (the admission is
			// gone). If the room closed sold out, the page would say so;
			// else the buyer joins again.
			if !c.closed.Load() {
				return true
			}
			c.soldOut.Store(true)
			b.finish(endSoldOut)
			leave()
			return false
		}
		if err == nil && ans.status == http.StatusConflict && strings.Contains(string(ans.body), "seats_left") {
			var so struct {
				Held int `json:"held"`
			}
			if json.Unmarshal(ans.body, &so) == nil && so.Held > 0 {
				// Every seat left is on hold: some may come back when
				// their orders fail; try again while patience lasts.
				allHeld = true
				sleep(ctx, retryWait(holdSeq, ans, err))
				continue
			}
			c.soldOut.Store(true)
			b.finish(endSoldOut)
			leave()
			return false
		}
		sleep(ctx, retryWait(holdSeq, ans, err))
	}
	b.mu.Lock()
	b.holdID = h.ID
	b.mu.Unlock()
	if b.leaveAtHold {
		b.finish(endAbandoned) // walks away with the seat on hold
		return false
	}
	var o orderJSON
	last = ""
	orderFrom := time.Now()
	for a := 0; ; a++ {
		if a >= 30 || time.Since(orderFrom) > checkoutPatience || ctx.Err() != nil {
			if o.ID == "" {
				// No purchase was ever answered: the buyer saw no order. If
				// the checkout made one (a lost answer), the final
				// accounting finds it by the hold and takes its status.
				b.mu.Lock()
				b.why = "purchase: " + last
				b.mu.Unlock()
				b.finish(endFailed)
				return false
			}
			b.finish(endOrderPending)
			return false
		}
		var ans answer
		var err error
		if o.ID == "" {
			if a == 0 {
				b.mu.Lock()
				b.purchasedAt = time.Now()
				b.mu.Unlock()
			}
			ans, err = send(http.MethodPost, "/v1/holds/"+h.ID+"/purchase", nil)
		} else {
			ans, err = send(http.MethodGet, "/v1/orders/"+o.ID, nil)
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %.200s", ans.status, ans.body)
		}
		if err == nil && (ans.status == http.StatusOK || ans.status == http.StatusAccepted) {
			var no orderJSON
			if json.Unmarshal(ans.body, &no) == nil && no.ID != "" {
				o = no
				b.mu.Lock()
				b.orderID, b.paymentID = o.ID, o.PaymentID
				if o.Status == "paid" || o.Status == "failed" {
					b.settledAt = time.Now()
				}
				b.mu.Unlock()
			}
			switch o.Status {
			case "paid":
				b.finish(endTicket)
				return false
			case "failed":
				if o.PaymentStatus == "DECLINED" {
					b.finish(endDeclined)
				} else {
					b.finish(endFailed)
				}
				return false
			}
		}
		if err == nil && sentBack(ans) {
			// The admission is gone: the gate sends the buyer to the
			// room, and the page cannot show the order any more. The
			// hold is the old admission's user's, so a new join would not
			// get it back; the final accounting finds the order, if any,
			// by the hold.
			b.mu.Lock()
			b.why = map[bool]string{true: "purchase: ", false: "order: "}[o.ID == ""] + last
			b.mu.Unlock()
			if o.ID == "" {
				b.finish(endFailed)
			} else {
				b.finish(endOrderPending)
			}
			return false
		}
		d := time.Second
		if err == nil {
			d = max(d, retryAfter(ans.header))
		}
		// Never past the patience: a Retry-After of minutes (the gate's
		// estimate of the queue's wait) kept buyers polling long after.
		sleep(ctx, max(time.Second, min(d, checkoutPatience-time.Since(orderFrom))))
	}
}

// bot hammers join from one of a few addresses until ctx ends, at
// BotRate joins a second, one at a time; an answer of 429 or 503 makes it
// back off as a buyer does (the schedule of backoff, never sooner than
// Retry-After), a success or any other answer brings it back to its rate.
func (c *crowd) bot(ctx context.Context, i int) {
	interval := time.Duration(float64(time.Second) / c.cfg.BotRate)
	ip := fmt.Sprintf("192.0.2.%d", 1+i%4)
	seq := backoff.Start()
	for n := 0; ; n++ {
		start := time.Now()
		ans, err := c.do(ctx, http.MethodPost, c.r.gateURLs[n%len(c.r.gateURLs)]+"/v1/rooms/"+c.r.room+"/tickets", ip, "", "", map[string]any{})
		if ctx.Err() != nil {
			return
		}
		c.botJoins.Add(1)
		wait := interval - time.Since(start)
		switch {
		case err == nil && ans.status == http.StatusTooManyRequests:
			c.botLimited.Add(1)
			wait = retryWait(seq, ans, nil)
		case err == nil && ans.status == http.StatusServiceUnavailable:
			wait = retryWait(seq, ans, nil)
		default:
			seq = backoff.Start()
		}
		if !sleep(ctx, max(wait, 0)) {
			return
		}
	}
}

// buyerIP is buyer i's address: each buyer of a crowd under 65,536 in a
// network prefix (/24) of its own, as a crowd from many networks is, so
// that the waiting room's per-prefix join limit sees what it would in a
// real sale.
func buyerIP(i int) string { return fmt.Sprintf("10.%d.%d.%d", i&255, i>>8&255, i>>16&255) }
