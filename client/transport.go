package client

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
)

// node is the client's seam to one node of the service: one method per
// operation, each a single attempt. Errors wrap fencelock's sentinels (see
// internal/wire); an error wrapping wire.ErrNoAnswer means the node did not
// answer at all (a broken connection, a dial that failed). Implementations
// are safe for concurrent use.
type node interface {
	acquire(ctx context.Context, req *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error)
	renew(ctx context.Context, req *fencelockv1.RenewRequest) (*fencelockv1.RenewResponse, error)
	release(ctx context.Context, req *fencelockv1.ReleaseRequest) error
	cancelWait(ctx context.Context, name, rid string) error
	describe(ctx context.Context, name string) (*fencelockv1.LockInfo, error)
	list(ctx context.Context, req *fencelockv1.ListRequest) (*fencelockv1.ListResponse, error)
	checkSequencer(ctx context.Context, seq string) (*fencelockv1.CheckSequencerResponse, error)
}

// How a node that stopped answering is found. A node that is frozen
// (SIGSTOP, a stalled VM) still has its TCP connections accepted by the
// kernel. A Session stream with calls out pings the node when it has sent
// nothing for pingAfter, and breaks when no answer comes within
// pingTimeout (stream.watch); an idle stream costs the node nothing. The
// default transport checks an idle connection the same way every
// idleCheck.
const (
	dialTimeout = time.Second
	pingAfter   = time.Second
	pingTimeout = 2 * time.Second
	idleCheck   = 30 * time.Second
)

// newTransport returns the default HTTP transport: HTTP/2 for every
// endpoint, without TLS (h2c) for http:// URLs, many calls multiplexed on
// each connection. golang.org/x/net/http2 dials one connection at a time
// per node, also when thousands of calls start at once, and a new one only
// when the node's limit of calls per connection is reached.
func newTransport(tlsConf *tls.Config) http.RoundTripper {
	dial := (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	h2c := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return dial(ctx, network, addr)
		},
		ReadIdleTimeout: idleCheck,
		PingTimeout:     pingTimeout,
	}
	h2 := &http2.Transport{ReadIdleTimeout: idleCheck, PingTimeout: pingTimeout, TLSClientConfig: tlsConf}
	return schemes{"http": h2c, "https": h2}
}

// schemes routes a request by its URL's scheme.
type schemes map[string]*http2.Transport

func (s schemes) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, fencelockv1connect.LockServiceSessionProcedure) && r.Body != nil {
		r = r.WithContext(r.Context())
		r.Body = &wholeMessages{ReadCloser: r.Body}
	}
	if t := s[r.URL.Scheme]; t != nil {
		return t.RoundTrip(r)
	}
	return nil, fmt.Errorf("endpoint scheme %q: want http or https", r.URL.Scheme)
}

// wholeMessages reads a stream's request body a whole message (its 5-byte
// prefix and its payload) at a time, where it fits the caller's buffer.
// Connect writes the prefix and the payload to the body with a write each,
// and the HTTP/2 transport sends what each read returns as a frame of its
// own, with a system call each.
type wholeMessages struct {
	io.ReadCloser
	left int  // bytes of the current message not yet read
	raw  bool // a read shorter than a prefix came: pass reads through
}

func (w *wholeMessages) Read(p []byte) (int, error) {
	switch {
	case w.raw:
		return w.ReadCloser.Read(p)
	case w.left > 0:
		n, err := w.ReadCloser.Read(p[:min(len(p), w.left)])
		w.left -= n
		return n, err
	case len(p) < 5:
		w.raw = true
		return w.ReadCloser.Read(p)
	}
	if n, err := io.ReadFull(w.ReadCloser, p[:5]); err != nil {
		return n, err
	}
	size := int(binary.BigEndian.Uint32(p[1:5]))
	n, err := io.ReadFull(w.ReadCloser, p[5:5+min(size, len(p)-5)])
	w.left = size - n
	return 5 + n, err
}

// CloseIdleConnections closes every idle connection.
func (s schemes) CloseIdleConnections() {
	for _, t := range s {
		t.CloseIdleConnections()
	}
}

// connectNode holds the unary calls of node, over Connect on hc
// (sessionNode adds the rest).
type connectNode struct {
	rpc fencelockv1connect.LockServiceClient
}

func newConnectNode(hc *http.Client, url string) *connectNode {
	return &connectNode{rpc: fencelockv1connect.NewLockServiceClient(hc, url)}
}

func (n *connectNode) describe(ctx context.Context, name string) (*fencelockv1.LockInfo, error) {
	resp, err := n.rpc.Describe(ctx, connect.NewRequest(&fencelockv1.DescribeRequest{Name: name}))
	if err != nil {
		return nil, wire.FromCall(err)
	}
	return resp.Msg.Lock, nil
}

func (n *connectNode) list(ctx context.Context, req *fencelockv1.ListRequest) (*fencelockv1.ListResponse, error) {
	resp, err := n.rpc.List(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wire.FromCall(err)
	}
	return resp.Msg, nil
}

func (n *connectNode) checkSequencer(ctx context.Context, seq string) (*fencelockv1.CheckSequencerResponse, error) {
	resp, err := n.rpc.CheckSequencer(ctx, connect.NewRequest(&fencelockv1.CheckSequencerRequest{Sequencer: seq}))
	if err != nil {
		return nil, wire.FromCall(err)
	}
	return resp.Msg, nil
}
