package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerHandshakeTimeout bounds a Raft peer's TLS handshake.
const peerHandshakeTimeout = 5 * time.Second

// maxPeerHandshakes bounds the handshakes under way at once, so that
// connections that never finish one cannot pile up.
const maxPeerHandshakes = 64

// tlsStream is a raft.StreamLayer over mutual TLS. Accept hands Raft only
// connections whose peer completed the handshake with a certificate of the
// cluster's CA: a connection without one is closed before Raft reads
// anything from it.
type tlsStream struct {
	ln    net.Listener
	addr  net.Addr // advertised
	conf  *tls.Config
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	slots chan struct{}
}

var _ raft.StreamLayer = (*tlsStream)(nil)

func newTLSStream(ln net.Listener, addr net.Addr, conf *tls.Config) *tlsStream {
	t := &tlsStream{ln: ln, addr: addr, conf: conf, conns: make(chan net.Conn), done: make(chan struct{}), slots: make(chan struct{}, maxPeerHandshakes)}
	go t.acceptLoop()
	return t
}

func (t *tlsStream) acceptLoop() {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			t.Close()
			return
		}
		select {
		case t.slots <- struct{}{}:
		default:
			c.Close() // too many handshakes under way
			continue
		}
		go t.handshake(c)
	}
}

func (t *tlsStream) handshake(c net.Conn) {
	defer func() { <-t.slots }()
	tc := tls.Server(c, t.conf)
	ctx, cancel := context.WithTimeout(context.Background(), peerHandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		c.Close()
		return
	}
	select {
	case t.conns <- tc:
	case <-t.done:
		tc.Close()
	}
}

// Accept returns the next connection whose handshake completed.
func (t *tlsStream) Accept() (net.Conn, error) {
	select {
	case c := <-t.conns:
		return c, nil
	case <-t.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting.
func (t *tlsStream) Close() error {
	var err error
	t.once.Do(func() {
		close(t.done)
		err = t.ln.Close()
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Addr is the address peers reach this node at.
func (t *tlsStream) Addr() net.Addr { return t.addr }

// Dial connects to a peer and completes the handshake within timeout.
func (t *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: t.conf}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, "tcp", string(address))
}
