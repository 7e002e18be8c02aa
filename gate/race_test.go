//go:build race

package gate_test

// raceEnabled: the race detector slows the embedded miniredis (Lua in Go)
// several-fold, so the cap test runs fewer buyers there.
const raceEnabled = true
