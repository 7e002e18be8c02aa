package retrystampede

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
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
	"time"

	"github.com/stampede-lab/stampede/institution"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/retry"
)

const (
	// adminToken authorizes the lab's calls to its own simulator; the
	// simulator listens on 127.0.0.1 only and lives for one run.
	adminToken = "retry-stampede-lab-admin-token"
	// reconcileEvery is the payment service's ReconcileEvery (the base of
	// its per-payment inquiry backoff) and the pause between the lab's
	// reconciliation passes.
	reconcileEvery = 100 * time.Millisecond
	// notFoundMargin is added to the not-found window before the first
	// reconciliation pass, so that "not found" is definitive on both sides.
	notFoundMargin = 50 * time.Millisecond
	// maxExamples bounds the IDs and error texts kept per run in the JSON.
	maxExamples = 5
)

// RunDetail is the per-run data kept in the JSON beside the metrics.
type RunDetail struct {
	// Seed seeded the jittered policy of this run.
	Seed uint64 `json:"seed"`
	// Policy is the policy as the retry package names it (for example
	// "exponential+budget").
	Policy string `json:"policy"`
	// Behavior is the institution's behaviour during the stampede.
	Behavior institution.Behavior `json:"behavior"`
	// StartSignal is when the start channel was closed (UTC).
	StartSignal time.Time `json:"start_signal"`
	// Answers counts the clients' answers by HTTP status; "transport"
	// counts requests that got no answer.
	Answers map[string]int `json:"answers"`
	// AnswerErrors holds the first few transport errors and error answers.
	AnswerErrors []string `json:"answer_errors,omitempty"`
	// PerFine and PerCoarse count every arrival at the institution per
	// 100 ms and per 1 s from the start signal (first wave included).
	PerFine   []int `json:"arrivals_per_100ms"`
	PerCoarse []int `json:"arrivals_per_1s"`
	// FirstWave counts the arrivals left out of the peaks (at most
	// ExcludeFirst after the start signal).
	FirstWave int `json:"first_wave"`
	// LastArrivalMS is the last arrival's offset from the start signal.
	LastArrivalMS float64 `json:"last_arrival_ms"`
	// BudgetTokensLeft is the shared budget's balance after the stampede
	// (budget policy only).
	BudgetTokensLeft *float64 `json:"budget_tokens_left,omitempty"`
	// Final counts the payments by status after reconciliation; Flagged
	// counts those flagged for manual review.
	Final   map[string]int `json:"final_statuses"`
	Flagged int            `json:"flagged"`
	// Unresolved lists the first few payments neither settled nor flagged.
	Unresolved []string `json:"unresolved,omitempty"`
	// ReconcilePasses counts the reconciliation passes; ReconcileErrors
	// holds the first few errors they returned.
	ReconcilePasses int      `json:"reconcile_passes"`
	ReconcileErrors []string `json:"reconcile_errors,omitempty"`
	// Parity compares our APPROVED payments with the institution's ledger.
	Parity ParitySummary `json:"parity"`
}

// ParitySummary is pay.ParityReport with counts and a few examples.
type ParitySummary struct {
	Matched         int      `json:"matched"`
	OursOnly        int      `json:"ours_only"`
	InstitutionOnly int      `json:"institution_only"`
	AmountMismatch  int      `json:"amount_mismatch"`
	DoubleCharged   int      `json:"double_charged"`
	Examples        []string `json:"examples,omitempty"`
}

// Run implements lab.Experiment: one scenario, one policy, one stampede.
func (e *Experiment) Run(ctx context.Context, cond lab.Condition, repeat int) (lab.RunResult, error) {
	scenario, err := ParseScenario(fmt.Sprint(cond.Values["scenario"]))
	if err != nil {
		return lab.RunResult{}, err
	}
	policyName, err := ParsePolicy(fmt.Sprint(cond.Values["policy"]))
	if err != nil {
		return lab.RunResult{}, err
	}
	seed := e.cfg.Seed + uint64(repeat)
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s", scenario, policyName)
	policy, budget, err := e.policy(policyName, rand.New(rand.NewPCG(seed, h.Sum64())))
	if err != nil {
		return lab.RunResult{}, err
	}

	r, err := e.start(policy)
	if err != nil {
		return lab.RunResult{}, err
	}
	defer r.close()

	behavior := scenario.Behavior(e.cfg.Hang)
	if _, err := r.admin.SetBehavior(ctx, behavior); err != nil {
		return lab.RunResult{}, fmt.Errorf("retry-stampede: set the institution's behaviour: %w", err)
	}
	answers, start := e.stampede(ctx, r)
	if err := ctx.Err(); err != nil {
		return lab.RunResult{}, err
	}
	detail := RunDetail{Seed: seed, Policy: policy.Name(), Behavior: behavior, StartSignal: start.UTC()}
	if budget != nil {
		left := budget.Tokens()
		detail.BudgetTokensLeft = &left
	}
	return e.measure(ctx, r, scenario, policyName, start, answers, detail)
}

