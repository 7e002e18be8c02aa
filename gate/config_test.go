package gate_test

import (
	"net/url"
	"slices"
	"testing"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/gate"
)

// TestConfigValidateNamesEveryField: every bad field at once, each by the
// snake_case name of its flag.
func TestConfigValidateNamesEveryField(t *testing.T) {
	cfg := gate.DefaultConfig()
	cfg.Room, cfg.Upstream, cfg.CookieName = "bad room", &url.URL{Scheme: "ftp", Host: "x"}, "a=b"
	cfg.CheckCache, cfg.MaxSession, cfg.HTTP = 5e9, 0, ""
	cfg.CheckConcurrency, cfg.CheckBackoff, cfg.VisitorRate, cfg.VisitorBurst = 0, 0, -1, -1
	var got []string
	for _, e := range stampede.FieldErrors(cfg.Validate()) {
		got = append(got, e.Field)
	}
	want := []string{"room", "upstream", "cookie", "check_cache", "max_session",
		"check_concurrency", "check_backoff", "visitor_rate", "visitor_burst", "service", "tickets", "admissions", "waitroom", "http"}
	if !slices.Equal(got, want) {
		t.Errorf("Validate named %v, want %v", got, want)
	}
	if _, err := gate.New(cfg); err == nil {
		t.Error("New accepted a bad configuration")
	}
}
