package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestRestartableIsOutsideTheEphemeralRange: the port is free and
// no outgoing connection can be given it.
func TestRestartableIsOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := ephemeralRange()
	for range 20 {
		port, err := Restartable()
		if err != nil {
			t.Fatal(err)
		}
		if port >= lo && port <= hi {
			t.Fatalf("port %d is in the ephemeral range %d-%d", port, lo, hi)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		ln.Close()
	}
}
