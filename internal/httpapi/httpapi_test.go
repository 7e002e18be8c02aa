package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
)

const testSpec = `
openapi: 3.0.3
info: {title: test, version: "1"}
paths:
  /v1/things/{id}:
    parameters:
      - {name: id, in: path, required: true, schema: {type: string}}
    get:
      responses:
        "200":
          description: a thing
          content:
            application/json:
              schema:
                type: object
                required: [id]
                properties: {id: {type: string}}
        "404": {$ref: "#/components/responses/Problem"}
        "500": {$ref: "#/components/responses/Problem"}
        "503": {$ref: "#/components/responses/Problem"}
    put:
      requestBody:
        content:
          application/json:
            schema: {type: object}
      responses:
        "200": {description: stored}
        "400": {$ref: "#/components/responses/Problem"}
        "413": {$ref: "#/components/responses/Problem"}
        "415": {$ref: "#/components/responses/Problem"}
`

var errGone = errors.New("gone")

func newTestAPI(t *testing.T, reg *prometheus.Registry) (*httpapi.API, *httpapi.Spec) {
	t.Helper()
	spec, err := httpapi.LoadSpec(withProblem(t, testSpec))
	if err != nil {
		t.Fatal(err)
	}
	a, err := httpapi.New(httpapi.Config{
		Name: "test", Logger: slog.New(slog.DiscardHandler), Registry: reg, Spec: spec.JSON,
		MapError: func(_ *http.Request, err error) error {
			if errors.Is(err, errGone) {
				return &stampede.Error{Code: stampede.NotFound, Message: "no such thing", Err: err}
			}
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	a.Handle("/v1/things/{id}", httpapi.Methods{
		http.MethodGet: func(w http.ResponseWriter, r *http.Request) error {
			switch r.PathValue("id") {
			case "gone":
				return errGone
			case "slow":
				return fmt.Errorf("store: %w", context.DeadlineExceeded)
			case "boom":
				panic("boom")
			case "secret":
				return errors.New("dial tcp 10.0.0.7:5432: connection refused")
			}
			httpapi.WriteJSON(w, http.StatusOK, map[string]string{"id": r.PathValue("id")})
			return nil
		},
		http.MethodPut: func(w http.ResponseWriter, r *http.Request) error {
			var body struct {
				Name string `json:"name"`
			}
			if err := httpapi.DecodeJSON(w, r, &body, 64, `"name"`); err != nil {
				return err
			}
			w.WriteHeader(http.StatusOK)
			return nil
		},
	})
	return a, spec
}

func problem(t *testing.T, resp *http.Response) httpapi.Problem {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != httpapi.ProblemContentType {
		t.Fatalf("Content-Type = %q, want %s", ct, httpapi.ProblemContentType)
	}
	var p httpapi.Problem
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.Status != resp.StatusCode || p.Type != httpapi.ProblemType+string(p.Code) || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v does not match status %d", p, resp.StatusCode)
	}
	return p
}

func TestErrorsAnswerAsProblems(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, spec := newTestAPI(t, reg)
	srv := httptest.NewServer(a)
	defer srv.Close()
	client := apitest.New(t, spec).Client(t)

	cases := []struct {
		method, path, ctype, body string
		status                    int
		code                      stampede.Code
		field                     string
	}{
		{"GET", "/v1/things/a", "", "", 200, "", ""},
		{"GET", "/v1/things/gone", "", "", 404, stampede.NotFound, ""},
		{"GET", "/nowhere", "", "", 404, stampede.NotFound, ""},
		{"DELETE", "/v1/things/a", "", "", 405, stampede.MethodNotAllowed, ""},
		{"GET", "/v1/things/slow", "", "", 503, stampede.Unavailable, ""},
		{"GET", "/v1/things/boom", "", "", 500, stampede.Internal, ""},
		{"PUT", "/v1/things/a", "application/json", `{"name": 3}`, 400, stampede.Invalid, "name"},
		{"PUT", "/v1/things/a", "application/json", `{"nme": "x"}`, 400, stampede.Invalid, "nme"},
		{"PUT", "/v1/things/a", "text/plain", `{}`, 415, stampede.Unsupported, ""},
		{"PUT", "/v1/things/a", "application/json", `{"name":"` + strings.Repeat("x", 100) + `"}`, 413, stampede.TooLarge, ""},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: status %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
		if c.status >= 400 {
			p := problem(t, resp)
			if p.Code != c.code || p.Field != c.field {
				t.Errorf("%s %s: code %q field %q, want %q %q", c.method, c.path, p.Code, p.Field, c.code, c.field)
			}
		}
		switch c.status {
		case 405:
			if got := resp.Header.Get("Allow"); got != "GET, HEAD, PUT" {
				t.Errorf("Allow = %q", got)
			}
		case 503:
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
		}
		resp.Body.Close()
	}

	// Internals never reach the client.
	resp, err := client.Get(srv.URL + "/v1/things/secret")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || strings.Contains(string(b), "10.0.0.7") || strings.Contains(string(b), "dial") {
		t.Errorf("internal error leaked: %d %s", resp.StatusCode, b)
	}

	// Metrics are labelled by route pattern, never the raw path.
	if got := testutil.ToFloat64(counter(t, reg, "/v1/things/{id}", "GET", "404")); got != 1 {
		t.Errorf("http_requests_total{route=/v1/things/{id},GET,404} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(counter(t, reg, "unmatched", "GET", "404")); got != 1 {
		t.Errorf("unmatched 404s = %v, want 1", got)
	}
}

// counter finds one http_requests_total series in reg.
func counter(t *testing.T, reg *prometheus.Registry, route, method, code string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["method"] == method && labels["code"] == code {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return 0 })
}

func TestReadyzReportsEachDependency(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	frozen := make(chan struct{})
	defer close(frozen)
	a.AddCheck(httpapi.Check{Name: "fine", Ping: func(context.Context) error { return nil }})
	a.AddCheck(httpapi.Check{Name: "frozen", Ping: func(context.Context) error { <-frozen; return nil }}) // ignores its context
	srv := httptest.NewServer(a)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	p := problem(t, resp)
	resp.Body.Close()
	checks, _ := p.Extra["checks"].(map[string]any)
	if resp.StatusCode != 503 || checks == nil || checks["fine"].(map[string]any)["status"] != "ok" || checks["frozen"].(map[string]any)["status"] != "failed" {
		t.Fatalf("readyz: %d %+v", resp.StatusCode, p)
	}
	resp, err = http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz: %d while a dependency is down", resp.StatusCode)
	}
	// /metrics says the same per check, for an alert (stampede_ready).
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`stampede_ready{check="fine"} 1`, `stampede_ready{check="frozen"} 0`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, raw)
		}
	}
}

