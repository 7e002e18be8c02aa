package checkout_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/checkout/api"
	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// saleResult is what the buyers of a sale got.
type saleResult struct {
	paid    int         // orders paid
	soldOut int         // holds refused: sold out
	seats   map[int]int // seat number → paid orders holding it
	other   []string    // any other answer
}

// sale sends buyers concurrent buyers, each holding one seat of event
// and paying for it at once.
func sale(t *testing.T, r *rig, event string, buyers int) saleResult {
	t.Helper()
	var (
		mu  sync.Mutex
		res = saleResult{seats: map[int]int{}}
		wg  sync.WaitGroup
	)
	start := make(chan struct{})
	exp := time.Now().Add(5 * time.Minute)
	for i := range buyers {
		wg.Go(func() {
			user := fmt.Sprintf("buyer-%04d", i)
			adm := admissionToken(user, exp)
			<-start
			h := r.hold(t, event, user, adm, 1)
			if h.status == http.StatusConflict && h.body["code"] == "conflict" {
				mu.Lock()
				res.soldOut++
				mu.Unlock()
				return
			}
			if h.status != http.StatusCreated {
				mu.Lock()
				res.other = append(res.other, fmt.Sprintf("hold %d %v", h.status, h.body))
				mu.Unlock()
				return
			}
			o := r.purchase(t, h.body["id"].(string), user, adm)
			for deadline := time.Now().Add(2 * time.Minute); o.status == http.StatusAccepted && time.Now().Before(deadline); {
				// pay did not answer in time: ask again, as a buyer would
				time.Sleep(100 * time.Millisecond)
				o = r.do(t, http.MethodGet, "/v1/orders/"+o.body["id"].(string), "", protocol.HeaderUser, user, protocol.HeaderAdmission, adm)
			}
			mu.Lock()
			defer mu.Unlock()
			if o.status != http.StatusOK || o.body["status"] != "paid" || o.header.Get(protocol.HeaderRelease) != "done" {
				res.other = append(res.other, fmt.Sprintf("purchase %d %v release=%q", o.status, o.body, o.header.Get(protocol.HeaderRelease)))
				return
			}
			res.paid++
			for _, s := range seatsOf(o.body) {
				res.seats[s]++
			}
		})
	}
	close(start)
	wg.Wait()
	return res
}

// testNoOversell: 1,000 buyers at once for 100 seats: exactly 100 are
// sold, each seat once, the other 900 are told it is sold out.
func testNoOversell(t *testing.T, open storeOpener) {
	p := startPay(t, 3*time.Second)
	r := newRig(t, open(t), p, nil)
	r.createEvent(t, "concert", 100)
	res := sale(t, r, "concert", 1000)
	if len(res.other) > 0 {
		t.Fatalf("%d unexpected answers, first: %s", len(res.other), res.other[0])
	}
	if res.paid != 100 || res.soldOut != 900 {
		t.Fatalf("paid %d, sold out %d; want 100 and 900", res.paid, res.soldOut)
	}
	for seat, n := range res.seats {
		if n != 1 || seat < 1 || seat > 100 {
			t.Errorf("seat %d sold %d times", seat, n)
		}
	}
	if len(res.seats) != 100 {
		t.Errorf("%d distinct seats sold, want 100", len(res.seats))
	}
	e := r.event(t, "concert")
	if e["sold"] != 100.0 || e["seats_left"] != 0.0 || e["held"] != 0.0 {
		t.Fatalf("event after the sale = %v; want sold 100, seats_left 0, held 0", e)
	}
}

// The sales run one at a time: each keeps the machine busy (and is slow
// under -race, where the SQLite engine is instrumented too).

func TestNoOversellSQLite(t *testing.T)   { testNoOversell(t, sqliteFile) }
func TestNoOversellPostgres(t *testing.T) { testNoOversell(t, postgresSchema) }

// The unsafe inventory (lab/unsafeinventory) oversells the same sale:
// its own tests show it.

