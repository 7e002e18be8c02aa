// Package admissioncheck is pay's pay.AdmissionChecker over the waiting
// room's HTTP API: POST /v1/rooms/{room}/admissions/check with the
// checkout key, bound to one room (serve pay --require-admission).
package admissioncheck

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
	wrclient "github.com/stampede-lab/stampede/waitroom/client"
)

var _ pay.AdmissionChecker = (*Checker)(nil)

// Config configures a Checker.
type Config struct {
	// WaitingRoom is the waiting room's (or a gate's) base URL, or
	// several, comma-separated: the instances of one waiting room, tried
	// in turn when one does not answer.
	WaitingRoom string
	// Room is the room whose admissions pay accepts.
	Room string
	// CheckoutKey authorizes the check (the waiting room's --checkout-key).
	CheckoutKey string
	// Timeout bounds one check.
	Timeout time.Duration
}

// DefaultConfig returns a one-second timeout; the other fields must be set.
func DefaultConfig() Config { return Config{Timeout: time.Second} }

// Validate reports the first unusable field by name.
func (c Config) Validate() error {
	switch {
	case c.Room == "":
		return stampede.InvalidField("Room", "is required: the room whose admissions pay accepts")
	case waitroom.ValidateRoom(c.Room) != nil:
		return stampede.InvalidField("Room", "%v", waitroom.ValidateRoom(c.Room))
	case c.CheckoutKey == "":
		return stampede.InvalidField("CheckoutKey", "is required: the waiting room's checkout key")
	}
	for _, u := range strings.Split(c.WaitingRoom, ",") {
		wc := wrclient.DefaultConfig()
		wc.BaseURL, wc.CheckoutKey, wc.Timeout = strings.TrimSpace(u), c.CheckoutKey, c.Timeout
		if err := wc.Validate(); err != nil {
			if e, ok := errors.AsType[*stampede.Error](err); ok {
				field := map[string]string{"base_url": "WaitingRoom", "timeout": "Timeout", "checkout_key": "CheckoutKey"}[e.Field]
				if field == "" {
					field = e.Field
				}
				return stampede.InvalidField(field, "%s", e.Message)
			}
			return err
		}
	}
	return nil
}

// Checker checks admissions of one room online.
type Checker struct {
	cs   []*wrclient.Client
	room string
	next atomic.Uint32
}

// New returns a Checker for cfg.
func New(cfg Config) (*Checker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ch := &Checker{room: cfg.Room}
	for _, u := range strings.Split(cfg.WaitingRoom, ",") {
		wc := wrclient.DefaultConfig()
		wc.BaseURL, wc.CheckoutKey, wc.Timeout = strings.TrimSpace(u), cfg.CheckoutKey, cfg.Timeout
		c, err := wrclient.New(wc)
		if err != nil {
			return nil, err
		}
		ch.cs = append(ch.cs, c)
	}
	return ch, nil
}

// CheckAdmission implements pay.AdmissionChecker. The waiting room's
// verdict on the token is an Admission (an invalid or foreign token is
// not held); its 4xx answer about the token field is a 403 naming the
// header; anything else (no answer, 5xx, a rejected checkout key, an
// unknown room) is an error pay answers with 503.
func (c *Checker) CheckAdmission(ctx context.Context, token string) (pay.Admission, error) {
	var (
		a   wrclient.Admission
		err error
	)
	first := int(c.next.Add(1))
	for i := range c.cs {
		a, err = c.cs[(first+i)%len(c.cs)].Check(ctx, c.room, token)
		if e, answered := errors.AsType[*stampede.Error](err); err == nil || (answered && httpapi.ErrorStatus(e) < 500) || ctx.Err() != nil {
			break // an answer, good or bad: the next instance would say the same
		}
	}
	if err != nil {
		if e, ok := errors.AsType[*stampede.Error](err); ok && e.Field == "admission_token" && httpapi.ErrorStatus(e) < 500 {
			return pay.Admission{}, &pay.Error{Code: pay.CodeForbidden, Field: protocol.HeaderAdmission,
				Message: "the waiting room does not accept the admission token"}
		}
		return pay.Admission{}, err
	}
	return pay.Admission{Held: a.Held, Reason: a.Reason, User: a.UserID, ExpiresAt: a.ExpiresAt}, nil
}
