package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// peerHandshakeTimeout bounds a Raft peer's TLS handshake.
const peerHandshakeTimeout = 5 * time.Second

// maxPeerHandshakes bounds the handshakes under way at once, so that
// connections that never finish one cannot pile up.
const maxPeerHandshakes = 64

// errNotPeer refuses a Raft connection whose certificate names no member.
var errNotPeer = errors.New("the peer's certificate names no member of the Raft configuration")

// peerGate says who may speak Raft with this node: a peer whose
// certificate (chained to the peer CA) names a server id of the node's
// current Raft configuration, as its Common Name or one of its DNS names,
// or a name of Config.PeerAllowedNames. A node whose configuration is
// empty (started to join, not yet added) admits any certificate of the
// peer CA when PeerAllowedNames is empty, and only those names otherwise.
type peerGate struct {
	allowed []string
	raft    atomic.Pointer[raft.Raft] // nil until Raft runs: nobody is admitted
}

// admits returns nil if a certificate with these names may speak Raft.
func (g *peerGate) admits(names []string) error {
	for _, n := range names {
		if slices.Contains(g.allowed, n) {
			return nil
		}
	}
	r := g.raft.Load()
	if r == nil {
		return fmt.Errorf("%w %q: Raft is not running yet", errNotPeer, names)
	}
	servers := r.GetConfiguration().Configuration().Servers
	if len(servers) == 0 && len(g.allowed) == 0 {
		return nil
	}
	for _, s := range servers {
		if slices.Contains(names, string(s.ID)) {
			return nil
		}
	}
	return fmt.Errorf("%w: it names %q", errNotPeer, names)
}

// peerNames returns the names a peer's certificate gives itself: its
// Common Name, if any, and its DNS names.
func peerNames(cs tls.ConnectionState) []string {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	c := cs.PeerCertificates[0]
	names := slices.Clone(c.DNSNames)
	if c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	return names
}

// gatedConn is a Raft connection that fails, and closes, at the first read
// after its peer stops being admitted (a member removed from the
// configuration).
type gatedConn struct {
	*tls.Conn
	gate  *peerGate
	names []string
}

func (c *gatedConn) Read(p []byte) (int, error) {
	if err := c.gate.admits(c.names); err != nil {
		c.Conn.Close()
		return 0, err
	}
	return c.Conn.Read(p)
}

// tlsStream is a raft.StreamLayer over mutual TLS. Accept hands Raft only
// connections whose peer completed the handshake with a certificate of the
// peer CA that the gate admits, and Dial returns only such connections: a
// connection from or to anyone else is closed before Raft reads or writes
// a byte.
type tlsStream struct {
	ln    net.Listener
	addr  net.Addr // advertised
	conf  *tls.Config
	gate  *peerGate
	log   *slog.Logger
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	slots chan struct{}
}

var _ raft.StreamLayer = (*tlsStream)(nil)

func newTLSStream(ln net.Listener, addr net.Addr, conf *tls.Config, gate *peerGate, log *slog.Logger) *tlsStream {
	t := &tlsStream{ln: ln, addr: addr, conf: conf, gate: gate, log: log, conns: make(chan net.Conn),
		done: make(chan struct{}), slots: make(chan struct{}, maxPeerHandshakes)}
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
	gc, err := t.admit(tls.Server(c, t.conf))
	if err != nil {
		t.log.Warn("raft connection refused", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	select {
	case t.conns <- gc:
	case <-t.done:
		gc.Close()
	}
}

// admit completes tc's handshake and checks its peer with the gate; on
// failure it closes tc.
func (t *tlsStream) admit(tc *tls.Conn) (*gatedConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), peerHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		tc.Close()
		return nil, err
	}
	names := peerNames(tc.ConnectionState())
	if err := t.gate.admits(names); err != nil {
		tc.Close()
		return nil, err
	}
	return &gatedConn{Conn: tc, gate: t.gate, names: names}, nil
}

// Accept returns the next connection whose peer was admitted.
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

// Dial connects to a peer, completes the handshake within timeout and
// checks the peer with the gate.
func (t *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := dialPeer(address, timeout)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	gc, err := t.admit(tls.Client(c, t.conf))
	if err != nil {
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	_ = c.SetDeadline(time.Time{})
	return gc, nil
}
