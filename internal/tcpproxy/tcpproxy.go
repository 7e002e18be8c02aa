// Package tcpproxy is a TCP proxy for fault tests: it forwards a loopback
// port to a real dependency (PostgreSQL, Redis, NATS) and can freeze the
// traffic, as if the dependency were stopped with SIGSTOP, or cut it, as
// if the network went away, without touching the dependency itself, so
// that tests sharing the server are not disturbed.
package tcpproxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from its address to a target.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	gate   chan struct{} // closed while traffic flows
	cut    bool          // new connections are refused, open ones were closed
	conns  map[net.Conn]struct{}
	closed bool
}

// Start listens on a free loopback port and forwards every connection to
// target. Call Close when done.
func Start(target string) (*Proxy, error) { return StartAt("127.0.0.1:0", target) }

// StartAt listens on addr and forwards every connection to target. Call
// Close when done.
func StartAt(addr, target string) (*Proxy, error) {
	if target == "" {
		return nil, errors.New("tcpproxy: empty target")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, gate: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.gate)
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.handle(c) })
	}
}

func (p *Proxy) handle(client net.Conn) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		return
	}
	p.wg.Go(func() { p.pipe(server, client) })
	p.pipe(client, server)
}

// track registers the connections, or closes them when the proxy is
// closed or cut.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := !p.closed && !p.cut
	for _, c := range cs {
		if !ok {
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
	}
	return ok
}

// pipe copies src to dst, each chunk once the gate is open, and closes
// both when either side ends.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
		dst.Close()
		src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF, or either side closed
			return
		}
	}
}

// Freeze holds every byte in both directions, on open and new
// connections, until Thaw: the dependency looks alive but never answers.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already frozen
	}
}

// Thaw lets the held and new traffic flow again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// Cut closes every open connection and refuses new ones until Restore:
// the dependency is unreachable.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// Restore accepts connections again after Cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy: no new connections, every open one closed, every
// held chunk released. It waits for its goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Thaw()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
