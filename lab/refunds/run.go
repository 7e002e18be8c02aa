package refunds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-lab/stampede/institution"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/freeport"
	"github.com/stampede-lab/stampede/internal/tcpproxy"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

const (
	// adminToken authorizes the lab's calls to its own simulator, which
	// listens on 127.0.0.1 only and lives for one run.
	adminToken = "refunds-lab-admin-token"
	// setupConcurrency bounds the payments created at once before the
	// stampede.
	setupConcurrency = 16
	// setupTries bounds the attempts to pay one basket before the
	// stampede.
	setupTries = 5
	// maxExamples bounds the IDs and error texts kept per run.
	maxExamples = 5
	// clientDeadline bounds one merchant client's retries of its refund.
	clientDeadline = 60 * time.Second
)

// refundConnector is what the payment service needs of a connector here.
type refundConnector interface {
	pay.Connector
	pay.Refunder
}

// NaiveRefunder wraps a connector with the naive retry the lab compares
// against: a refund whose outcome is unknown (a timeout, a lost answer)
// is sent again at once under a new key, with a timeout of its own. It
// lives in the lab only: no production package can be configured into it.
type NaiveRefunder struct {
	refundConnector
	// Timeout bounds the re-sent call.
	Timeout time.Duration
	// Resent counts the re-sends.
	Resent *atomic.Int64
}

// Refund implements pay.Refunder: one call, and one more under a new key
// when the first one's outcome is unknown.
func (n NaiveRefunder) Refund(ctx context.Context, req pay.RefundRequest) (pay.RefundVerdict, error) {
	v, err := n.refundConnector.Refund(ctx, req)
	if err == nil || errors.Is(err, pay.ErrNotSent) || errors.Is(err, pay.ErrRejected) {
		return v, err
	}
	req.ExternalKey = pay.NewID()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.Timeout)
	defer cancel()
	n.Resent.Add(1)
	return n.refundConnector.Refund(rctx, req)
}

// RunDetail is the per-run data kept in the JSON beside the metrics.
type RunDetail struct {
	// StartSignal is when the start channel was closed (UTC).
	StartSignal time.Time `json:"start_signal"`
	// Answers counts the merchant clients' final answers by HTTP status
	// ("transport": none); Attempts counts every request they sent.
	Answers  map[string]int `json:"answers"`
	Attempts int            `json:"attempts"`
	// AnswerErrors holds the first few errors the clients saw.
	AnswerErrors []string `json:"answer_errors,omitempty"`
	// KillAtMS is when pay was killed after the start signal, KillTookMS
	// how long closing it took, RestartTookMS how long its next life took
	// to start, DownMS the whole outage (pay-kill only).
	KillAtMS      float64 `json:"kill_at_ms,omitempty"`
	KillTookMS    float64 `json:"kill_took_ms,omitempty"`
	RestartTookMS float64 `json:"restart_took_ms,omitempty"`
	DownMS        float64 `json:"down_ms,omitempty"`
	// MerchantReissued counts the refunds the merchant asked for again,
	// under a new key, after the first one settled FAILED.
	MerchantReissued int `json:"merchant_reissued"`
	// HangMS is when the hang ended and StatusDownMS when the status API
	// came back, after the start signal.
	HangMS       float64 `json:"hang_ended_ms,omitempty"`
	StatusDownMS float64 `json:"status_api_back_ms,omitempty"`
	// RefundArrivals counts the refund requests that reached the
	// institution per second from the start signal.
	RefundArrivals []int `json:"refund_arrivals_per_1s"`
	// PayStatuses counts pay's refunds by status at the end.
	PayStatuses map[string]int `json:"pay_refund_statuses"`
	// SettleMS is how long after the faults pay's refunds took to settle.
	SettleMS float64 `json:"settle_ms"`
	// Examples names a few payments behind the non-zero counts.
	Examples []string `json:"examples,omitempty"`
	// InstitutionRefunds is the number of refund records in the
	// institution's ledger, DoubleRefundedKeys its count of keys refunded
	// twice.
	InstitutionRefunds int `json:"institution_refunds"`
	DoubleRefundedKeys int `json:"double_refunded_keys"`
}