// TestHoldExpiresWithAdmission: a hold expires when its admission does;
// it can no longer be paid for, the sweeper gives its seats back, and a
// hold that finds the event sold out releases expired holds first.
func TestHoldExpiresWithAdmission(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now().UTC()}
	p := startPay(t, 3*time.Second)
	r := newRig(t, sqliteFile(t), p, func(c *checkout.Config) { c.Now = clock.Now })
	r.createEvent(t, "gig", 2)
	exp := clock.Now().Add(30 * time.Second).Truncate(time.Second)
	h := r.hold(t, "gig", "ann", admissionToken("ann", exp), 2)
	if h.status != http.StatusCreated || h.body["expires_at"] != exp.Format(time.RFC3339) {
		t.Fatalf("hold = %d %v; want 201 expiring at %s", h.status, h.body, exp.Format(time.RFC3339))
	}
	clock.Add(31 * time.Second)
	o := r.purchase(t, h.body["id"].(string), "ann", admissionToken("ann", exp))
	if o.status != http.StatusConflict || o.header.Get(protocol.HeaderRelease) != "" {
		t.Fatalf("purchase after the admission expired = %d %v; want 409", o.status, o.body)
	}
	if e := r.event(t, "gig"); e["held"] != 2.0 {
		t.Fatalf("before the sweep: %v, want 2 held", e)
	}
	released, _, err := r.svc.Sweep(context.Background())
	if err != nil || released != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 hold released", released, err)
	}
	if e := r.event(t, "gig"); e["seats_left"] != 2.0 || e["held"] != 0.0 {
		t.Fatalf("after the sweep: %v, want 2 seats left", e)
	}

	// Without the sweeper: a new hold that finds no seat releases the
	// expired hold and takes its seats.
	later := clock.Now().Add(10 * time.Second)
	h = r.hold(t, "gig", "bob", admissionToken("bob", later), 2)
	if h.status != http.StatusCreated {
		t.Fatalf("bob's hold = %d %v", h.status, h.body)
	}
	if a := r.hold(t, "gig", "cat", admissionToken("cat", later), 1); a.status != http.StatusConflict || a.body["seats_left"] != 0.0 {
		t.Fatalf("cat's hold while bob holds all = %d %v; want 409 sold out", a.status, a.body)
	}
	clock.Add(11 * time.Second)
	h = r.hold(t, "gig", "cat", admissionToken("cat", clock.Now().Add(time.Minute)), 1)
	if h.status != http.StatusCreated || fmt.Sprint(seatsOf(h.body)) != "[1]" {
		t.Fatalf("cat's hold after bob's expired = %d %v; want seat 1", h.status, h.body)
	}
	if got := r.do(t, http.MethodGet, "/v1/holds/"+h.body["id"].(string), "", protocol.HeaderUser, "cat"); got.body["state"] != "held" {
		t.Fatalf("GET hold = %d %v", got.status, got.body)
	}
}

// TestDeclinedReleasesSeats: a DECLINED payment fails the order, gives
// the seats back and tells the gate to release the slot.
func TestDeclinedReleasesSeats(t *testing.T) {
	t.Parallel()
	p := startPay(t, 3*time.Second)
	b := institution.DefaultBehavior()
	b.Mode = institution.ModeDecline
	if err := p.inst.SetBehavior(b); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, sqliteFile(t), p, nil)
	r.createEvent(t, "gig", 3)
	adm := admissionToken("dan", time.Now().Add(time.Minute))
	h := r.hold(t, "gig", "dan", adm, 2)
	if e := r.event(t, "gig"); e["held"] != 2.0 || e["seats_left"] != 1.0 {
		t.Fatalf("while held: %v", e)
	}
	o := r.purchase(t, h.body["id"].(string), "dan", adm)
	if o.status != http.StatusOK || o.body["status"] != "failed" || o.body["payment_status"] != "DECLINED" ||
		o.header.Get(protocol.HeaderRelease) != "done" {
		t.Fatalf("purchase declined = %d %v release=%q", o.status, o.body, o.header.Get(protocol.HeaderRelease))
	}
	if e := r.event(t, "gig"); e["held"] != 0.0 || e["seats_left"] != 3.0 || e["sold"] != 0.0 {
		t.Fatalf("after DECLINED: %v, want every seat back", e)
	}
	// The same purchase again answers the same order.
	again := r.purchase(t, h.body["id"].(string), "dan", adm)
	if again.status != http.StatusOK || again.body["id"] != o.body["id"] {
		t.Fatalf("purchase again = %d %v", again.status, again.body)
	}
}

