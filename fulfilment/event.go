package fulfilment

import (
	"github.com/stampede-lab/stampede/protocol"
)

// Event is one payment event as the fulfilment reads it: the body pay
// publishes (protocol.PaymentEvent, whose ID method gives the inbox id,
// protocol.EventID(PaymentID, Seq)), and where it came from.
type Event struct {
	protocol.PaymentEvent
	// Partition and Epoch fence the event when Epoch is positive: the
	// stream partition it came from and its consumer's ownership epoch
	// (dispatch/natskeyed Event.Partition and Event.Epoch). They are not
	// in the message body; the worker sets them.
	Partition int
	Epoch     uint64
}

// DecodeEvent reads the body of a payment event as pay/natspub publishes
// it and validates it (protocol.DecodePaymentEvent). Its errors are
// stampede.Invalid and name the field at fault: such a body will never be
// processed and should be set aside.
func DecodeEvent(body []byte) (Event, error) {
	pe, err := protocol.DecodePaymentEvent(body)
	if err != nil {
		return Event{}, err
	}
	return Event{PaymentEvent: pe}, nil
}
