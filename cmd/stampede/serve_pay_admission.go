package main

import (
	"errors"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede"
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
	var f stampede.Fields
	if o.room != "" {
		f.Check("admission_room", waitroom.ValidateRoom(o.room))
	}
	a := admissionFlags{waitroom: o.waitroom, room: o.room, roomFlag: "admission_room", checkoutKey: o.checkoutKey, online: true, timeout: o.timeout}
	v, err := a.verifier(&http.Client{})
	f.Check("", err)
	if err := f.Err(); err != nil {
		return nil, flagErrors("", err)
	}
	return v, nil
}
