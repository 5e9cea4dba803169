// Package netproxy is a loopback TCP proxy that can cut a link the way a
// real network partition does: blocked, it stops moving bytes and keeps the
// connections open, so callers hang instead of seeing a reset. The fault
// tests and "fencelock verify" put one on every Raft link (and on a client's
// links) to partition processes without root.
package netproxy

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from Addr to a target. Blocked, it stops
// moving bytes in both directions and leaves connections open, as a real
// partition does. What was sent during the partition is delivered after
// Unblock, like TCP retransmission. Its methods are safe for concurrent use.
type Proxy struct {
	Addr    string // the address clients dial instead of the target
	target  string
	ln      net.Listener
	blocked atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
	closed  bool
}

// Listen starts a proxy to target on a free 127.0.0.1 port. Close stops it.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: listen: %w", target, err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln}
	go p.accept()
	return p, nil
}

// Block starts dropping traffic silently; Unblock resumes forwarding.
func (p *Proxy) Block() { p.blocked.Store(true) }

// Unblock resumes forwarding, delivering what was held.
func (p *Proxy) Unblock() { p.blocked.Store(false) }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		for p.blocked.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		n, err := src.Read(buf)
		for n > 0 && p.blocked.Load() {
			time.Sleep(5 * time.Millisecond) // read before the partition: hold it
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}
