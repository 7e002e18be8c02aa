package protocol_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
)

func TestPaymentEventValidateNamesEveryBadField(t *testing.T) {
	ev := protocol.PaymentEvent{PaymentID: "pay_1", Seq: 0, Status: protocol.StatusApproved, OrderID: "o-1", Amount: -1}
	err := ev.Validate()
	var got []string
	for _, e := range stampede.FieldErrors(err) {
		got = append(got, e.Field)
	}
	if want := []string{"seq", "merchant_id", "amount"}; !slices.Equal(got, want) {
		t.Errorf("bad fields = %v, want %v", got, want)
	}
	var first *stampede.Error
	if !errors.As(err, &first) || first.Field != "seq" || first.Code != stampede.Invalid {
		t.Errorf("errors.As finds %v, want the Invalid seq error first", first)
	}
}
