package pay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/stampede-lab/stampede/pay"
)

// gauge returns the value of the gauge name (with label status, if
// given) in r's registry, or fails.
func (r *rig) gauge(t *testing.T, name, status string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if status == "" || hasLabel(m, "status", status) {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no gauge %s{status=%q}", name, status)
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestStoreGaugesReadTheStore: the dashboard's gauges are read from the
// store at scrape time.
func TestStoreGaugesReadTheStore(t *testing.T) {
	now := time.Now()
	r := newRig(t, func(c *pay.Config) { c.Now = func() time.Time { return now.Add(time.Minute) } })
	ctx := context.Background()
	var ids []string
	for i := range 3 {
		p, err := r.store.CreatePending(ctx, pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: fmt.Sprint("g-", i), Amount: 100, Currency: "KRW"},
			pay.IdempotencyRecord{Key: fmt.Sprint("gauge-key-", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	if _, err := r.store.Transition(ctx, ids[0], pay.StatusPending, pay.StatusUnknown, "timeout"); err != nil {
		t.Fatal(err)
	}
	if err := r.store.FlagReview(ctx, ids[0], "look"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, status string
		want         float64
	}{
		{"stampede_pay_payments_unsettled", "PENDING", 2},
		{"stampede_pay_payments_unsettled", "UNKNOWN", 1},
		{"stampede_pay_payments_flagged", "", 1},
	} {
		if got := r.gauge(t, c.name, c.status); got != c.want {
			t.Errorf("%s{status=%q} = %v, want %v", c.name, c.status, got, c.want)
		}
	}
	// The lag is measured on the service's clock.
	st, err := r.store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := now.Add(time.Minute).Sub(st.OldestUnpublished).Seconds()
	if lag := r.gauge(t, "stampede_pay_outbox_lag_seconds", ""); lag != want || lag <= 0 {
		t.Errorf("outbox lag = %vs, want %vs", lag, want)
	}
}
