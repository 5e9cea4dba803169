package client

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/rawio"
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
// idleConn closes a connection that carries no call and no Session
// stream (one to a node the client left, or used for Describe and List).
const idleConn = 30 * time.Second

// dial opens a TCP connection to a node that reads and writes with raw
// system calls (internal/rawio).
var dial = rawio.Dialer(&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second})

func newTransport(tlsConf *tls.Config) http.RoundTripper {
	h2c := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return dial(ctx, network, addr)
		},
		ReadIdleTimeout: idleCheck,
		PingTimeout:     pingTimeout,
		IdleConnTimeout: idleConn,
	}
	h2 := &http2.Transport{ReadIdleTimeout: idleCheck, PingTimeout: pingTimeout, IdleConnTimeout: idleConn, TLSClientConfig: tlsConf}
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

// errNoStreams: the HTTP client reached the node without HTTP/2, which a
// Session stream needs (a transport without h2c for http://, a proxy that
// speaks HTTP/1.1). The node refuses such a stream before it reads a call.
var errNoStreams = errors.New("no HTTP/2 to the node: Session streams need it")

// streamCheck fails a Session stream that did not get HTTP/2 from the node
// with an error wrapping errNoStreams, whatever the node or a proxy
// answered (the node answers 505 HTTP Version Not Supported).
type streamCheck struct{ next http.RoundTripper }

func (s streamCheck) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, fencelockv1connect.LockServiceSessionProcedure) {
		return resp, err
	}
	if resp.ProtoMajor < 2 || resp.StatusCode == http.StatusHTTPVersionNotSupported {
		resp.Body.Close()
		return nil, fmt.Errorf("%s answered %s over HTTP/%d.%d: %w", r.URL.Host, resp.Status, resp.ProtoMajor, resp.ProtoMinor, errNoStreams)
	}
	return resp, nil
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

// unary makes call c (an Acquire, Renew, Release or CancelWait) as a
// unary call: the route of a client without HTTP/2 to the node. The node
// runs it through the same method as a call of a stream, and a call whose
// ctx ends is cancelled on the node as a stream's is.
func (n *connectNode) unary(ctx context.Context, c *fencelockv1.Call) (*fencelockv1.Result, error) {
	r := &fencelockv1.Result{Id: c.Id}
	var err error
	switch op := c.Op.(type) {
	case *fencelockv1.Call_Acquire:
		var resp *connect.Response[fencelockv1.AcquireResponse]
		if resp, err = n.rpc.Acquire(ctx, connect.NewRequest(op.Acquire)); err == nil {
			r.Result = &fencelockv1.Result_Acquire{Acquire: resp.Msg}
		}
	case *fencelockv1.Call_Renew:
		var resp *connect.Response[fencelockv1.RenewResponse]
		if resp, err = n.rpc.Renew(ctx, connect.NewRequest(op.Renew)); err == nil {
			r.Result = &fencelockv1.Result_Renew{Renew: resp.Msg}
		}
	case *fencelockv1.Call_Release:
		var resp *connect.Response[fencelockv1.ReleaseResponse]
		if resp, err = n.rpc.Release(ctx, connect.NewRequest(op.Release)); err == nil {
			r.Result = &fencelockv1.Result_Release{Release: resp.Msg}
		}
	case *fencelockv1.Call_CancelWait:
		var resp *connect.Response[fencelockv1.CancelWaitResponse]
		if resp, err = n.rpc.CancelWait(ctx, connect.NewRequest(op.CancelWait)); err == nil {
			r.Result = &fencelockv1.Result_CancelWait{CancelWait: resp.Msg}
		}
	default:
		return nil, fmt.Errorf("call %d has no operation: %w", c.Id, fencelock.ErrInvalidArgument)
	}
	if err != nil {
		return nil, wire.FromCall(err)
	}
	return r, nil
}
