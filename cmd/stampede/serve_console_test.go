package main

import (
	"strings"
	"testing"
)

// TestServeConsoleRejectsBadFlags: each mistake names its flag.
func TestServeConsoleRejectsBadFlags(t *testing.T) {
	for _, env := range []string{envAdminToken, "STAMPEDE_WAITROOM", "STAMPEDE_WAITROOM_TOKEN", "STAMPEDE_PAY", "STAMPEDE_PAY_TOKEN",
		"STAMPEDE_CHECKOUT", "STAMPEDE_EVENTS", "STAMPEDE_WORKERS"} {
		t.Setenv(env, "")
	}
	ok := []string{"--admin-token", "console-admin-token-0123", "--waitroom", "http://127.0.0.1:8080", "--waitroom-token", "waitroom-admin-token-0123"}
	cases := []struct {
		args []string
		want string
	}{
		{nil, "--admin-token"},
		{[]string{"--admin-token", "short"}, "--admin-token"},
		{ok[:2], "--waitroom"},
		{append(ok[:4:4], "--waitroom-token", "short"), "--waitroom-token"},
		{append(ok[:4:4], "--waitroom-token", "waitroom-admin-token-0123", "--waitroom", "ftp://x"), "--waitroom"},
		{append(ok, "--pay", "http://127.0.0.1:8081"), "--pay-token"},
		{append(ok, "--events", "concert"), "--events"},
		{append(ok, "--checkout", "http://127.0.0.1:8083", "--events", "a/b"), "--events"},
		{append(ok, "--workers", "127.0.0.1:9101"), "--workers"},
		{append(ok, "--interval", "1ms"), "--interval"},
		{append(ok, "--timeout", "0s"), "--timeout"},
		{append(ok, "--session", "1s"), "--session"},
		{append(ok, "--http", ""), "--http"},
		{append(ok, "--idle-timeout", "0s"), "--idle-timeout"},
	}
	for _, tc := range cases {
		_, _, err := execute(t, append([]string{"serve", "console"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}