// policy builds the policy named name with rnd for its jitter; for Budget
// it also returns the budget, fresh for the run and shared by every
// payment.
func (e *Experiment) policy(name string, rnd retry.Rand) (retry.Policy, *retry.Budget, error) {
	if name != Budget {
		p, err := retry.New(e.cfg.retryConfig(name), rnd)
		return p, nil, err
	}
	inner, err := retry.New(e.cfg.retryConfig(e.cfg.BudgetPolicy), rnd)
	if err != nil {
		return nil, nil, err
	}
	b, err := retry.NewBudget(retry.DefaultBudgetConfig())
	if err != nil {
		return nil, nil, err
	}
	return retry.WithBudget(inner, b), b, nil
}

// rig is one run's system under test: the institution simulator and the
// payment service, each behind its own listener.
type rig struct {
	inst    *instapi.Server
	instSrv *server
	instURL string
	admin   *instclient.Client
	payURL  string
	paySrv  *server
	// merchant and apiKey are the merchant every payment of the run is
	// made for, and its API key.
	merchant, apiKey string
	store            *sqlite.Store
	svc              *pay.Service
	dir              string
	// transports are closed with the rig.
	transports []*http.Transport
}

// start builds a fresh rig whose payment service retries with policy.
func (e *Experiment) start(policy retry.Policy) (_ *rig, err error) {
	c := e.cfg
	r := &rig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	quiet := slog.New(slog.DiscardHandler)

	icfg := instapi.DefaultConfig()
	icfg.AdminToken, icfg.NotFoundWindow, icfg.Logger = adminToken, c.NotFoundWindow, quiet
	icfg.MaxHung = max(icfg.MaxHung, 2*c.Payments)
	if r.inst, err = instapi.New(icfg); err != nil {
		return nil, err
	}
	if r.instSrv, r.instURL, err = serve(r.inst); err != nil {
		return nil, err
	}
	adminTr := r.transport(4)
	r.admin = instclient.NewClient(r.instURL, &http.Client{Transport: adminTr, Timeout: 30 * time.Second}).WithAdminToken(adminToken)

	if r.dir, err = os.MkdirTemp("", "stampede-retry-stampede-*"); err != nil {
		return nil, err
	}
	if r.store, err = sqlite.Open(filepath.Join(r.dir, "pay.db")); err != nil {
		return nil, err
	}
	// No client timeout: the approval timeout and the inquiry timeout
	// bound each call through its context.
	instClient := instclient.NewClient(r.instURL, &http.Client{Transport: r.transport(c.Payments)})
	pcfg := pay.DefaultConfig()
	pcfg.ApprovalTimeout, pcfg.Retry = c.Timeout, policy
	pcfg.MaxInFlight = max(10_000, c.Payments) // the bulkhead must not interfere
	pcfg.ReconcileEvery, pcfg.Logger = reconcileEvery, quiet
	if r.svc, err = pay.NewService(r.store, institutionclient.New(instClient), pcfg); err != nil {
		return nil, err
	}
	hcfg := payapi.DefaultConfig()
	hcfg.Logger = quiet
	handler, err := payapi.New(r.svc, r.store, hcfg, nil)
	if err != nil {
		return nil, err
	}
	if r.paySrv, r.payURL, err = serve(handler); err != nil {
		return nil, err
	}
	r.merchant, r.apiKey = pay.NewID(), pay.NewAPIKey()
	m := pay.Merchant{ID: r.merchant, Name: "retry-stampede lab", KeyHash: pay.HashAPIKey(r.apiKey), CreatedAt: time.Now()}
	if err := r.store.CreateMerchant(context.Background(), m); err != nil {
		return nil, err
	}
	return r, nil
}

// transport returns a new transport keeping up to idle connections, closed
// with the rig.
func (r *rig) transport(idle int) *http.Transport {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        idle,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     30 * time.Second,
	}
	r.transports = append(r.transports, tr)
	return tr
}