// Run implements lab.Experiment: one condition, one stampede.
func (e *Experiment) Run(ctx context.Context, cond lab.Condition, repeat int) (lab.RunResult, error) {
	naive := fmt.Sprint(cond.Values["retry"]) == Naive
	r, err := e.start(naive)
	if err != nil {
		return lab.RunResult{}, err
	}
	defer r.close()
	ids, err := e.setup(ctx, r)
	if err != nil {
		return lab.RunResult{}, err
	}
	d := RunDetail{Answers: map[string]int{}}
	b := institution.DefaultBehavior()
	b.Mode, b.Idempotent, b.StatusAPI = institution.ModeNormal, true, institution.StatusAPIUp
	if e.cfg.has(FaultHang) {
		b.Mode, b.HangMS = institution.ModeHangAfter, e.cfg.Hang.Milliseconds()
	}
	if e.cfg.has(FaultStatusDown) {
		b.StatusAPI = institution.StatusAPIDown
	}
	if _, err := r.admin.SetBehavior(ctx, b); err != nil {
		return lab.RunResult{}, fmt.Errorf("refunds: set the institution's behaviour: %w", err)
	}
	answers, start, faultsEnd, err := e.stampede(ctx, r, ids, &d)
	if err != nil {
		return lab.RunResult{}, err
	}
	d.StartSignal = start.UTC()
	return e.measure(ctx, r, ids, answers, faultsEnd, d, repeat)
}

// rig is one run's system under test.
type rig struct {
	inst    *instapi.Server
	instSrv *server
	instURL string
	admin   *instclient.Client
	// payAddr is the payment API's host:port, the same across a kill.
	payAddr string
	dbPath  string
	dir     string
	naive   bool
	timeout time.Duration
	// reconcileEvery is pay's ReconcileEvery.
	reconcileEvery time.Duration
	resent         atomic.Int64
	// merchant and apiKey are the run's merchant and its API key.
	merchant, apiKey string

	mu  sync.Mutex
	pay *payInstance // nil while killed
}

// payInstance is one life of the payment service.
type payInstance struct {
	store  *sqlite.Store
	svc    *pay.Service
	srv    *server
	proxy  *tcpproxy.Proxy
	tr     *http.Transport
	cancel context.CancelFunc
	done   chan struct{}
}

// start builds a fresh rig: the institution, the database with the run's
// merchant, and the payment service's first life.
func (e *Experiment) start(naive bool) (_ *rig, err error) {
	c := e.cfg
	r := &rig{naive: naive, timeout: c.Timeout, reconcileEvery: c.ReconcileEvery}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	icfg := instapi.DefaultConfig()
	icfg.AdminToken, icfg.NotFoundWindow, icfg.Logger = adminToken, c.NotFoundWindow, slog.New(slog.DiscardHandler)
	icfg.MaxHung = max(icfg.MaxHung, 3*c.Payments)
	icfg.MaxArrivals = max(icfg.MaxArrivals, 10*c.Payments)
	if r.inst, err = instapi.New(icfg); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.instSrv = serve(ln, r.inst)
	r.instURL = "http://" + ln.Addr().String()
	r.admin = instclient.NewClient(r.instURL, &http.Client{Timeout: 30 * time.Second}).WithAdminToken(adminToken)

	if r.dir, err = os.MkdirTemp("", "stampede-refunds-lab-*"); err != nil {
		return nil, err
	}
	r.dbPath = filepath.Join(r.dir, "pay.db")
	port, err := freeport.Restartable()
	if err != nil {
		return nil, err
	}
	r.payAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	store, err := sqlite.Open(r.dbPath)
	if err != nil {
		return nil, err
	}
	r.merchant, r.apiKey = pay.NewID(), pay.NewAPIKey()
	err = store.CreateMerchant(context.Background(), pay.Merchant{ID: r.merchant, Name: "refunds lab", KeyHash: pay.HashAPIKey(r.apiKey), CreatedAt: time.Now()})
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := r.startPay(); err != nil {
		return nil, err
	}
	return r, nil
}