func TestReadProblemRoundTrips(t *testing.T) {
	rec := httptest.NewRecorder()
	httpapi.WriteProblem(rec, &stampede.Error{Code: "order_exists", Kind: stampede.Conflict, Message: "order o1 already has a payment", Extra: map[string]any{"payment_id": "p1"}}, "")
	e := httpapi.ReadProblem(rec.Result())
	if e.Status != 409 || e.Code != "order_exists" || e.Class() != stampede.Conflict || e.Extra["payment_id"] != "p1" || e.Message != "order o1 already has a payment" {
		t.Fatalf("round trip: %+v", e)
	}
	rec = httptest.NewRecorder()
	rec.WriteHeader(502)
	rec.WriteString("<html>bad gateway</html>")
	if e := httpapi.ReadProblem(rec.Result()); e.Code != stampede.Internal || e.Status != 502 {
		t.Fatalf("non-problem answer: %+v", e)
	}
}

func TestEveryCodeHasAStatus(t *testing.T) {
	seen := map[int]stampede.Code{}
	for _, c := range stampede.Classes() {
		s := httpapi.StatusOfCode(c)
		if s < 400 || s > 599 {
			t.Errorf("code %s → %d", c, s)
		}
		if o, dup := seen[s]; dup {
			t.Errorf("codes %s and %s share status %d: a client could not tell them apart", o, c, s)
		}
		seen[s] = c
	}
	if httpapi.StatusOfCode("nonsense") != 500 {
		t.Error("unknown code is not 500")
	}
	if s := httpapi.StatusOf(&stampede.Error{Code: "order_exists", Kind: stampede.Conflict}); s != 409 {
		t.Errorf("a domain code of class conflict answers %d, want 409", s)
	}
}