// close stops everything the rig started, the payment API first, then the
// institution (Close releases held requests before the listener waits for
// them), and removes the database.
func (r *rig) close() {
	if r.paySrv != nil {
		r.paySrv.stop()
	}
	if r.inst != nil {
		r.inst.Close()
	}
	if r.instSrv != nil {
		r.instSrv.stop()
	}
	for _, tr := range r.transports {
		tr.CloseIdleConnections()
	}
	if r.store != nil {
		_ = r.store.Close()
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

func serve(h http.Handler) (*server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	s := &server{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, "http://" + ln.Addr().String(), nil
}

func (s *server) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}

// answer is what one client got.
type answer struct {
	code    int // HTTP status; 0: no answer
	status  pay.Status
	id      string
	latency time.Duration
	at      time.Time // when the answer arrived
	err     string
}

// stampede sends every payment through the payment API at once and
// returns the answers and the moment of the start signal. Every client
// goroutine prepares its request and then waits on one channel, which is
// closed once all are ready: the signal reaches every client or, if the
// run is cancelled, every request fails alike — it cannot half-fire.
func (e *Experiment) stampede(ctx context.Context, r *rig) ([]answer, time.Time) {
	c := e.cfg
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        c.Payments,
		MaxIdleConnsPerHost: c.Payments,
		IdleConnTimeout:     30 * time.Second,
	}
	defer tr.CloseIdleConnections()
	// Long enough for every attempt and every wait of the slowest policy.
	rc := c.retryConfig(retry.Exponential)
	hc := &http.Client{Transport: tr, Timeout: time.Duration(c.Attempts)*(c.Timeout+rc.Cap) + 30*time.Second}

	run := strconv.FormatUint(rand.Uint64(), 36)
	answers := make([]answer, c.Payments)
	startCh := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range answers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			a := &answers[i]
			body, _ := json.Marshal(pay.CreateRequest{
				MerchantID: r.merchant, OrderID: fmt.Sprintf("order-%05d", i), Amount: 10_000 + int64(i), Currency: "KRW",
			})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.payURL+"/v1/payments", bytes.NewReader(body))
			if err == nil {
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("retry-stampede-%s-%05d", run, i))
				req.Header.Set("Authorization", "Bearer "+r.apiKey)
			}
			ready.Done()
			<-startCh
			if err != nil {
				a.err = "prepare: " + err.Error()
				return
			}
			t0 := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				a.at, a.err = time.Now(), err.Error()
				return
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			a.at = time.Now()
			a.latency, a.code = a.at.Sub(t0), resp.StatusCode
			var v payapi.View
			switch {
			case err != nil:
				a.err = "reading the answer: " + err.Error()
			case resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusAccepted:
				if json.Unmarshal(data, &v) == nil {
					a.id, a.status = v.ID, v.Status
				}
			default:
				a.err = fmt.Sprintf("%d: %.200s", resp.StatusCode, data)
			}
		}()
	}
	ready.Wait()
	start := time.Now()
	close(startCh)
	done.Wait()
	return answers, start
}

// census counts a run's payments by status after reconciliation.
type census struct {
	total      int
	byStatus   map[pay.Status]int
	flagged    int
	unresolved []string // neither terminal nor flagged
}

func takeCensus(ctx context.Context, store pay.Store) (census, error) {
	cs := census{byStatus: map[pay.Status]int{}}
	after := ""
	for {
		page, err := store.List(ctx, after, 500)
		if err != nil {
			return cs, err
		}
		for _, p := range page {
			cs.total++
			cs.byStatus[p.Status]++
			if p.ManualReview {
				cs.flagged++
			}
			if !p.Status.Terminal() && !p.ManualReview {
				cs.unresolved = append(cs.unresolved, p.ID)
			}
		}
		if len(page) < 500 {
			return cs, nil
		}
		after = page[len(page)-1].ID
	}
}

// reconcile puts the institution back to NORMAL with its status API up —
// SetBehavior keeps the ledger, where Reset would clear it — waits for the
// not-found window after the last answer, then runs reconciliation passes
// until every payment is settled or flagged, or ReconcileTimeout passes.
func (e *Experiment) reconcile(ctx context.Context, r *rig, b institution.Behavior, lastAnswer time.Time, d *RunDetail) (census, error) {
	b.Mode, b.StatusAPI = institution.ModeNormal, institution.StatusAPIUp
	if _, err := r.admin.SetBehavior(ctx, b); err != nil {
		return census{}, fmt.Errorf("retry-stampede: institution back to NORMAL: %w", err)
	}
	if err := sleepUntil(ctx, lastAnswer.Add(e.cfg.NotFoundWindow+notFoundMargin)); err != nil {
		return census{}, err
	}
	deadline := time.Now().Add(e.cfg.ReconcileTimeout)
	for {
		d.ReconcilePasses++
		if _, err := r.svc.Reconcile(ctx); err != nil {
			if ctx.Err() != nil {
				return census{}, ctx.Err()
			}
			if len(d.ReconcileErrors) < maxExamples {
				d.ReconcileErrors = append(d.ReconcileErrors, err.Error())
			}
		}
		cs, err := takeCensus(ctx, r.store)
		if err != nil {
			return census{}, err
		}
		if len(cs.unresolved) == 0 || !time.Now().Before(deadline) {
			return cs, nil
		}
		if err := sleepUntil(ctx, time.Now().Add(reconcileEvery)); err != nil {
			return census{}, err
		}
	}
}