// startPay starts a life of the payment service on the rig's database and
// port, with its reconciler running.
func (r *rig) startPay() (err error) {
	p := &payInstance{done: make(chan struct{})}
	defer func() {
		if err != nil {
			p.kill()
		}
	}()
	if p.proxy, err = tcpproxy.Start(r.instURL[len("http://"):]); err != nil {
		return err
	}
	if p.store, err = sqlite.Open(r.dbPath); err != nil {
		return err
	}
	p.tr = &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second}
	var conn refundConnector = institutionclient.New(instclient.NewClient("http://"+p.proxy.Addr(), &http.Client{Transport: p.tr}))
	if r.naive {
		conn = NaiveRefunder{refundConnector: conn, Timeout: r.timeout, Resent: &r.resent}
	}
	quiet := slog.New(slog.DiscardHandler)
	pcfg := pay.DefaultConfig()
	pcfg.ApprovalTimeout, pcfg.ReconcileEvery, pcfg.Logger = r.timeout, r.reconcileEvery, quiet
	pcfg.MaxInFlight = 10_000
	pcfg.WriteRetryFor = time.Second
	// A PENDING refund (its life killed mid-call) is taken over one
	// timeout after its call had to end, not the default 2 s: the lab
	// runs one instance, whose calls the timeout bounds.
	pcfg.TakeoverMargin = r.timeout
	// An inquiry is bounded by the timeout too, and the claims a killed
	// life held run out after three of them (the default lease, 10 s,
	// would only add its length to the settling).
	pcfg.InquiryTimeout, pcfg.ClaimLease = r.timeout, 3*r.timeout
	// A refund's inquiries go on while the status API is down; none is
	// flagged for review within the lab's windows.
	pcfg.ReviewAfter = 1000
	if p.svc, err = pay.NewService(p.store, conn, pcfg); err != nil {
		return err
	}
	hcfg := payapi.DefaultConfig()
	hcfg.Logger = quiet
	h, err := payapi.New(p.svc, p.store, hcfg, nil)
	if err != nil {
		return err
	}
	var ln net.Listener
	for deadline := time.Now().Add(5 * time.Second); ; {
		if ln, err = net.Listen("tcp", r.payAddr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("refunds: pay cannot listen on %s again: %w", r.payAddr, err)
	}
	p.srv = serve(ln, h)
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		defer close(p.done)
		_ = p.svc.Run(ctx)
	}()
	r.mu.Lock()
	r.pay = p
	r.mu.Unlock()
	return nil
}

// kill ends this life at once, as a SIGKILL would: the listener and every
// open request, the database handle (nothing more is written) and the
// connections to the institution (a call in flight loses its answer,
// nothing more is sent) go, and the reconciler stops. Requests the life
// had accepted get no answer.
func (p *payInstance) kill() {
	if p.srv != nil {
		_ = p.srv.srv.Close()
		<-p.srv.done
	}
	if p.cancel != nil {
		p.cancel()
	}
	if p.store != nil {
		_ = p.store.Close()
	}
	if p.proxy != nil {
		p.proxy.Cut()
	}
	if p.cancel != nil {
		<-p.done
	}
	if p.proxy != nil {
		p.proxy.Close()
	}
	if p.tr != nil {
		p.tr.CloseIdleConnections()
	}
}

// killPay kills the running life, if any.
func (r *rig) killPay() {
	r.mu.Lock()
	p := r.pay
	r.pay = nil
	r.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// live returns the running life, or nil.
func (r *rig) live() *payInstance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pay
}

// close stops everything and removes the database.
func (r *rig) close() {
	r.killPay()
	if r.inst != nil {
		r.inst.Close()
	}
	if r.instSrv != nil {
		r.instSrv.stop()
	}
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

// server is an http.Server on its own listener.
type server struct {
	srv  *http.Server
	done chan struct{}
}

func serve(ln net.Listener, h http.Handler) *server {
	s := &server{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s
}

func (s *server) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}

// share is payment i's share refunded by the cancellation; its amount is
// twice that.
func share(i int) int64 { return 10_000 + int64(i) }

// client is a merchant's HTTP client of the payment API.
func (r *rig) client(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 30 * time.Second},
		Timeout: 30 * time.Second}
}

