// Package deploy holds Stampede's deployment files and the Prometheus
// metrics they may rely on. It has no code to run; its tests check the
// files, because no Docker engine runs where Stampede is developed:
//
//	../Dockerfile                 the stampede binary (static, CGO off) in a distroless image, user 65532
//	compose.yaml                  Redis, PostgreSQL, NATS JetStream, three waiting rooms, the
//	                              institution simulator, the payment service, Prometheus, Grafana
//	prometheus.yml                Prometheus's scrape targets: one job per service; the waiting rooms,
//	                              whose metrics name rooms, with the metrics token (a compose secret)
//	grafana/stampede.json         the Grafana dashboard
//	grafana/provisioning/         Grafana's data source and dashboard provisioning for compose.yaml
//	alerts.yaml                   Prometheus alerting rules; alerts_test.yaml tests each (promtool)
//	forward-auth/                 nginx, Caddy, Traefik and Envoy asking stampede serve forward-auth
//
// This package's tests parse the dashboard and check that every metric it
// queries is one of Metrics, and that Prometheus scrapes every stampede
// service of compose.yaml on the port its command listens on. The tests of
// cmd/stampede check compose.yaml's commands and variables against the real
// command line, and build the binary the way the Dockerfile does.
package deploy

// Metric is a Prometheus metric a Stampede service exports.
type Metric struct {
	// Name is the metric's name; a histogram's series add _bucket, _sum
	// and _count to it.
	Name string
	// Type is counter, gauge or histogram.
	Type string
	// Labels are the metric's labels, besides Prometheus's job and instance.
	Labels []string
	// Help says what the metric counts.
	Help string
}

// Metrics are the metrics the dashboard and alerts may query: every name
// grafana/stampede.json uses is one of these.
var Metrics = []Metric{
	// Every HTTP service (internal/httpapi).
	{"http_requests_total", "counter", []string{"route", "method", "code"}, "HTTP requests answered, by route pattern, method and status code."},
	{"http_request_duration_seconds", "histogram", []string{"route", "method"}, "Time to answer an HTTP request."},

	// The waiting room: the state of each room, read from the store at
	// scrape time (every instance reports the same values).
	{"stampede_waitroom_room_waiting", "gauge", []string{"room"}, "Users waiting in the room's queue."},
	{"stampede_waitroom_room_active", "gauge", []string{"room"}, "Users admitted and holding a slot."},
	{"stampede_waitroom_room_capacity", "gauge", []string{"room"}, "The room's capacity (the window's in force, with a schedule)."},
	{"stampede_waitroom_room_oldest_wait_seconds", "gauge", []string{"room"}, "How long the user at the head of the queue has waited."},
	{"stampede_waitroom_admission_rate_per_second", "gauge", []string{"room"}, "Admissions per second over the store's rate window, all instances together."},
	{"stampede_waitroom_room_sale_phase", "gauge", []string{"room", "phase"}, "1 for the phase the room's sale is in (before, open, between, closed), 0 for the others."},
	{"stampede_waitroom_room_invites", "gauge", []string{"room", "kind"}, "The room's invites: used (got a place), refused (used again), held (remembered by the store)."},
	{"stampede_waitroom_store_up", "gauge", nil, "1 if the store answered every request of the scrape, else 0."},
	{"stampede_waitroom_store_inflight", "gauge", nil, "Per-user store calls (joins, polls, leaves) this instance has in flight."},
	{"stampede_waitroom_store_inflight_limit", "gauge", nil, "The bound on this instance's per-user store calls in flight (it adapts to the store's answer times)."},
	{"stampede_waitroom_store_refused_total", "counter", nil, "Per-user store calls refused at once (503) because the bound was reached."},
	// The waiting room: what this instance's admission passes did.
	{"stampede_waitroom_admitted_total", "counter", []string{"room"}, "Users admitted by this instance's admission passes."},
	{"stampede_waitroom_expired_total", "counter", []string{"room"}, "Leases that ran out and were reclaimed."},
	{"stampede_waitroom_admission_pass_errors_total", "counter", []string{"room"}, "Admission passes that failed."},
	{"stampede_waitroom_store_round_trips_total", "counter", []string{"mode"}, "Store requests made by admission passes."},
	{"stampede_waitroom_admission_pass_seconds", "histogram", []string{"mode"}, "How long one admission pass took in the store."},

	// Payments.
	{"stampede_pay_payments_total", "counter", []string{"status"}, "Payments created, by the status the first call left them in."},
	{"stampede_pay_approval_seconds", "histogram", nil, "Time spent on the approval call of a payment."},
	{"stampede_pay_settled_total", "counter", []string{"status"}, "UNKNOWN payments settled by a status inquiry, by the status reached."},
	{"stampede_pay_review_flagged_total", "counter", nil, "Payments flagged for manual review."},
	{"stampede_pay_recovered_total", "counter", nil, "PENDING payments found at start-up and turned UNKNOWN."},
	{"stampede_pay_payments_unsettled", "gauge", []string{"status"}, "Payments not settled yet (PENDING, UNKNOWN), by status."},
	{"stampede_pay_payments_flagged", "gauge", nil, "Payments flagged for manual review and not resolved."},
	{"stampede_pay_outbox_lag_seconds", "gauge", nil, "Age of the oldest outbox row not yet published to NATS JetStream."},

	// The payment-institution simulator.
	{"stampede_institution_arrivals_total", "counter", nil, "Approval requests received."},
	{"stampede_institution_approvals_total", "counter", []string{"status"}, "Approval requests processed, by result."},
	{"stampede_institution_replays_total", "counter", nil, "Repeated external keys answered with their first result."},
	{"stampede_institution_charges_total", "counter", nil, "Charges made; more than the approvals means double charges."},
	{"stampede_institution_busy_total", "counter", nil, "Requests refused with 503 because the hang modes held their maximum."},
	{"stampede_institution_hung_requests", "gauge", nil, "Requests held by a hang mode right now."},

	// The fulfilment workers (serve worker).
	{"stampede_worker_partition_lag", "gauge", []string{"partition"}, "Messages of the partition not yet delivered to any worker."},

	// Every service with a /readyz (internal/httpapi), read at scrape time.
	{"stampede_ready", "gauge", []string{"check"}, "1 when the readiness check answered within its deadline, else 0."},
}
