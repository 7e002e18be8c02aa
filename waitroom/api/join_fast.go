package api

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/internal/jsonbody"
)

// The join is the waiting room's hottest request: a sale's crowd arrives
// at once. Its body is read and its answer written by hand here, without
// encoding/json's reflection, in exactly the bytes encoding/json would
// read and write (join_fast_test.go holds them to that).

// DecodeFast implements jsonbody.FastDecoder: a join body whose members
// are all known, with plain strings and whole numbers. Anything else is
// left to encoding/json, which gives the same result or words the error.
func (b *joinBody) DecodeFast(data []byte) bool {
	var v joinBody
	ok := jsonbody.Members(data, func(m jsonbody.Member) bool {
		switch string(m.Name) {
		case "user_id":
			return m.String(&v.UserID)
		case "user_sig":
			return m.String(&v.UserSig)
		case "user_expires":
			return m.Int64(&v.UserExpires)
		case "challenge":
			return m.String(&v.Challenge)
		case "solution":
			return m.String(&v.Solution)
		case "invite":
			return m.String(&v.Invite)
		}
		return false
	})
	if ok {
		*b = v
	}
	return ok
}

// appendJSON appends v as encoding/json's Marshal writes it. It reports
// false, leaving that to encoding/json, for an ETA that is not a finite
// number.
func (v *ticketJSON) appendJSON(dst []byte) ([]byte, bool) {
	dst = append(dst, `{"room":`...)
	dst = jsonbody.AppendString(dst, v.Room)
	dst = append(dst, `,"user_id":`...)
	dst = jsonbody.AppendString(dst, v.UserID)
	dst = append(dst, `,"state":`...)
	dst = jsonbody.AppendString(dst, string(v.State))
	for _, f := range [...]struct {
		name string
		n    *int64
	}{{`,"position":`, v.Position}, {`,"ahead":`, v.Ahead}} {
		dst = append(dst, f.name...)
		if f.n == nil {
			dst = append(dst, "null"...)
		} else {
			dst = strconv.AppendInt(dst, *f.n, 10)
		}
	}
	for _, f := range [...]struct {
		name string
		x    *float64
	}{{`,"eta_seconds":`, v.ETASeconds}, {`,"eta_low_seconds":`, v.ETALowSeconds}, {`,"eta_high_seconds":`, v.ETAHighSeconds}} {
		dst = append(dst, f.name...)
		if f.x == nil {
			dst = append(dst, "null"...)
			continue
		}
		var ok bool
		if dst, ok = jsonbody.AppendFloat(dst, *f.x); !ok {
			return dst, false
		}
	}
	if v.ETABasis != "" { // omitempty
		dst = append(dst, `,"eta_basis":`...)
		dst = jsonbody.AppendString(dst, string(v.ETABasis))
	}
	dst = append(dst, `,"poll_after_ms":`...)
	dst = strconv.AppendInt(dst, v.PollAfterMS, 10)
	for _, f := range [...]struct{ name, value string }{
		{`,"ticket_token":`, v.TicketToken},
		{`,"admission_token":`, v.AdmissionToken},
		{`,"lease_expires_at":`, v.LeaseExpiresAt},
		{`,"message":`, v.Message},
		{`,"sale":`, string(v.Sale)},
	} {
		if f.value != "" { // omitempty
			dst = append(dst, f.name...)
			dst = jsonbody.AppendString(dst, f.value)
		}
	}
	if v.SaleResumesAt != nil {
		dst = append(dst, `,"sale_resumes_at":`...)
		dst = jsonbody.AppendString(dst, *v.SaleResumesAt)
	}
	return append(dst, '}'), true
}

// answerBuffers holds buffers for ticket answers.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledAnswer is the largest answer buffer kept for reuse.
const maxPooledAnswer = 16 << 10

// writeTicket answers v as JSON with status, as writeJSON would.
func writeTicket(w http.ResponseWriter, status int, v ticketJSON) {
	buf := answerBuffers.Get().(*[]byte)
	body, ok := v.appendJSON((*buf)[:0])
	if ok {
		body = append(body, '\n') // as writeJSON ends its answers
		httpapi.WriteRawJSON(w, status, body)
	} else {
		writeJSON(w, status, v)
	}
	if cap(body) <= maxPooledAnswer {
		*buf = body[:0]
		answerBuffers.Put(buf)
	}
}