func sleepUntil(ctx context.Context, t time.Time) error {
	return retry.Sleep(ctx, time.Until(t))
}

// measure reads the institution and the store after the stampede,
// reconciles, and turns it all into the run's metrics.
func (e *Experiment) measure(ctx context.Context, r *rig, scenario Scenario, policy string, start time.Time,
	answers []answer, d RunDetail) (lab.RunResult, error) {
	c := e.cfg

	// The clients.
	d.Answers = map[string]int{}
	var latencies []time.Duration
	var lastAnswer time.Time
	answered, unknown := 0, 0
	for _, a := range answers {
		key := "transport"
		if a.code != 0 {
			key = strconv.Itoa(a.code)
			latencies = append(latencies, a.latency)
		}
		d.Answers[key]++
		if a.at.After(lastAnswer) {
			lastAnswer = a.at
		}
		if a.code == http.StatusCreated || a.code == http.StatusAccepted {
			answered++
		}
		if a.code == http.StatusAccepted && a.status == pay.StatusUnknown {
			unknown++
		}
		if a.err != "" && len(d.AnswerErrors) < maxExamples {
			d.AnswerErrors = append(d.AnswerErrors, a.err)
		}
	}
	slices.Sort(latencies)

	// The institution: arrivals and charges during the stampede.
	arrivals, err := r.admin.Arrivals(ctx)
	if err != nil {
		return lab.RunResult{}, fmt.Errorf("retry-stampede: arrivals: %w", err)
	}
	offsets := make([]time.Duration, 0, len(arrivals.Arrivals))
	for _, a := range arrivals.Arrivals {
		offsets = append(offsets, time.Duration(a.UnixNano-start.UnixNano()))
	}
	d.PerFine, d.PerCoarse = Histogram(offsets, FineWindow), Histogram(offsets, CoarseWindow)
	var waveFirst, waveLast time.Duration = -1, 0
	for _, o := range offsets {
		if o <= c.ExcludeFirst {
			d.FirstWave++
			if waveFirst < 0 || o < waveFirst {
				waveFirst = o
			}
			waveLast = max(waveLast, o)
		}
	}
	// No retry can leave before its attempt timed out, so every arrival
	// before the timeout is a first attempt.
	inTime := 0
	for _, o := range offsets {
		if o < c.Timeout {
			inTime++
		}
	}
	waveWidth := time.Duration(0)
	if d.FirstWave > 0 {
		waveWidth = waveLast - waveFirst
	}
	if len(offsets) > 0 {
		d.LastArrivalMS = ms(slices.Max(offsets))
	}
	ledger, err := r.admin.Approvals(ctx)
	if err != nil {
		return lab.RunResult{}, fmt.Errorf("retry-stampede: ledger: %w", err)
	}
	charges, doubles := countCharges(ledger)

	// Reconciliation, then parity with the ledger as it stands after it.
	cs, err := e.reconcile(ctx, r, d.Behavior, lastAnswer, &d)
	if err != nil {
		return lab.RunResult{}, err
	}
	after, err := r.admin.Approvals(ctx)
	if err != nil {
		return lab.RunResult{}, fmt.Errorf("retry-stampede: ledger after reconciliation: %w", err)
	}
	rep, err := pay.Parity(ctx, r.store, chargesOf(after))
	if err != nil {
		return lab.RunResult{}, fmt.Errorf("retry-stampede: parity: %w", err)
	}
	d.Parity = summarizeParity(rep)
	d.Final = map[string]int{}
	for _, s := range pay.Statuses() {
		d.Final[string(s)] = cs.byStatus[s]
	}
	d.Flagged = cs.flagged
	d.Unresolved = cs.unresolved[:min(len(cs.unresolved), maxExamples)]

	requests := len(offsets)
	resolved := cs.total - len(cs.unresolved)
	m := lab.Metrics{
		"payments":               float64(c.Payments),
		"institution_requests":   float64(requests),
		"amplification":          float64(requests) / float64(c.Payments),
		"retry_requests":         float64(requests - c.Payments),
		"peak_100ms":             float64(SlidingPeak(offsets, FineWindow, c.ExcludeFirst)),
		"peak_1s":                float64(SlidingPeak(offsets, CoarseWindow, c.ExcludeFirst)),
		"peak_100ms_fixed":       float64(FixedPeak(offsets, FineWindow, c.ExcludeFirst)),
		"peak_1s_fixed":          float64(FixedPeak(offsets, CoarseWindow, c.ExcludeFirst)),
		"first_wave":             float64(d.FirstWave),
		"first_wave_ms":          ms(waveWidth),
		"first_attempts_in_time": float64(inTime),
		"client_p50_ms":          quantileMS(latencies, 0.50),
		"client_p99_ms":          quantileMS(latencies, 0.99),
		"client_max_ms":          quantileMS(latencies, 1),
		"answered":               float64(answered),
		"error_answers":          float64(c.Payments - answered),
		"approvals":              float64(charges),
		"double_charges":         float64(doubles),
		"unknown":                float64(unknown),
		"resolved":               float64(resolved),
		"unresolved":             float64(len(cs.unresolved)),
		"flagged":                float64(cs.flagged),
		"final_approved":         float64(cs.byStatus[pay.StatusApproved]),
		"final_declined":         float64(cs.byStatus[pay.StatusDeclined]),
		"final_failed":           float64(cs.byStatus[pay.StatusFailed]),
		"final_unknown":          float64(cs.byStatus[pay.StatusUnknown]),
		"final_pending":          float64(cs.byStatus[pay.StatusPending]),
		"parity_mismatches":      float64(rep.Mismatches()),
	}

	res := lab.RunResult{Metrics: m, Valid: true, Extra: d}
	switch {
	case requests == 0:
		res.Valid, res.Reason = false, fmt.Sprintf("the institution saw no approval request (client answers: %v)", d.Answers)
	case answered == 0:
		res.Valid, res.Reason = false, fmt.Sprintf("no payment was answered 201 or 202 (client answers: %v)", d.Answers)
	case arrivals.Dropped > 0:
		res.Valid, res.Reason = false, fmt.Sprintf("the institution's arrival log dropped %d arrivals: the counts are incomplete", arrivals.Dropped)
	}
	if policy == retry.None && doubles > 0 {
		res.Broken = append(res.Broken, fmt.Sprintf("none (%s): %d double charges without a single retry", scenario, doubles))
	}
	if n := len(cs.unresolved); n > 0 {
		res.Broken = append(res.Broken, fmt.Sprintf("%s (%s): %d payments neither settled nor flagged for review after %s of reconciliation (final statuses %v)",
			policy, scenario, n, c.ReconcileTimeout, d.Final))
	}
	if policy == retry.None && rep.Mismatches() > 0 {
		res.Broken = append(res.Broken, fmt.Sprintf("none (%s): parity with the institution's ledger: %s", scenario, rep))
	}
	return res, nil
}

