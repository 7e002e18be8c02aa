//go:build !race

package pay_test

// raceEnabled tells whether the race detector is on.
const raceEnabled = false
