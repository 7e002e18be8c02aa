package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/jsonbody"
)

// ProblemType is the prefix of every problem's "type" member; the code
// follows it, e.g. "urn:stampede:problem:invalid".
const ProblemType = "urn:stampede:problem:"

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is the RFC 9457 body of every error answer. Code and Field are
// extension members; Extra members are merged in beside them.
type Problem struct {
	Type   string        `json:"type"`
	Title  string        `json:"title"`
	Status int           `json:"status"`
	Detail string        `json:"detail"`
	Code   stampede.Code `json:"code"`
	Field  string        `json:"field,omitempty"`
	// Extra holds further extension members.
	Extra map[string]any `json:"-"`
}

// reserved are the members Extra may not replace.
var reserved = map[string]bool{"type": true, "title": true, "status": true, "detail": true, "code": true, "field": true}

// MarshalJSON writes the standard members and then Extra's.
func (p Problem) MarshalJSON() ([]byte, error) {
	type plain Problem
	body, err := json.Marshal(plain(p))
	if err != nil || len(p.Extra) == 0 {
		return body, err
	}
	m := make(map[string]any, len(p.Extra)+6)
	for k, v := range p.Extra {
		if !reserved[k] {
			m[k] = v
		}
	}
	extra, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(extra) <= 2 { // {}
		return body, nil
	}
	return append(append(body[:len(body)-1], ','), extra[1:]...), nil
}

// UnmarshalJSON reads the standard members and keeps the others in Extra.
func (p *Problem) UnmarshalJSON(data []byte) error {
	type plain Problem
	if err := json.Unmarshal(data, (*plain)(p)); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	for k, raw := range all {
		if reserved[k] {
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		if p.Extra == nil {
			p.Extra = map[string]any{}
		}
		p.Extra[k] = v
	}
	return nil
}

// FieldDetail is one member of a problem's "errors": a field at fault and
// what is wrong with it.
type FieldDetail struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// ProblemOf returns the problem body err answers with: the first error's
// code, field and detail and, when err joins several errors of fields
// (a validation reports every bad field at once), each of them in the
// extension member "errors". Internal errors show a fixed text: their
// cause is for the log.
func ProblemOf(err error) Problem {
	e := stampede.As(err)
	if all := stampede.FieldErrors(err); len(all) > 1 {
		var list []FieldDetail
		for _, fe := range all {
			if fe.Field != "" && fe.Class() == e.Class() {
				list = append(list, FieldDetail{Field: fe.Field, Detail: fe.Message})
			}
		}
		if len(list) > 1 {
			extra := map[string]any{"errors": list}
			for k, v := range e.Extra {
				extra[k] = v
			}
			c := *e
			c.Extra = extra
			e = &c
		}
	}
	status := ErrorStatus(e)
	p := Problem{
		Type: ProblemType + string(e.Code), Title: http.StatusText(status), Status: status,
		Detail: e.Message, Code: e.Code, Field: e.Field, Extra: e.Extra,
	}
	if p.Detail == "" || e.Code == stampede.Internal {
		p.Detail = "internal error; the server logged the details"
		if e.Code != stampede.Internal {
			p.Detail = http.StatusText(status)
		}
	}
	if p.Field != "" && !strings.HasPrefix(p.Detail, p.Field) {
		p.Detail = p.Field + ": " + p.Detail
	}
	return p
}

// WriteProblem answers err as application/problem+json with its status.
// 503 and 429 answers carry Retry-After, 401 answers WWW-Authenticate
// (realm), and no error answer is cached.
func WriteProblem(w http.ResponseWriter, err error, realm string) {
	e := stampede.As(err)
	p := ProblemOf(err)
	h := w.Header()
	if p.Status == http.StatusServiceUnavailable || p.Status == http.StatusTooManyRequests || e.RetryAfter > 0 {
		ra := e.RetryAfter
		if ra <= 0 {
			ra = DefaultRetryAfter
		}
		h.Set("Retry-After", strconv.Itoa(int(max(1, math.Ceil(ra.Seconds())))))
	}
	if p.Status == http.StatusUnauthorized && realm != "" {
		h.Set("WWW-Authenticate", fmt.Sprintf("Bearer realm=%q", realm))
	}
	body, merr := json.Marshal(p)
	if merr != nil {
		body, p.Status = []byte(`{"type":"`+ProblemType+`internal","title":"Internal Server Error","status":500,"detail":"cannot encode the answer","code":"internal"}`), http.StatusInternalServerError
	}
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", ProblemContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) { jsonbody.Write(w, status, v) }

// DecodeJSON reads r's body, a single JSON object of at most limit bytes,
// into dst strictly (package jsonbody); its errors are *stampede.Error with the
// decoding error's code and field. allowed lists the accepted fields for
// the unknown-field message, such as `"user_id"`.
func DecodeJSON(w http.ResponseWriter, r *http.Request, dst any, limit int64, allowed string) error {
	err := jsonbody.Decode(w, r, dst, limit, allowed)
	if e, ok := errors.AsType[*jsonbody.Error](err); ok {
		return &stampede.Error{Code: stampede.Code(e.Kind.Code()), Field: e.Field, Message: e.Message, Err: e.Err}
	}
	return err
}

// ReadProblem turns an error answer a client received into an *stampede.Error
// with Status set: the problem body's code, field, detail and extension
// members when the body is problem+json, or a stampede.Internal error quoting
// the start of any other body. It reads at most 64 KiB of resp.Body and
// does not close it.
func ReadProblem(resp *http.Response) *stampede.Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &stampede.Error{Status: resp.StatusCode}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && ra > 0 {
		e.RetryAfter = time.Duration(ra) * time.Second
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var p Problem
	if (mt == ProblemContentType || mt == "application/json") && json.Unmarshal(body, &p) == nil && p.Code != "" {
		e.Code, e.Field, e.Message, e.Extra = p.Code, p.Field, strings.TrimPrefix(p.Detail, p.Field+": "), p.Extra
		if !e.Code.IsClass() {
			e.Kind = classOfStatus(resp.StatusCode)
		}
		return e
	}
	e.Code = stampede.Internal
	if resp.StatusCode == http.StatusServiceUnavailable {
		e.Code = stampede.Unavailable
	}
	snippet := strings.TrimSpace(string(body))
	if len(snippet) > 200 {
		snippet = snippet[:200] + "…"
	}
	e.Message = fmt.Sprintf("unexpected %s answer: %q", resp.Status, snippet)
	return e
}
