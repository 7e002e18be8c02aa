package institution_test

import (
	"slices"
	"testing"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/institution"
)

func badFields(err error) []string {
	var fields []string
	for _, e := range stampede.FieldErrors(err) {
		fields = append(fields, e.Field)
	}
	return fields
}

func TestBehaviorValidateNamesEveryBadField(t *testing.T) {
	b := institution.Behavior{Mode: "FAST", HangMS: -1, StatusAPI: institution.StatusAPIUp}
	if got, want := badFields(b.Validate()), []string{"mode", "hang_ms"}; !slices.Equal(got, want) {
		t.Errorf("bad fields = %v, want %v", got, want)
	}
}

func TestApproveRequestValidateNamesEveryBadField(t *testing.T) {
	r := institution.ApproveRequest{ExternalKey: "a/b", Amount: 15000, Currency: "XXX"}
	if got, want := badFields(r.Validate()), []string{"external_key", "currency"}; !slices.Equal(got, want) {
		t.Errorf("bad fields = %v, want %v", got, want)
	}
}
