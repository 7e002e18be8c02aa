package worker

import (
	"net/http"

	"github.com/stampede-lab/stampede"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// AdminFailures is how many wrong admin tokens one client address may
// send in a minute before every admin call from it answers 429.
const AdminFailures = 10

// Parked is GET /v1/parked's answer: the keys parked on the worker's
// consumer (each with its failed event and reason) and their events.
type Parked struct {
	Keys   []dispatchjs.ParkedKey `json:"keys"`
	Events uint64                 `json:"events"`
}

// RegisterAdmin adds the worker's read-only admin endpoint to api,
// authorized by token (a bearer token, throttled):
//
//	GET /v1/parked   the parked keys of the consumer and their event counts
//
// The operator console lists them; `stampede events redrive` sends them
// again once their cause is fixed.
func RegisterAdmin(api *httpapi.API, pk *dispatchjs.Parking, token string) {
	guard := httpapi.NewBearerGuard(token, AdminFailures, "admin token")
	api.Handle("/v1/parked", httpapi.Methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) error {
		if err := guard.Authorize(r); err != nil {
			return err
		}
		keys, err := pk.List(r.Context())
		if err != nil {
			return stampede.UnavailableErr("the parking bucket", err)
		}
		out := Parked{Keys: keys}
		if out.Keys == nil {
			out.Keys = []dispatchjs.ParkedKey{}
		}
		for _, k := range keys {
			out.Events += k.Events
		}
		httpapi.WriteJSON(w, http.StatusOK, out)
		return nil
	}})
}
