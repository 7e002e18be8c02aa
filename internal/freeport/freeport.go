// Package freeport finds loopback ports for servers that are killed and
// started again on the same port: in tests, and in the labs' rigs.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Restartable returns a free loopback port for a server the lab
// will kill and start again on the same port. It is drawn outside the
// kernel's ephemeral range (net.ipv4.ip_local_port_range), so that no
// outgoing connection on the machine can take it as its local port while
// the server is down: with a port from the ephemeral range, a busy rig's
// own client connections held a killed part's port for tens of seconds,
// and its restart failed with "address already in use".
func Restartable() (int, error) {
	lo, hi := ephemeralRange()
	// The ports below the range, above the well-known and registered
	// ports most services take; above the range when it leaves no room.
	from, to := 10000, lo-1
	if to-from < 1000 {
		from, to = hi+1, 65535
	}
	if to-from < 100 {
		return 0, errors.New("freeport: no port range outside the ephemeral ports")
	}
	for range 200 {
		port := from + rand.IntN(to-from+1)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken: draw again
		}
		ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free port in %d-%d after 200 draws", from, to)
}

// ephemeralRange reads the kernel's ephemeral port range; Linux's default
// when it cannot.
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(raw))
	if len(f) != 2 {
		return lo, hi
	}
	a, errA := strconv.Atoi(f[0])
	b, errB := strconv.Atoi(f[1])
	if errA != nil || errB != nil || a <= 0 || b < a || b > 65535 {
		return lo, hi
	}
	return a, b
}