// countCharges returns every charge of the ledger and the charges beyond
// the first of each external key, from the per-key counts.
func countCharges(l institution.Ledger) (charges, doubles int) {
	for _, n := range l.ChargesByKey {
		charges += n
		doubles += max(n-1, 0)
	}
	return charges, doubles
}

// chargesOf turns the ledger into what pay.Parity compares.
func chargesOf(l institution.Ledger) []pay.Charge {
	out := make([]pay.Charge, 0, len(l.Records))
	for _, rec := range l.Records {
		out = append(out, pay.Charge{ExternalKey: rec.ExternalKey, Approved: rec.Status == institution.StatusApproved,
			Amount: rec.Amount, Currency: rec.Currency, Times: rec.Charges})
	}
	return out
}

func summarizeParity(r pay.ParityReport) ParitySummary {
	s := ParitySummary{Matched: r.Matched, OursOnly: len(r.OursOnly), InstitutionOnly: len(r.InstitutionOnly),
		AmountMismatch: len(r.AmountMismatch), DoubleCharged: len(r.DoubleCharged)}
	for _, l := range []struct {
		what string
		ids  []string
	}{{"ours only", r.OursOnly}, {"institution only", r.InstitutionOnly}, {"amount mismatch", r.AmountMismatch}, {"double charged", r.DoubleCharged}} {
		for _, id := range l.ids {
			if len(s.Examples) >= maxExamples {
				return s
			}
			s.Examples = append(s.Examples, l.what+": "+id)
		}
	}
	return s
}

// quantileMS returns the q-quantile (nearest rank) of sorted durations in
// milliseconds, or 0 for none.
func quantileMS(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return ms(sorted[min(max(i, 0), len(sorted)-1)])
}
