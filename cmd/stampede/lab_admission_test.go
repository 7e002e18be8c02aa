package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestLabAdmissionObserveMinSamplesFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want any
	}{
		{nil, 100.0},
		{[]string{"--observe-min-samples", "7"}, 7.0},
	} {
		cmd := newLabAdmissionCmd(&labOptions{seed: 1})
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		exp, err := buildAdmission(cmd, &labOptions{seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(exp.Params())
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatal(err)
		}
		if p["observe_min_samples"] != tc.want {
			t.Errorf("%v: observe_min_samples = %v, want %v", tc.args, p["observe_min_samples"], tc.want)
		}
	}
	cmd := newLabAdmissionCmd(&labOptions{seed: 1})
	if err := cmd.ParseFlags([]string{"--observe-min-samples", "0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := buildAdmission(cmd, &labOptions{seed: 1}); err == nil || !strings.Contains(err.Error(), "observe-min-samples") {
		t.Errorf("--observe-min-samples 0: error %v, want one naming the flag", err)
	}
}
