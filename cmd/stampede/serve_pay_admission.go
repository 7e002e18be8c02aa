package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/admissioncheck"
)

// payAdmissionOptions are serve pay's flags of --require-admission.
type payAdmissionOptions struct {
	require     bool
	waitroom    string
	room        string
	checkoutKey string
	timeout     time.Duration
}

func (o *payAdmissionOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&o.require, "require-admission", false, "accept a new payment only with a Stampede-Admission header whose admission still holds its slot,\n"+
		"asked online at --waitroom (401/403 naming the header otherwise, 503 when the waiting room cannot say)")
	f.StringVar(&o.waitroom, "waitroom", "", "with --require-admission: the waiting room's (or a gate's) base URL")
	f.StringVar(&o.room, "admission-room", "", "with --require-admission: the room whose admissions are accepted")
	f.StringVar(&o.checkoutKey, "checkout-key", "", "with --require-admission: the waiting room's --checkout-key")
	f.DurationVar(&o.timeout, "admission-timeout", admissioncheck.DefaultConfig().Timeout, "with --require-admission: deadline of one online check")
}

// checker returns the admission checker the flags ask for, or nil
// without --require-admission.
func (o *payAdmissionOptions) checker() (pay.AdmissionChecker, error) {
	if !o.require {
		if o.waitroom != "" || o.room != "" || o.checkoutKey != "" {
			return nil, errors.New("--waitroom, --admission-room and --checkout-key need --require-admission")
		}
		return nil, nil
	}
	cfg := admissioncheck.DefaultConfig()
	cfg.WaitingRoom, cfg.Room, cfg.CheckoutKey, cfg.Timeout = o.waitroom, o.room, o.checkoutKey, o.timeout
	c, err := admissioncheck.New(cfg)
	if e, ok := errors.AsType[*stampede.Error](err); ok {
		flag := map[string]string{"WaitingRoom": "--waitroom", "Room": "--admission-room", "CheckoutKey": "--checkout-key", "Timeout": "--admission-timeout"}[e.Field]
		if flag != "" {
			return nil, fmt.Errorf("%s %s", flag, e.Message)
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}
