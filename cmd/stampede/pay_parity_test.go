package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/internal/testenv"
)

// TestPayParityRefusesAMissingDatabase: parity reads an existing
// database; it never creates an empty one and reports "all matched".
func TestPayParityRefusesAMissingDatabase(t *testing.T) {
	t.Setenv(envPostgres, "")
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"data-dir": {"--data-dir", filepath.Join(dir, "nothing-here")},
		"sqlite":   {"--sqlite", filepath.Join(dir, "missing.db")},
	} {
		_, _, err := execute(t, append([]string{"pay", "parity", "--institution", "http://127.0.0.1:1", "--admin-token", "tok"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "no payment database") {
			t.Errorf("%s: error %v, want one saying there is no payment database", name, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("parity created %v", entries)
	}
}

// TestPayParityRefusesAMissingPostgresDatabase: connecting to a database
// that does not exist fails with a message that says so. Needs
// STAMPEDE_POSTGRES_URL.
func TestPayParityRefusesAMissingPostgresDatabase(t *testing.T) {
	raw := testenv.URL(t, testenv.PostgresURL)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/stampede_no_such_database"
	_, _, err = execute(t, "pay", "parity", "--institution", "http://127.0.0.1:1", "--admin-token", "tok", "--postgres", u.String())
	if err == nil || !strings.Contains(err.Error(), "does it exist") {
		t.Errorf("error %v, want one asking whether the database exists", err)
	}
}

// TestServePayRejectsBadStreamLimits: the stream limit flags are checked,
// and named, before anything starts.
func TestServePayRejectsBadStreamLimits(t *testing.T) {
	t.Setenv(envPostgres, "")
	t.Setenv(envNATS, "")
	dir := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stream-max-bytes", "0"}, "--stream-max-bytes"},
		{[]string{"--stream-max-bytes", "lots"}, "--stream-max-bytes"},
		{[]string{"--stream-max-age", "1s"}, "--stream-max-age"},
		{[]string{"--stream-max-age", "-1h"}, "--stream-max-age"},
		{[]string{"--give-up-after", "0s"}, "--give-up-after"},
		{[]string{"--close-unconfirmed-after", "-1s"}, "--close-unconfirmed-after"},
	} {
		_, _, err := execute(t, append([]string{"serve", "pay", "--institution", "http://127.0.0.1:1", "--data-dir", dir}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("a bad flag still created the data dir")
	}
}

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"1GiB": 1 << 30, "500MB": 500e6, "1048576": 1 << 20, "-1": -1, "64 MiB": 64 << 20, "2KB": 2000} {
		var n int64
		if err := (&byteSize{&n}).Set(in); err != nil || n != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-2", "1.5GiB", "1PB"} {
		var n int64
		if err := (&byteSize{&n}).Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, n)
		}
	}
	n := int64(1 << 30)
	if s := (&byteSize{&n}).String(); s != "1GiB" {
		t.Errorf("String() = %q, want 1GiB", s)
	}
}
