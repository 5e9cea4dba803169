package testproc

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections from Addr to a target. Blocked, it stops
// moving bytes in both directions and leaves connections open, as a real
// partition does: callers hang instead of seeing a reset. What was sent
// during the partition is delivered after Unblock, like TCP retransmission.
type Proxy struct {
	Addr    string
	target  string
	ln      net.Listener
	blocked atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

// StartProxy listens on a free loopback port and forwards to target until
// the test ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln}
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Block starts dropping traffic; Unblock resumes forwarding.
func (p *Proxy) Block()   { p.blocked.Store(true) }
func (p *Proxy) Unblock() { p.blocked.Store(false) }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
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
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
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
