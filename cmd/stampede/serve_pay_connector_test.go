package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServePayRefusesBadConnectors: an unknown connector, and a missing
// or malformed key in the environment, stop serve pay at start with a
// message naming what to fix, before any database is created.
func TestServePayRefusesBadConnectors(t *testing.T) {
	cases := []struct {
		env, value string
		args       []string
		want       string
	}{
		{"", "", []string{"--connector", "paypal"}, "connector"},
		{envStripeKey, "", []string{"--connector", "stripe"}, envStripeKey},
		{envStripeKey, "pk_test_123", []string{"--connector", "stripe"}, "sk_"},
		{envTossKey, "", []string{"--connector", "toss"}, envTossKey + ": is required"},
		{envTossKey, "test_ck_123", []string{"--connector", "toss"}, "test_sk_ or live_sk_"},
		{"", "", []string{"--connector", "simulator"}, "--institution is required"},
	}
	for _, tc := range cases {
		if tc.env != "" {
			t.Setenv(tc.env, tc.value)
		}
		dir := t.TempDir()
		args := append([]string{"serve", "pay", "--data-dir", dir, "--http", "127.0.0.1:0"}, tc.args...)
		_, _, err := execute(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v with %s=%q: %v, want an error naming %q", tc.args, tc.env, tc.value, err, tc.want)
		}
		if _, serr := os.Stat(filepath.Join(dir, "pay.db")); serr == nil {
			t.Errorf("%v: a database was created before the connector was refused", tc.args)
		}
	}
}
