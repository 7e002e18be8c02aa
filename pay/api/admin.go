package api

import (
	"math"
	"net/http"
	"strconv"

	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
)

// minAdminToken is the shortest admin token accepted.
const minAdminToken = 16

// maxAdminPage is the largest page of GET /v1/admin/payments.
const maxAdminPage = 500

// adminHandler serves the operator's read-only endpoints, authorized by
// the admin token alone: a merchant's API key opens none of them, and
// the admin token opens no merchant endpoint.
type adminHandler struct {
	svc   *pay.Service
	store pay.Store
	admin pay.AdminStore
	// guard checks the admin token and limits wrong ones per client
	// address (an IPv4 address, an IPv6 /64): AdminFailures a minute,
	// then 429.
	guard *httpapi.BearerGuard
}

// AdminFailures is how many wrong admin tokens one client address may send
// in a minute; past that every admin call from it answers 429 with
// Retry-After until the minute ends, right token or not.
const AdminFailures = 10

// registerAdmin adds the admin endpoints to api when cfg has an admin
// token:
//
//	GET /v1/admin/payments?flagged=true&after=<id>&limit=<n>  payments (flagged only), by ID
//	GET /v1/admin/payments/{id}                               any merchant's payment with its history
//	GET /v1/admin/stats                                       payments by status, flagged, outbox lag
func registerAdmin(api *httpapi.API, svc *pay.Service, store pay.Store, cfg Config) error {
	if cfg.AdminToken == "" {
		return nil
	}
	as, ok := store.(pay.AdminStore)
	if !ok {
		return pay.Invalid("admin_token", "is set but the store %T has no admin reads (pay.AdminStore)", store)
	}
	h := &adminHandler{svc: svc, store: store, admin: as, guard: httpapi.NewBearerGuard(cfg.AdminToken, AdminFailures, "admin token")}
	api.Handle("/v1/admin/payments", httpapi.Methods{http.MethodGet: h.list})
	api.Handle("/v1/admin/payments/{id}", httpapi.Methods{http.MethodGet: h.get})
	api.Handle("/v1/admin/stats", httpapi.Methods{http.MethodGet: h.stats})
	return nil
}

// authorize checks "Authorization: Bearer <admin token>" in constant time
// (over the tokens' SHA-256, so that the length leaks nothing either).
// A client address that sent AdminFailures wrong tokens in a minute is
// refused (429) before its token is even compared.
func (h *adminHandler) authorize(r *http.Request) error { return h.guard.Authorize(r) }

// adminPage is GET /v1/admin/payments's answer.
type adminPage struct {
	Payments []View `json:"payments"`
	// NextAfter, when set, is the after= of the next page.
	NextAfter string `json:"next_after,omitempty"`
}

// list answers GET /v1/admin/payments.
func (h *adminHandler) list(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r); err != nil {
		return err
	}
	q := r.URL.Query()
	flagged := false
	if v := q.Get("flagged"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return pay.Invalid("flagged", "must be true or false, got %q", v)
		}
		flagged = b
	}
	after := q.Get("after")
	if after != "" {
		id, err := pay.ParseUUID(after)
		if err != nil {
			return pay.Invalid("after", "must be a payment id (UUID)")
		}
		after = id.String()
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAdminPage {
			return pay.Invalid("limit", "must be an integer between 1 and %d, got %q", maxAdminPage, v)
		}
		limit = n
	}
	var (
		ps  []pay.Payment
		err error
	)
	if flagged {
		ps, err = h.admin.ListFlagged(r.Context(), after, limit)
	} else {
		ps, err = h.store.List(r.Context(), after, limit)
	}
	if err != nil {
		return err
	}
	out := adminPage{Payments: make([]View, 0, len(ps))}
	for _, p := range ps {
		out.Payments = append(out.Payments, ViewOf(p))
	}
	if len(ps) == limit {
		out.NextAfter = ps[len(ps)-1].ID
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// get answers GET /v1/admin/payments/{id}.
func (h *adminHandler) get(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r); err != nil {
		return err
	}
	p, err := h.svc.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, ViewOf(p))
	return nil
}

// adminStats is GET /v1/admin/stats's answer.
type adminStats struct {
	// ByStatus counts the payments in every status (zeros included).
	ByStatus map[pay.Status]int `json:"by_status"`
	// Flagged counts the payments flagged for manual review.
	Flagged int `json:"flagged"`
	// OutboxLagSeconds is the age of the oldest unpublished outbox row;
	// 0 when every row is published.
	OutboxLagSeconds float64 `json:"outbox_lag_seconds"`
}

// stats answers GET /v1/admin/stats.
func (h *adminHandler) stats(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r); err != nil {
		return err
	}
	counts, err := h.admin.CountByStatus(r.Context())
	if err != nil {
		return err
	}
	st, err := h.store.Stats(r.Context())
	if err != nil {
		return err
	}
	out := adminStats{ByStatus: map[pay.Status]int{}, Flagged: st.Flagged,
		OutboxLagSeconds: math.Round(st.OutboxLag(h.svc.Now()).Seconds()*1000) / 1000}
	for _, s := range []pay.Status{pay.StatusPending, pay.StatusApproved, pay.StatusDeclined, pay.StatusUnknown, pay.StatusFailed} {
		out.ByStatus[s] = counts[s]
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}
