//go:build !race

package gate_test

// raceEnabled is false without the race detector.
const raceEnabled = false