// TestUnknownKeepsHoldUntilSettled: a payment that times out (UNKNOWN)
// keeps the seats held past the hold's expiry; once pay settles it
// APPROVED, reading the order sells them.
func TestUnknownKeepsHoldUntilSettled(t *testing.T) {
	t.Parallel()
	p := startPay(t, 1500*time.Millisecond)
	b := institution.DefaultBehavior()
	b.Mode, b.HangMS = institution.ModeHangAfter, 4000
	if err := p.inst.SetBehavior(b); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, sqliteFile(t), p, func(c *checkout.Config) { c.MaxHold = 2 * time.Second })
	r.createEvent(t, "gig", 1)
	adm := admissionToken("eve", time.Now().Add(time.Minute))
	h := r.hold(t, "gig", "eve", adm, 1)
	o := r.purchase(t, h.body["id"].(string), "eve", adm)
	if o.status != http.StatusAccepted || o.body["status"] != "pending" || o.body["payment_status"] != "UNKNOWN" ||
		o.header.Get(protocol.HeaderRelease) != "" {
		t.Fatalf("purchase with a timed-out payment = %d %v; want 202 pending UNKNOWN, no release", o.status, o.body)
	}
	holdExp, err := time.Parse(time.RFC3339Nano, h.body["expires_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(holdExp.Add(200 * time.Millisecond))) // past the hold's expiry
	if released, _, err := r.svc.Sweep(context.Background()); err != nil || released != 0 {
		t.Fatalf("Sweep = %d, %v; an UNKNOWN payment's hold must stay", released, err)
	}
	if a := r.hold(t, "gig", "fay", admissionToken("fay", time.Now().Add(time.Minute)), 1); a.status != http.StatusConflict {
		t.Fatalf("another hold while the payment is UNKNOWN = %d %v; want sold out", a.status, a.body)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := r.do(t, http.MethodGet, "/v1/orders/"+o.body["id"].(string), "", protocol.HeaderUser, "eve")
		if got.status == http.StatusOK {
			if got.body["status"] != "paid" || got.header.Get(protocol.HeaderRelease) != "done" {
				t.Fatalf("settled order = %v", got.body)
			}
			break
		}
		if got.status != http.StatusAccepted || time.Now().After(deadline) {
			t.Fatalf("order = %d %v; want it settled", got.status, got.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if e := r.event(t, "gig"); e["sold"] != 1.0 || e["held"] != 0.0 {
		t.Fatalf("after settling: %v", e)
	}
}

// TestBadInput: every mistake is a problem+json 4xx naming what is wrong
// (the rig's client checks each answer against openapi.yaml).
func TestBadInput(t *testing.T) {
	t.Parallel()
	p := startPay(t, 3*time.Second)
	r := newRig(t, sqliteFile(t), p, nil)
	r.createEvent(t, "gig", 5)
	adm := admissionToken("gus", time.Now().Add(time.Minute))
	h := r.hold(t, "gig", "gus", adm, 1)
	admin := []string{"Authorization", "Bearer " + adminToken}
	gus := []string{protocol.HeaderUser, "gus", protocol.HeaderAdmission, adm}
	cases := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		code, field              string
	}{
		{"no admin token", "POST", "/v1/events/x", `{"seats":1,"price":1,"currency":"KRW"}`, nil, 401, "unauthorized", ""},
		{"wrong admin token", "POST", "/v1/events/x", `{"seats":1,"price":1,"currency":"KRW"}`, []string{"Authorization", "Bearer nope"}, 401, "unauthorized", ""},
		{"zero seats", "POST", "/v1/events/x", `{"seats":0,"price":1,"currency":"KRW"}`, admin, 400, "invalid", "seats"},
		{"no price", "POST", "/v1/events/x", `{"seats":1,"currency":"KRW"}`, admin, 400, "invalid", "price"},
		{"bad currency", "POST", "/v1/events/x", `{"seats":1,"price":1,"currency":"XXX"}`, admin, 400, "invalid", "currency"},
		{"unknown field", "POST", "/v1/events/x", `{"seats":1,"price":1,"currency":"KRW","vip":true}`, admin, 400, "invalid", "vip"},
		{"bad event id", "POST", "/v1/events/-x", `{"seats":1,"price":1,"currency":"KRW"}`, admin, 400, "invalid", "event"},
		{"event exists", "POST", "/v1/events/gig", `{"seats":1,"price":1,"currency":"KRW"}`, admin, 409, "conflict", ""},
		{"unknown event", "GET", "/v1/events/nope", "", nil, 404, "not_found", ""},
		{"hold without user", "POST", "/v1/events/gig/holds", `{"seats":1}`, nil, 401, "unauthorized", "Stampede-User"},
		{"hold too many", "POST", "/v1/events/gig/holds", `{"seats":11}`, gus, 400, "invalid", "seats"},
		{"hold no seats", "POST", "/v1/events/gig/holds", `{}`, gus, 400, "invalid", "seats"},
		{"hold not JSON", "POST", "/v1/events/gig/holds", `seats=1`, gus, 400, "invalid", ""},
		{"hold unknown event", "POST", "/v1/events/nope/holds", `{"seats":1}`, gus, 404, "not_found", ""},
		{"hold sold out", "POST", "/v1/events/gig/holds", `{"seats":5}`, gus, 409, "conflict", "seats"},
		{"purchase another's hold", "POST", "/v1/holds/" + h.body["id"].(string) + "/purchase", "", []string{protocol.HeaderUser, "hal"}, 404, "not_found", ""},
		{"purchase unknown hold", "POST", "/v1/holds/nope/purchase", "", []string{protocol.HeaderUser, "gus"}, 404, "not_found", ""},
		{"purchase with a body field", "POST", "/v1/holds/" + h.body["id"].(string) + "/purchase", `{"x":1}`, []string{protocol.HeaderUser, "gus"}, 400, "invalid", "x"},
		{"order without user", "GET", "/v1/orders/nope", "", nil, 401, "unauthorized", "Stampede-User"},
		{"unknown order", "GET", "/v1/orders/nope", "", admin, 404, "not_found", ""},
		{"method", "DELETE", "/v1/events/gig", "", nil, 405, "method_not_allowed", ""},
		{"path", "GET", "/v1/nothing", "", nil, 404, "not_found", ""},
	}
	for _, c := range cases {
		a := r.do(t, c.method, c.path, c.body, c.headers...)
		if a.status != c.status || a.body["code"] != c.code || (c.field != "" && a.body["field"] != c.field) ||
			!strings.HasPrefix(a.header.Get("Content-Type"), httpapi.ProblemContentType) {
			t.Errorf("%s: %d %v (%s); want %d %s field %q as problem+json", c.name, a.status, a.body, a.header.Get("Content-Type"), c.status, c.code, c.field)
		}
	}
	// A wrong media type.
	req, _ := http.NewRequest(http.MethodPost, r.base+"/v1/events/gig/holds", strings.NewReader(`{"seats":1}`))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set(protocol.HeaderUser, "gus")
	resp, err := r.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain hold = %d, want 415", resp.StatusCode)
	}
}

// checker is an online AdmissionChecker with a fixed answer.
type checker struct {
	a   protocol.AdmissionStatus
	err error
}

func (c checker) CheckAdmission(context.Context, string, string) (protocol.AdmissionStatus, error) {
	return c.a, c.err
}

// TestAdmissionChecker: with the online check, a hold needs an admission
// that still holds its slot, and expires with the lease the waiting room
// reports.
func TestAdmissionChecker(t *testing.T) {
	t.Parallel()
	p := startPay(t, 3*time.Second)
	lease := time.Now().Add(20 * time.Second).UTC().Truncate(time.Second)
	token := admissionToken("ivy", time.Now().Add(10*time.Second))
	for _, c := range []struct {
		name   string
		chk    checker
		adm    string
		status int
	}{
		{"held", checker{a: protocol.AdmissionStatus{Held: true, User: "ivy", ExpiresAt: lease}}, token, 201},
		{"no token", checker{a: protocol.AdmissionStatus{Held: true, User: "ivy", ExpiresAt: lease}}, "", 401},
		{"released", checker{a: protocol.AdmissionStatus{Reason: "released"}}, token, 403},
		{"waiting room down", checker{err: errors.New("connection refused")}, token, 503},
	} {
		r := newRig(t, sqliteFile(t), p, func(cfg *checkout.Config) { cfg.Admissions = verifier(c.chk) })
		r.createEvent(t, "gig", 1)
		a := r.hold(t, "gig", "ivy", c.adm, 1)
		if a.status != c.status {
			t.Errorf("%s: hold = %d %v, want %d", c.name, a.status, a.body, c.status)
		}
		if c.status == 201 && a.body["expires_at"] != lease.Format(time.RFC3339) {
			t.Errorf("%s: hold expires %v, want the lease's end %s", c.name, a.body["expires_at"], lease.Format(time.RFC3339))
		}
		if c.status != 201 && c.status != 503 && a.body["field"] != protocol.HeaderAdmission {
			t.Errorf("%s: hold = %d %v, want the field %s", c.name, a.status, a.body, protocol.HeaderAdmission)
		}
	}
}

// TestForgedAdmissionRefused: a checkout reached without the gate takes
// no header on trust. A forged, unsigned, expired, other-room or
// other-user token is refused (401 or 403 naming the header at fault),
// both for a hold and for a purchase; the waiting room's real token
// passes.
func TestForgedAdmissionRefused(t *testing.T) {
	t.Parallel()
	p := startPay(t, 3*time.Second)
	r := newRig(t, sqliteFile(t), p, nil)
	r.createEvent(t, "gig", 5)
	exp := time.Now().Add(time.Minute)
	enc := base64.RawURLEncoding.EncodeToString
	payload, _ := json.Marshal(map[string]any{"iss": protocol.AdmissionIssuer, "sub": "kim", "aud": []string{protocol.AdmissionAudiencePrefix + room},
		"room": room, "seq": 1, "adm": time.Now().Unix(), "iat": time.Now().Unix(), "exp": exp.Unix()})
	real := admissionToken("kim", exp)
	parts := strings.Split(real, ".")
	impostor, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: []byte("not the waiting room's secret, at all"), Epoch: "t1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, user, token string
		status            int
		field             string
	}{
		{"no token", "kim", "", 401, protocol.HeaderAdmission},
		{"garbage", "kim", "not-a-token", 401, protocol.HeaderAdmission},
		{"unsigned", "kim", enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc(payload) + ".", 401, protocol.HeaderAdmission},
		{"forged signature", "kim", parts[0] + "." + enc(payload) + "." + enc([]byte("signature")), 401, protocol.HeaderAdmission},
		{"other key", "kim", signedToken(impostor, room, "kim", exp), 401, protocol.HeaderAdmission},
		{"expired", "kim", "", 401, protocol.HeaderAdmission}, // signed below
		{"other room", "kim", signedToken(signer, "another-room", "kim", exp), 403, protocol.HeaderAdmission},
		{"other user", "lou", real, 403, protocol.HeaderUser},
	} {
		if c.name == "expired" {
			// A token cannot be signed already expired: sign one that
			// expires in a second and wait it out.
			c.token = signedToken(signer, room, "kim", time.Now().Add(time.Second))
			time.Sleep(2 * time.Second)
		}
		a := r.hold(t, "gig", c.user, c.token, 1)
		if a.status != c.status || a.body["field"] != c.field {
			t.Errorf("%s: hold = %d %v; want %d naming %s", c.name, a.status, a.body, c.status, c.field)
		}
	}
	h := r.hold(t, "gig", "kim", real, 1)
	if h.status != http.StatusCreated {
		t.Fatalf("the real token: hold = %d %v; want 201", h.status, h.body)
	}
	if got, want := h.body["expires_at"], exp.UTC().Truncate(time.Second).Format(time.RFC3339); got != want {
		t.Errorf("the hold expires at %v, want the token's exp %s", got, want)
	}
	if o := r.purchase(t, h.body["id"].(string), "kim", signedToken(impostor, room, "kim", exp)); o.status != http.StatusUnauthorized ||
		o.body["field"] != protocol.HeaderAdmission {
		t.Errorf("purchase with a forged token = %d %v; want 401 naming %s", o.status, o.body, protocol.HeaderAdmission)
	}
	if o := r.purchase(t, h.body["id"].(string), "kim", real); o.status != http.StatusOK || o.body["status"] != "paid" {
		t.Errorf("purchase with the real token = %d %v; want 200 paid", o.status, o.body)
	}
}

// TestConfigValidateNamesFields: every invalid field is named, all at
// once, in snake_case (the words of serve checkout's flags).
func TestConfigValidateNamesFields(t *testing.T) {
	good := checkout.DefaultConfig()
	good.Store, good.Payer, good.Admissions = sqliteFile(t), noPayer{}, verifier(nil)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := checkout.Config{PayTimeout: -1}
	var got []string
	for _, e := range stampede.FieldErrors(bad.Validate()) {
		got = append(got, e.Field)
	}
	want := []string{"store", "pay", "waitroom", "max_hold", "max_seats_per_hold", "pay_timeout", "sweep_every", "now", "new_id", "logger", "capture"}
	if !slices.Equal(got, want) {
		t.Errorf("Validate named %v, want %v", got, want)
	}
	var fields []string
	for _, e := range stampede.FieldErrors((api.Config{}).Validate()) {
		fields = append(fields, e.Field)
	}
	if !slices.Equal(fields, []string{"admin_token", "max_body", "logger"}) {
		t.Errorf("api.Config{}.Validate() named %v, want admin_token, max_body, logger", fields)
	}
}

// TestBuyerValidate: a buyer has one field of its own, the Stampede-User
// header, named as the API names it: missing is unauthorized, unclean
// text invalid; the admission is left to the verifier.
func TestBuyerValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		buyer checkout.Buyer
		want  stampede.Code // "" for valid
	}{
		{"valid", checkout.Buyer{User: "kim"}, ""},
		{"no user", checkout.Buyer{Admission: "x"}, stampede.Unauthorized},
		{"control character", checkout.Buyer{User: "k\x00m"}, stampede.Invalid},
		{"too long", checkout.Buyer{User: strings.Repeat("k", checkout.MaxUserLen+1)}, stampede.Invalid},
	} {
		errs := stampede.FieldErrors(tc.buyer.Validate())
		switch {
		case tc.want == "" && len(errs) != 0:
			t.Errorf("%s: Validate() = %v, want nil", tc.name, errs)
		case tc.want != "" && (len(errs) != 1 || errs[0].Code != tc.want || errs[0].Field != protocol.HeaderUser):
			t.Errorf("%s: Validate() = %v, want one %s error naming %s", tc.name, errs, tc.want, protocol.HeaderUser)
		}
	}
}

// noPayer is a Payer that is never called.
type noPayer struct{}

func (noPayer) Pay(context.Context, checkout.PaymentRequest) (checkout.Payment, error) {
	return checkout.Payment{}, errors.New("not called")
}

func (noPayer) Capture(context.Context, string, string) (checkout.OperationStatus, error) {
	return "", errors.New("no pay")
}
func (noPayer) Confirm(context.Context, string) error        { return errors.New("no pay") }
func (noPayer) Cancel(context.Context, string, string) error { return errors.New("no pay") }
func (noPayer) PaymentOfOrder(context.Context, string) (checkout.Payment, bool, error) {
	panic("PaymentOfOrder called")
}

func (noPayer) Payment(context.Context, string) (checkout.Payment, error) {
	return checkout.Payment{}, errors.New("not called")
}