// send POSTs body to path with key and returns the status and body (code
// 0 with the error when nothing came back).
func (r *rig) send(ctx context.Context, hc *http.Client, path, key string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.payAddr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer "+r.apiKey)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// setup creates the event's payments (all APPROVED, the institution
// NORMAL) and returns their ids, by index.
func (e *Experiment) setup(ctx context.Context, r *rig) ([]string, error) {
	n := e.cfg.Payments
	ids := make([]string, n)
	hc := r.client(setupConcurrency)
	defer hc.CloseIdleConnections()
	run := strconv.FormatUint(rand.Uint64(), 36)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	sem := make(chan struct{}, setupConcurrency)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var (
				code int
				data []byte
				err  error
				v    payapi.View
			)
			// A payment the service could not send within its timeout (a
			// busy machine) is FAILED: the basket is paid again.
			for try := 0; try < setupTries; try++ {
				body, _ := json.Marshal(pay.CreateRequest{MerchantID: r.merchant, OrderID: fmt.Sprintf("basket-%05d-%d", i, try), Amount: 2 * share(i), Currency: "KRW"})
				code, data, err = r.send(ctx, hc, "/v1/payments", fmt.Sprintf("refunds-lab-%s-%d-%d", run, i, try), body)
				if err == nil && (code == http.StatusCreated || code == http.StatusAccepted) {
					err = json.Unmarshal(data, &v)
				}
				if err == nil && v.Status == pay.StatusUnknown {
					// The approval's answer was lost on a busy machine:
					// its inquiry settles it.
					v, err = r.awaitSettled(ctx, hc, v)
					code = http.StatusCreated
				}
				if err != nil || code != http.StatusCreated || v.Status != pay.StatusFailed {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && ferr == nil:
				ferr = err
			case err == nil && (code != http.StatusCreated || v.Status != pay.StatusApproved) && ferr == nil:
				ferr = fmt.Errorf("payment %d answered %d %.200s, want 201 APPROVED", i, code, data)
			}
			ids[i] = v.ID
		})
	}
	wg.Wait()
	if ferr != nil {
		return nil, fmt.Errorf("refunds: creating the payments: %w", ferr)
	}
	return ids, ctx.Err()
}

// awaitSettled reads payment v through the API (a read asks the
// institution about an UNKNOWN payment) until it is no longer UNKNOWN,
// for up to 30 s.
func (r *rig) awaitSettled(ctx context.Context, hc *http.Client, v payapi.View) (payapi.View, error) {
	deadline := time.Now().Add(30 * time.Second)
	for v.Status == pay.StatusUnknown || v.Status == pay.StatusPending {
		if time.Now().After(deadline) {
			return v, fmt.Errorf("payment %s still %s after 30s", v.ID, v.Status)
		}
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return v, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.payAddr+"/v1/payments/"+v.ID, nil)
		if err != nil {
			return v, err
		}
		req.Header.Set("Authorization", "Bearer "+r.apiKey)
		resp, err := hc.Do(req)
		if err != nil {
			return v, err
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil {
			return v, err
		}
	}
	return v, nil
}

// answer is what one merchant client got for its refund.
type answer struct {
	code     int // the final HTTP status; 0: none
	latency  time.Duration
	attempts int
	err      string
}