// TestServerClosesStalledAndIdleConnections drives a real listener: a body
// that never finishes and an idle keep-alive connection are both closed by
// the server's own timeouts.
func TestServerClosesStalledAndIdleConnections(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	cfg := httpapi.DefaultServerConfig()
	cfg.ReadHeaderTimeout, cfg.ReadTimeout, cfg.IdleTimeout = 200*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- httpapi.Serve(ctx, ln, a, cfg, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	closedWithin := func(t *testing.T, c net.Conn, limit time.Duration) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(limit))
		_, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection still open after %s", limit)
		}
	}
	// A stalled body.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT /v1/things/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"na")
	closedWithin(t, c, cfg.ReadTimeout+time.Second)

	// An idle keep-alive connection after one answered request.
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	closedWithin(t, c2, cfg.IdleTimeout+time.Second)
}

// TestRequestMetricsCountEveryLabelSet: requests from many goroutines at
// once, over several label sets (a method outside the known ones counted
// as OTHER), are each counted once in the counter and the histogram of
// their own label set.
func TestRequestMetricsCountEveryLabelSet(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, _ := newTestAPI(t, reg)
	a.Handle("/v1/echo/{status}", httpapi.Methods{
		http.MethodPost: func(w http.ResponseWriter, r *http.Request) error {
			switch r.PathValue("status") {
			case "created":
				w.WriteHeader(http.StatusCreated)
			case "conflict":
				return &stampede.Error{Code: stampede.Conflict, Message: "taken"}
			}
			return nil
		},
	})
	type req struct{ method, path, route, code string }
	reqs := []req{
		{"POST", "/v1/echo/created", "/v1/echo/{status}", "201"},
		{"POST", "/v1/echo/ok", "/v1/echo/{status}", "200"},
		{"POST", "/v1/echo/conflict", "/v1/echo/{status}", "409"},
		{"BREW", "/v1/echo/created", "/v1/echo/{status}", "405"},
	}
	const each = 50
	var wg sync.WaitGroup
	for i := range each * len(reqs) {
		wg.Go(func() {
			q := reqs[i%len(reqs)]
			a.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(q.method, q.path, nil))
		})
	}
	wg.Wait()
	for _, q := range reqs {
		method := q.method
		if method == "BREW" {
			method = "OTHER"
		}
		if got := testutil.ToFloat64(counter(t, reg, q.route, method, q.code)); got != each {
			t.Errorf("http_requests_total{%s,%s,%s} = %v, want %d", q.route, method, q.code, got, each)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "http_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			samples[labels["route"]+" "+labels["method"]] = m.GetHistogram().GetSampleCount()
		}
	}
	if got := samples["/v1/echo/{status} POST"]; got != 3*each {
		t.Errorf("duration samples of POST = %d, want %d", got, 3*each)
	}
	if got := samples["/v1/echo/{status} OTHER"]; got != each {
		t.Errorf("duration samples of OTHER = %d, want %d", got, each)
	}
}

// TestProblemListsEveryBadField: a validation that reports several bad
// fields answers 400 naming the first in field and detail, and every one in
// the errors member; a single bad field has no errors member.
func TestProblemListsEveryBadField(t *testing.T) {
	var f stampede.Fields
	f.Add("capacity", "must be positive, got 0")
	f.Add("lease_seconds", "must be at least 1, got 0")
	rec := httptest.NewRecorder()
	httpapi.WriteProblem(rec, f.Err(), "")
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	list, _ := body["errors"].([]any)
	if rec.Code != 400 || body["field"] != "capacity" || len(list) != 2 {
		t.Fatalf("answer %d %v, want 400 naming capacity with both fields in errors", rec.Code, body)
	}
	if second, _ := list[1].(map[string]any); second["field"] != "lease_seconds" || second["detail"] != "must be at least 1, got 0" {
		t.Errorf("errors[1] = %v, want lease_seconds and its detail", list[1])
	}
	rec = httptest.NewRecorder()
	httpapi.WriteProblem(rec, stampede.InvalidField("capacity", "must be positive"), "")
	if strings.Contains(rec.Body.String(), `"errors"`) {
		t.Errorf("one bad field: %s, want no errors member", rec.Body.String())
	}
}
