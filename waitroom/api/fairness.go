package api

import (
	"net/http"
	"strconv"

	"github.com/stampede-lab/stampede/waitroom"
)

// fairnessJSON is the fairness member of the public room view: the
// commitment to the pre-queue's seed before opening, the seed after, and
// the admission log's head.
type fairnessJSON struct {
	Verifiable bool    `json:"verifiable"`
	Commitment *string `json:"commitment"`
	Seed       *string `json:"seed"`
	LogLength  int64   `json:"log_length"`
	LogHead    string  `json:"log_head"`
}

// fairnessView returns room's fairness member, nil when the store keeps
// none.
func (h *handler) fairnessView(r *http.Request, room string) (*fairnessJSON, error) {
	f, ok, err := h.svc.Fairness(r.Context(), room)
	if err != nil || !ok {
		return nil, err
	}
	v := &fairnessJSON{Verifiable: f.Verifiable, LogLength: f.LogLength, LogHead: f.LogHead}
	if f.Commitment != "" && f.Commitment != "-" {
		v.Commitment = &f.Commitment
	}
	if f.Seed != "" {
		v.Seed = &f.Seed
	}
	return v, nil
}

// logJSON is the answer of GET /v1/rooms/{room}/log: entries from..,
// and the from of the next page (null at the end).
type logJSON struct {
	Room    string   `json:"room"`
	From    int64    `json:"from"`
	Entries []string `json:"entries"`
	Next    *int64   `json:"next"`
}

// getLog answers a page of the room's admission log (admin token).
func (h *handler) getLog(w http.ResponseWriter, r *http.Request) error {
	if err := h.authAdmin(r); err != nil {
		return err
	}
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	from, limit := int64(1), waitroom.MaxLogPage
	q := r.URL.Query()
	if s := q.Get("from"); s != "" {
		if from, err = strconv.ParseInt(s, 10, 64); err != nil {
			return fieldError("from", "must be an entry number (1 is the first), got %q", s)
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil {
			return fieldError("limit", "must be an integer between 1 and %d, got %q", waitroom.MaxLogPage, s)
		}
	}
	if _, err := h.svc.RoomConfig(r.Context(), room); err != nil {
		return err
	}
	entries, err := h.svc.AdmissionLog(r.Context(), room, from, limit)
	if err != nil {
		return err
	}
	out := logJSON{Room: room, From: from, Entries: entries}
	if out.Entries == nil {
		out.Entries = []string{}
	}
	if len(entries) == limit {
		next := from + int64(limit)
		out.Next = &next
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// outflowJSON is the outflow member of the room view: the adaptive rate
// (admissions a minute) a controller holds the room at, and why.
type outflowJSON struct {
	PerMinute int    `json:"per_minute"`
	Reason    string `json:"reason"`
}

// outflowView returns room's outflow member, nil when no controller holds
// a rate.
func (h *handler) outflowView(r *http.Request, room string) (*outflowJSON, error) {
	n, why, ok, err := h.svc.Outflow(r.Context(), room)
	if err != nil || !ok || n == 0 {
		return nil, err
	}
	return &outflowJSON{PerMinute: n, Reason: why}, nil
}
