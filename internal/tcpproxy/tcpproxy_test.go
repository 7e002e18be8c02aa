package tcpproxy_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/internal/tcpproxy"
)

// echo starts a line echo server.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, within time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(within))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestFreezeHoldsAndThawReleases(t *testing.T) {
	p, err := tcpproxy.Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("before freeze: %q %v", got, err)
	}
	p.Freeze()
	if _, err := roundTrip(c, r, 200*time.Millisecond); err == nil {
		t.Fatal("an answer came through a frozen proxy")
	}
	p.Thaw()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "ping\n" {
		t.Fatalf("the held line after thaw: %q %v", got, err)
	}
}

func TestCutClosesAndRefusesUntilRestore(t *testing.T) {
	p, err := tcpproxy.Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if _, err := roundTrip(c, r, 5*time.Second); err == nil {
		t.Fatal("a cut connection still answers")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if _, err := roundTrip(c2, bufio.NewReader(c2), 5*time.Second); err == nil {
			t.Fatal("a new connection answers while cut")
		}
		c2.Close()
	}
	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("after restore: %q %v", got, err)
	}
}
