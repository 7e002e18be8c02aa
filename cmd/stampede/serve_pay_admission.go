package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// payAdmissionOptions are serve pay's flags of --require-admission.
type payAdmissionOptions struct {
	require     bool
	waitroom    string
	room        string
	checkoutKey string
	timeout     time.Duration
}

// defaultAdmissionTimeout is the default deadline of one call to the
// waiting room.
const defaultAdmissionTimeout = time.Second

// flags registers the admission flags on cmd.
func (o *payAdmissionOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&o.require, "require-admission", false, "accept a new payment only with a Stampede-Admission header whose admission token verifies\n"+
		"against the waiting room's keys (/.well-known/jwks.json at --waitroom) and still holds its slot, asked online\n"+
		"(401/403 naming the header otherwise, 503 when the waiting room cannot say)")
	f.StringVar(&o.waitroom, "waitroom", "", "with --require-admission: the waiting room's (or a gate's) base URL, or several, comma-separated")
	f.StringVar(&o.room, "admission-room", "", "with --require-admission: the room whose admissions are accepted")
	f.StringVar(&o.checkoutKey, "checkout-key", "", "with --require-admission: the waiting room's --checkout-key")
	f.DurationVar(&o.timeout, "admission-timeout", defaultAdmissionTimeout, "with --require-admission: deadline of one call to the waiting room")
}

// validate reports every unusable flag at once, each field named as its
// flag.
func (o *payAdmissionOptions) validate() error {
	var f stampede.Fields
	if o.room == "" {
		f.Add("admission_room", "is required: the room whose admissions pay accepts")
	} else {
		f.Check("admission_room", waitroom.ValidateRoom(o.room))
	}
	if o.checkoutKey == "" {
		f.Add("checkout_key", "is required: the waiting room's checkout key")
	}
	if o.timeout <= 0 {
		f.Add("admission_timeout", "must be positive, got %s", o.timeout)
	}
	if strings.TrimSpace(o.waitroom) == "" {
		f.Add("waitroom", "is required: the waiting room's (or a gate's) base URL")
		return f.Err()
	}
	for _, u := range strings.Split(o.waitroom, ",") {
		wc := waitroom.DefaultClientConfig()
		wc.BaseURL, wc.CheckoutKey, wc.Timeout = strings.TrimSpace(u), o.checkoutKey, max(o.timeout, time.Nanosecond)
		if err := wc.Validate(); err != nil {
			e := stampede.As(err)
			switch e.Field {
			case "BaseURL":
				f.Add("waitroom", "%s", e.Message)
			case "CheckoutKey":
				f.Add("checkout_key", "%s", e.Message)
			default:
				f.Check("waitroom", err)
			}
		}
	}
	return f.Err()
}

// verifier returns the admission verifier the flags ask for, or nil
// without --require-admission: admission tokens are verified against the
// waiting room's JWKS and then checked online.
func (o *payAdmissionOptions) verifier() (*protocol.AdmissionVerifier, error) {
	if !o.require {
		if o.waitroom != "" || o.room != "" || o.checkoutKey != "" {
			return nil, errors.New("--waitroom, --admission-room and --checkout-key need --require-admission")
		}
		return nil, nil
	}
	if err := o.validate(); err != nil {
		return nil, flagErrors("", err)
	}
	var (
		urls    []string
		clients []*waitroom.Client
	)
	for _, u := range strings.Split(o.waitroom, ",") {
		u = strings.TrimSuffix(strings.TrimSpace(u), "/")
		wc := waitroom.DefaultClientConfig()
		wc.BaseURL, wc.CheckoutKey, wc.Timeout = u, o.checkoutKey, o.timeout
		c, err := waitroom.NewClient(wc)
		if err != nil {
			return nil, flagErrors("", err)
		}
		urls, clients = append(urls, u), append(clients, c)
	}
	return &protocol.AdmissionVerifier{
		Room:   o.room,
		Keys:   &jwksKeys{urls: urls, timeout: o.timeout, ttl: jwksTTL, hc: &http.Client{}, now: time.Now},
		Online: &onlineAdmissions{clients: clients},
	}, nil
}

// jwksTTL is how long a fetched JWKS is used before it is fetched again.
const jwksTTL = 30 * time.Second

// jwksKeys is a protocol.KeySource over the waiting room's
// /.well-known/jwks.json: fetched from the first instance that answers,
// kept for ttl, and kept past it while no instance answers.
type jwksKeys struct {
	urls    []string
	timeout time.Duration
	ttl     time.Duration
	hc      *http.Client
	now     func() time.Time

	mu      sync.Mutex
	keys    jose.JSONWebKeySet
	fetched time.Time
}

// AdmissionKeys implements protocol.KeySource.
func (j *jwksKeys) AdmissionKeys(ctx context.Context) (jose.JSONWebKeySet, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.fetched.IsZero() && j.now().Sub(j.fetched) < j.ttl {
		return j.keys, nil
	}
	var errs []error
	for _, u := range j.urls {
		keys, err := j.fetch(ctx, u+"/.well-known/jwks.json")
		if err == nil {
			j.keys, j.fetched = keys, j.now()
			return keys, nil
		}
		errs = append(errs, err)
	}
	if !j.fetched.IsZero() {
		return j.keys, nil // stale, but the waiting room's keys rotate rarely
	}
	return jose.JSONWebKeySet{}, errors.Join(errs...)
}

// fetch reads one JWKS document.
func (j *jwksKeys) fetch(ctx context.Context, url string) (jose.JSONWebKeySet, error) {
	ctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	resp, err := j.hc.Do(req)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return jose.JSONWebKeySet{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var keys jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&keys); err != nil {
		return jose.JSONWebKeySet{}, fmt.Errorf("GET %s: %w", url, err)
	}
	return keys, nil
}

// onlineAdmissions is a protocol.AdmissionChecker over the waiting room's
// HTTP API (POST /v1/rooms/{room}/admissions/check with the checkout
// key), trying the instances in turn when one does not answer.
type onlineAdmissions struct {
	clients []*waitroom.Client
	next    atomic.Uint32
}

// CheckAdmission implements protocol.AdmissionChecker. The waiting room's
// 4xx about the token is a Forbidden error naming the admission header;
// anything else that is not an answer (no answer, a 5xx, a rejected
// checkout key, an unknown room) is an error the verifier answers with
// 503.
func (o *onlineAdmissions) CheckAdmission(ctx context.Context, room, token string) (protocol.AdmissionStatus, error) {
	var (
		a   waitroom.Admission
		err error
	)
	first := int(o.next.Add(1))
	for i := range o.clients {
		a, err = o.clients[(first+i)%len(o.clients)].Check(ctx, room, token)
		if e, answered := errors.AsType[*stampede.Error](err); err == nil || (answered && httpapi.ErrorStatus(e) < 500) || ctx.Err() != nil {
			break // an answer, good or bad: the next instance would say the same
		}
	}
	if err != nil {
		if e, ok := errors.AsType[*stampede.Error](err); ok && e.Field == "admission_token" && httpapi.ErrorStatus(e) < 500 {
			return protocol.AdmissionStatus{}, &stampede.Error{Code: stampede.Forbidden, Field: protocol.HeaderAdmission,
				Message: "the waiting room does not accept the admission token"}
		}
		return protocol.AdmissionStatus{}, fmt.Errorf("the waiting room's admission check: %w", err)
	}
	return protocol.AdmissionStatus{Held: a.Held, Reason: a.Reason, User: a.UserID, ExpiresAt: a.ExpiresAt}, nil
}
