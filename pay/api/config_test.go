package api_test

import (
	"slices"
	"testing"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/protocol"
)

// TestConfigValidateReportsEveryField: every bad field is named at once,
// in snake_case, a nested admission verifier's under "admission.".
func TestConfigValidateReportsEveryField(t *testing.T) {
	cfg := api.Config{MaxBody: 10, AdminToken: "short", Admission: &protocol.AdmissionVerifier{}}
	var got []string
	for _, e := range stampede.FieldErrors(cfg.Validate()) {
		got = append(got, e.Field)
	}
	want := []string{"max_body", "logger", "admin_token", "admission.room", "admission.keys"}
	if !slices.Equal(got, want) {
		t.Errorf("Validate names %v, want %v", got, want)
	}
	if err := api.DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
}