// stampede cancels the event: every payment's share is refunded at once
// through the payment API, each client retrying its own request with the
// same key while pay is down or the refund is in flight; meanwhile the
// faults run on their schedule. It returns the answers, the start signal
// and when the last fault ended.
func (e *Experiment) stampede(ctx context.Context, r *rig, ids []string, d *RunDetail) ([]answer, time.Time, time.Time, error) {
	c := e.cfg
	hc := r.client(len(ids))
	defer hc.CloseIdleConnections()
	run := strconv.FormatUint(rand.Uint64(), 36)
	answers := make([]answer, len(ids))
	startCh := make(chan struct{})
	var ready, done sync.WaitGroup
	for i, id := range ids {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			a := &answers[i]
			body, _ := json.Marshal(map[string]any{"amount": share(i), "reason": "event cancelled"})
			key := fmt.Sprintf("event-cancelled-%s-%05d", run, i)
			path := "/v1/payments/" + id + "/refunds"
			ready.Done()
			<-startCh
			t0 := time.Now()
			backoff := 50 * time.Millisecond
			for {
				a.attempts++
				code, data, err := r.send(ctx, hc, path, key, body)
				a.code = code
				switch {
				case err != nil:
					a.err = err.Error()
				case code == http.StatusCreated || code == http.StatusAccepted:
					a.latency, a.err = time.Since(t0), ""
					return
				default:
					a.err = fmt.Sprintf("%d: %.200s", code, data)
				}
				// A transport error (pay is down), 409 (the refund is in
				// flight) or 503: retry the same request, same key.
				if ctx.Err() != nil || time.Since(t0) > clientDeadline || (code != 0 && code != http.StatusConflict && code < 500) {
					return
				}
				time.Sleep(backoff + rand.N(backoff))
				backoff = min(2*backoff, min(c.Timeout, time.Second))
			}
		}()
	}
	ready.Wait()
	start := time.Now()
	close(startCh)

	// The faults, on their schedule from the start signal.
	faultsEnd := start
	var ferr error
	// The hang and the status API's outage count from the restart when
	// pay is killed: refunds sent again after it meet them too.
	anchor := start
	if c.has(FaultPayKill) {
		if err := sleepUntil(ctx, start.Add(c.KillAt)); err != nil {
			return nil, start, start, err
		}
		killedAt := time.Now()
		r.killPay()
		killed := time.Now()
		if err := sleepUntil(ctx, killed.Add(c.RestartAfter)); err != nil {
			return nil, start, start, err
		}
		restart := time.Now()
		ferr = r.startPay()
		anchor = time.Now()
		d.KillAtMS, d.KillTookMS, d.RestartTookMS = ms(killedAt.Sub(start)), ms(killed.Sub(killedAt)), ms(anchor.Sub(restart))
		d.DownMS = ms(anchor.Sub(killedAt))
		faultsEnd = anchor
	}
	if ferr != nil {
		done.Wait()
		return nil, start, start, fmt.Errorf("refunds: restarting pay: %w", ferr)
	}
	// The hang lasts until every client has its answer (so every refund
	// was sent while it held) and at least Hang after the anchor; the
	// status API comes back StatusDownFor after the hang ends (after the
	// anchor without a hang).
	answered := make(chan struct{})
	go func() { done.Wait(); close(answered) }()
	hangEnd := anchor
	if c.has(FaultHang) {
		if err := sleepUntil(ctx, anchor.Add(c.Hang)); err != nil {
			return nil, start, start, err
		}
		select {
		case <-answered:
		case <-ctx.Done():
			return nil, start, start, ctx.Err()
		}
		hangEnd = time.Now()
		b := institution.DefaultBehavior()
		b.Mode, b.Idempotent, b.StatusAPI = institution.ModeNormal, true, institution.StatusAPIUp
		if c.has(FaultStatusDown) {
			b.StatusAPI = institution.StatusAPIDown
		}
		if _, err := r.admin.SetBehavior(ctx, b); err != nil {
			return nil, start, start, fmt.Errorf("refunds: end the hang: %w", err)
		}
		d.HangMS = ms(hangEnd.Sub(start))
		faultsEnd = hangEnd
	}
	if c.has(FaultStatusDown) {
		if err := sleepUntil(ctx, hangEnd.Add(c.StatusDownFor)); err != nil {
			return nil, start, start, err
		}
		b := institution.DefaultBehavior()
		b.Mode, b.Idempotent, b.StatusAPI = institution.ModeNormal, true, institution.StatusAPIUp
		if _, err := r.admin.SetBehavior(ctx, b); err != nil {
			return nil, start, start, fmt.Errorf("refunds: bring the status API back: %w", err)
		}
		d.StatusDownMS = ms(time.Since(start))
		faultsEnd = time.Now()
	}
	done.Wait()
	return answers, start, faultsEnd, ctx.Err()
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// merchantRounds bounds the merchant's rounds of new refunds for the
// payments whose refund settled FAILED.
const merchantRounds = 3

