package main

import (
	"net/http"
	"strings"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom/client"
)

// admissionFlags say how a service that trusts admissions (serve checkout,
// serve pay --require-admission) reaches the waiting room that issues them.
type admissionFlags struct {
	// waitroom is the waiting room's base URL, or several (its instances
	// or its gates), comma-separated.
	waitroom string
	// room is the room whose admissions are accepted.
	room string
	// roomFlag is the flag that sets room, for the error.
	roomFlag string
	// checkoutKey, when online, authorizes the online check.
	checkoutKey string
	// online asks the waiting room whether each admission still holds its
	// slot, after the token verified.
	online bool
	// timeout bounds one fetch of the keys and one online check.
	timeout time.Duration
}

// verifier returns the admission verifier the flags ask for: the token
// against the waiting room's JWKS (fetched from the first address that
// answers, cached, fetched again for a key it lacks), and optionally the
// online check; every bad flag is reported at once, named as its flag.
func (a admissionFlags) verifier(hc *http.Client) (*protocol.AdmissionVerifier, error) {
	var f stampede.Fields
	var urls []string
	for u := range strings.SplitSeq(a.waitroom, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		f.Add("waitroom", "is required: the waiting room's (or its gates') base URL, whose keys verify admissions")
	}
	if a.room == "" {
		f.Add(a.roomFlag, "is required: the room whose admissions are accepted")
	}
	if a.online && a.checkoutKey == "" {
		f.Add("checkout_key", "is required for the online check: the waiting room's checkout key")
	}
	if a.timeout <= 0 {
		f.Add("admission_timeout", "must be positive, got %s", a.timeout)
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	kc := client.DefaultKeysConfig()
	kc.BaseURL, kc.Others, kc.Timeout, kc.HTTPClient = urls[0], urls[1:], a.timeout, hc
	keys, err := client.NewKeys(kc)
	f.Check("waitroom", flatten(err))
	v := &protocol.AdmissionVerifier{Room: a.room, Keys: keys}
	if a.online {
		var online client.Failover
		for _, u := range urls {
			cc := client.DefaultConfig()
			cc.BaseURL, cc.CheckoutKey, cc.Timeout, cc.HTTPClient = u, a.checkoutKey, a.timeout, hc
			c, err := client.New(cc)
			for _, e := range stampede.FieldErrors(err) {
				if e.Field == "checkout_key" {
					f.Check("checkout_key", flatten(e))
				}
			}
			online = append(online, c)
		}
		v.Online = online
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return v, v.Validate()
}

// flatten drops the field of err's errors, so that Fields.Check names
// them by the flag it is given.
func flatten(err error) error {
	var out []error
	for _, e := range stampede.FieldErrors(err) {
		c := *e
		c.Field = ""
		out = append(out, &c)
	}
	return stampede.Join(out...)
}
