package waitroom_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/waitroom"
)

// fields are the fields err reports, in order; every one must be invalid.
func fields(t *testing.T, err error) []string {
	t.Helper()
	var got []string
	for _, e := range stampede.FieldErrors(err) {
		if e.Code != stampede.Invalid {
			t.Errorf("%s: code %s, want %s", e.Field, e.Code, stampede.Invalid)
		}
		got = append(got, e.Field)
	}
	return got
}

// TestRoomConfigValidateEveryField: a room configuration reports every bad
// field at once by its JSON name, the template's under "template.", and
// skips the arrival check when the lease it is bounded by is bad.
func TestRoomConfigValidateEveryField(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*waitroom.RoomConfig)
		want []string
	}{
		{"valid", func(c *waitroom.RoomConfig) {}, nil},
		{"two bad fields", func(c *waitroom.RoomConfig) { c.Capacity, c.PoWDifficulty = 0, -1 },
			[]string{"capacity", "pow_difficulty"}},
		{"arrival past the lease", func(c *waitroom.RoomConfig) { c.Arrival = c.Lease + time.Second },
			[]string{"arrival_seconds"}},
		{"arrival skipped with a bad lease", func(c *waitroom.RoomConfig) { c.Lease, c.Arrival = 0, time.Hour },
			[]string{"lease_seconds"}},
		{"with the template's", func(c *waitroom.RoomConfig) {
			c.Retention = 0
			c.Template = waitroom.RoomTemplate{PrimaryColor: "red", LogoURL: "ftp://x"}
		}, []string{"retention_seconds", "template.primary_color", "template.logo_url"}},
	} {
		cfg := waitroom.DefaultRoomConfig()
		tc.edit(&cfg)
		if got := fields(t, cfg.Validate()); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Validate() fields %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRoomTemplateValidateEveryField: a template reports every bad field
// at once, in order.
func TestRoomTemplateValidateEveryField(t *testing.T) {
	tpl := waitroom.RoomTemplate{Title: "a\x01b", BackgroundColor: "#12345", LogoURL: "https://example.com/logo.png"}
	want := []string{"template.title", "template.background_color"}
	if got := fields(t, tpl.Validate()); !slices.Equal(got, want) {
		t.Errorf("Validate() fields %v, want %v", got, want)
	}
}