// reissue asks again, under new keys, for the refunds of the payments at
// the indexes again, once each, and records the errors it met.
func (e *Experiment) reissue(ctx context.Context, r *rig, ids []string, again []int, round int, d *RunDetail) error {
	hc := r.client(setupConcurrency)
	defer hc.CloseIdleConnections()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	sem := make(chan struct{}, setupConcurrency)
	for _, i := range again {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			body, _ := json.Marshal(map[string]any{"amount": share(i), "reason": "event cancelled"})
			code, data, err := r.send(ctx, hc, "/v1/payments/"+ids[i]+"/refunds", fmt.Sprintf("event-cancelled-again-%d-%05d", round, i), body)
			if err == nil && (code == http.StatusCreated || code == http.StatusAccepted) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if len(d.AnswerErrors) < maxExamples {
				d.AnswerErrors = append(d.AnswerErrors, fmt.Sprintf("again: %d %v %.200s", code, err, data))
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}

// paySide is what pay's store holds about the run's refunds.
type paySide struct {
	byStatus  map[pay.RefundStatus]int
	succeeded map[string]int64 // by payment id: the SUCCEEDED refunds' sum
	held      map[string]bool  // by payment id: a refund that is not FAILED
	unsettled []string         // refund ids still PENDING or UNKNOWN
}

func readPay(ctx context.Context, store *sqlite.Store, ids []string) (paySide, error) {
	ps := paySide{byStatus: map[pay.RefundStatus]int{}, succeeded: map[string]int64{}, held: map[string]bool{}}
	for _, id := range ids {
		rs, err := store.ListRefunds(ctx, id)
		if err != nil {
			return ps, err
		}
		for _, rf := range rs {
			ps.byStatus[rf.Status]++
			if rf.Status == pay.RefundSucceeded {
				ps.succeeded[id] += rf.Amount
			}
			if rf.Status.Holds() {
				ps.held[id] = true
			}
			if !rf.Status.Terminal() {
				ps.unsettled = append(ps.unsettled, rf.ID)
			}
		}
	}
	return ps, nil
}

// settle waits until pay's refunds are all settled or SettleTimeout has
// passed since the faults ended, and returns pay's side as it then is.
func (e *Experiment) settle(ctx context.Context, r *rig, ids []string, faultsEnd time.Time) (paySide, error) {
	deadline := faultsEnd.Add(e.cfg.SettleTimeout)
	for {
		p := r.live()
		if p == nil {
			return paySide{}, errors.New("refunds: pay is not running")
		}
		ps, err := readPay(ctx, p.store, ids)
		if err != nil {
			return ps, err
		}
		if len(ps.unsettled) == 0 || time.Now().After(deadline) {
			return ps, nil
		}
		if err := sleepUntil(ctx, time.Now().Add(200*time.Millisecond)); err != nil {
			return ps, err
		}
	}
}

// measure waits for pay to settle, reads the institution's ledger and
// turns it all into the run's metrics.
func (e *Experiment) measure(ctx context.Context, r *rig, ids []string, answers []answer, faultsEnd time.Time, d RunDetail, _ int) (lab.RunResult, error) {
	var latencies []time.Duration
	ok := 0
	for _, a := range answers {
		key := "transport"
		if a.code != 0 {
			key = strconv.Itoa(a.code)
		}
		d.Answers[key]++
		d.Attempts += a.attempts
		if a.code == http.StatusCreated || a.code == http.StatusAccepted {
			ok++
			latencies = append(latencies, a.latency)
		} else if a.err != "" && len(d.AnswerErrors) < maxExamples {
			d.AnswerErrors = append(d.AnswerErrors, a.err)
		}
	}
	slices.Sort(latencies)

	ps, err := e.settle(ctx, r, ids, faultsEnd)
	if err != nil {
		return lab.RunResult{}, err
	}
	d.SettleMS = ms(time.Since(faultsEnd))
	// A refund that settled FAILED was never carried out (declined, not
	// sent, or not found after the not-found window): the merchant asks
	// for a new one, under a new key, as it would. Only then is it safe.
	for round := 1; round <= merchantRounds && len(ps.unsettled) == 0; round++ {
		var again []int
		for i, id := range ids {
			if !ps.held[id] {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		d.MerchantReissued += len(again)
		if err := e.reissue(ctx, r, ids, again, round, &d); err != nil {
			return lab.RunResult{}, err
		}
		if ps, err = e.settle(ctx, r, ids, time.Now()); err != nil {
			return lab.RunResult{}, err
		}
	}
	d.PayStatuses = map[string]int{}
	for _, s := range pay.RefundStatuses() {
		d.PayStatuses[string(s)] = ps.byStatus[s]
	}

	// The checker: the institution's own records.
	ledger, err := r.admin.Refunds(ctx)
	if err != nil {
		return lab.RunResult{}, fmt.Errorf("refunds: the institution's refund ledger: %w", err)
	}
	approvals, err := r.admin.Approvals(ctx)
	if err != nil {
		return lab.RunResult{}, fmt.Errorf("refunds: the institution's ledger: %w", err)
	}
	d.InstitutionRefunds, d.DoubleRefundedKeys = len(ledger.Records), ledger.DoubleRefundedKeys
	if arr, err := r.admin.Arrivals(ctx); err == nil {
		for _, a := range arr.Arrivals {
			if a.Path != "/v1/refunds" {
				continue
			}
			sec := int(time.Duration(a.UnixNano - d.StartSignal.UnixNano()).Seconds())
			if sec < 0 {
				continue
			}
			for len(d.RefundArrivals) <= sec {
				d.RefundArrivals = append(d.RefundArrivals, 0)
			}
			d.RefundArrivals[sec]++
		}
	}
	moves := map[string]int{} // money movements per approval key
	requests := 0
	for _, rec := range ledger.Records {
		moves[rec.ApprovalKey] += rec.Refunds
		requests += rec.Requests
	}
	example := func(format string, args ...any) {
		if len(d.Examples) < 4*maxExamples {
			d.Examples = append(d.Examples, fmt.Sprintf(format, args...))
		}
	}
	var doubles, over, unrefunded, mismatches int
	for i, id := range ids {
		if n := moves[id]; n > 1 {
			doubles += n - 1
			example("double refund: payment %s refunded %d times", id, n)
		}
		got := ledger.RefundedByApproval[id]
		switch {
		case got > share(i):
			over++
			example("over-refund: payment %s refunded %d of a %d share", id, got, share(i))
		case got < share(i):
			unrefunded++
			example("unrefunded: payment %s refunded %d of a %d share", id, got, share(i))
		}
		if got != ps.succeeded[id] {
			mismatches++
			example("parity: payment %s: pay says %d refunded, the institution %d", id, ps.succeeded[id], got)
		}
	}
	p := r.live()
	if p == nil {
		return lab.RunResult{}, errors.New("refunds: pay is not running")
	}
	charges := make([]pay.Charge, 0, len(approvals.Records))
	for _, rec := range approvals.Records {
		charges = append(charges, pay.Charge{ExternalKey: rec.ExternalKey, Approved: rec.Status == institution.StatusApproved,
			Amount: rec.Amount, Currency: rec.Currency, Times: rec.Charges})
	}
	rep, err := pay.Parity(ctx, p.store, charges)
	if err != nil {
		return lab.RunResult{}, fmt.Errorf("refunds: parity: %w", err)
	}
	mismatches += rep.Mismatches()
	for _, id := range ps.unsettled[:min(len(ps.unsettled), maxExamples)] {
		example("unsettled: refund %s", id)
	}

	m := lab.Metrics{
		"payments":                    float64(len(ids)),
		"double_refunds":              float64(doubles),
		"over_refunds":                float64(over),
		"unsettled_refunds":           float64(len(ps.unsettled)),
		"parity_mismatches":           float64(mismatches),
		"unrefunded":                  float64(unrefunded),
		"refund_p50_ms":               quantileMS(latencies, 0.50),
		"refund_p99_ms":               quantileMS(latencies, 0.99),
		"refund_max_ms":               quantileMS(latencies, 1),
		"institution_refund_requests": float64(requests),
		"institution_refund_keys":     float64(len(ledger.Records)),
		"resent":                      float64(r.resent.Load()),
		"merchant_reissued":           float64(d.MerchantReissued),
		"answers_2xx":                 float64(ok),
		"client_attempts":             float64(d.Attempts),
		"pay_succeeded":               float64(ps.byStatus[pay.RefundSucceeded]),
		"pay_failed":                  float64(ps.byStatus[pay.RefundFailed]),
		"settle_ms":                   d.SettleMS,
	}
	res := lab.RunResult{Metrics: m, Valid: true, Extra: d}
	switch {
	case requests == 0:
		res.Valid, res.Reason = false, fmt.Sprintf("the institution saw no refund request (client answers: %v)", d.Answers)
	case ok == 0:
		res.Valid, res.Reason = false, fmt.Sprintf("no refund was answered 201 or 202 (client answers: %v)", d.Answers)
	}
	if !r.naive {
		for _, b := range []struct {
			n    int
			what string
		}{{doubles, "double refunds"}, {over, "over-refunds"}, {len(ps.unsettled), "refunds unsettled after the settle window"},
			{mismatches, "parity mismatches"}, {unrefunded, "payments the cancellation did not refund"}} {
			if b.n > 0 {
				res.Broken = append(res.Broken, fmt.Sprintf("stampede: %d %s", b.n, b.what))
			}
		}
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantileMS returns the q-quantile (nearest rank) of sorted durations in
// milliseconds, or 0 for none.
func quantileMS(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return ms(sorted[min(max(i, 0), len(sorted)-1)])
}
