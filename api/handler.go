// Package api serves a fencelock node (server.Server) on the network: the
// Connect API (unary calls and the Session stream, gRPC, gRPC-Web and
// JSON), the dashboard, /metrics and health, and the client of other
// nodes' APIs a node needs (Peers). It holds no lock semantics: each call
// runs the node's operation of the same name.
package api

import (
	"bufio"
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/rawio"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/server"
)

// maxMessageBytes bounds a request message; every field has a smaller limit.
const maxMessageBytes = wire.MaxRequestBytes

// Handler returns node s's HTTP handler: the Connect API (gRPC, gRPC-Web
// and JSON), the dashboard at /ui/, /metrics, /healthz (the process is
// up), /readyz (the node is a ready leader, or a follower in sync with
// one: server.Server.InSync) and /readyz?leader (the node is a ready
// leader), and with server.Config.Profiling Go's profiles under
// /debug/pprof/ (admin-only, as server.Server.RequireAdmin). Serve it with
// HTTPServer, or with HTTP/2 enabled.
func Handler(s *server.Server) http.Handler {
	cfg := s.Config()
	mux := http.NewServeMux()
	// The node sends nothing compressed, whatever the client accepts: a
	// Session answer of many renewals is large, its signed sequencers barely
	// shrink, and gzip took a fifth of the node's CPU. It still reads
	// compressed requests.
	opts := connect.WithHandlerOptions(connect.WithReadMaxBytes(maxMessageBytes), connect.WithCompressMinBytes(math.MaxInt))
	wk := newWorkers(s.Done())
	path, h := fencelockv1connect.NewLockServiceHandler(&lockAPI{s, wk}, opts)
	mux.Handle(path, h)
	cpath, ch := fencelockv1connect.NewClusterServiceHandler(&clusterAPI{s}, opts)
	mux.Handle(cpath, ch)
	mux.Handle(WebSocketPath, sessionWebSocket(s, wk, defaultWSPing))
	mux.Handle("/metrics", promhttp.HandlerFor(s.Gatherer(), promhttp.HandlerOpts{}))
	ui := uiHandler(s)
	mux.Handle("/ui", ui)
	mux.Handle("/ui/", ui)
	if cfg.Profiling {
		mux.Handle("/debug/pprof/", profiles(s))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		_, leaderOnly := r.URL.Query()["leader"]
		switch {
		case s.Ready():
			_, _ = w.Write([]byte("ok: leader\n"))
		case leaderOnly:
			http.Error(w, "not ready: not the leader, or leases not re-armed yet", http.StatusServiceUnavailable)
		case s.InSync():
			_, _ = w.Write([]byte("ok: follower in sync with the leader\n"))
		default:
			http.Error(w, "not ready: no leader heard from lately, or behind the leader", http.StatusServiceUnavailable)
		}
	})
	return cfg.ACL.Middleware(cfg.AdminToken, boundBodies(mux))
}

// boundBodies caps the body of every request but a Session stream's (whose
// messages Connect bounds one by one) at a message's size and a little:
// past it the read fails and the connection is not drained, so a body that
// claims a gigabyte costs no more than the cap. A Session stream gets its
// response's controller, for write deadlines (h2Stream).
func boundBodies(next http.Handler) http.Handler {
	session := fencelockv1connect.LockServiceSessionProcedure
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Body == nil:
		case r.URL.Path != session:
			r.Body = http.MaxBytesReader(w, r.Body, maxMessageBytes+4096)
		default:
			r.Body = bufferedBody{bufio.NewReaderSize(r.Body, 4096), r.Body}
			r = r.WithContext(context.WithValue(r.Context(), responseControllerKey{}, http.NewResponseController(w)))
		}
		next.ServeHTTP(w, r)
	})
}

// bufferedBody reads a stream's body through a buffer: Connect reads each
// message's prefix and payload with a read each, and net/http's HTTP/2
// server wakes its serve loop for every read.
type bufferedBody struct {
	*bufio.Reader
	io.Closer
}

// MaxStreams bounds the calls one HTTP/2 connection carries at once.
const MaxStreams = 4096

// HTTPServer returns an http.Server for h (the node's Handler) that speaks
// HTTP/1.1 and HTTP/2, also without TLS (h2c: gRPC and the Go client), with
// up to MaxStreams calls at once on one connection. It pings an HTTP/2
// client that has sent nothing for a while: a connection whose peer froze
// or vanished is closed, and the waits it carries end (see Acquire). Idle
// connections close after five minutes.
func HTTPServer(h http.Handler) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: h, Protocols: p, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: MaxStreams, SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second,
			WriteByteTimeout: writeByteTimeout}}
}

// writeByteTimeout closes an HTTP/2 connection that takes no byte of what
// the node has to send for this long: a client that sends on but reads
// nothing fills the socket, and then not even the reset of its streams
// (h2Stream) can be written. Its pings come in, so the ping timeout
// does not end it.
const writeByteTimeout = 15 * time.Second

// BufferReads returns ln whose connections read through a 16 KiB buffer,
// and read and write TCP with raw system calls (internal/rawio). Serve
// HTTPServer on it: net/http's HTTP/2 server reads each frame's header and
// payload with a read of its own, and a buffer takes the frames that have
// arrived in one.
func BufferReads(ln net.Listener) net.Listener { return bufferedListener{ln} }

type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c = rawio.Conn(c)
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, 16<<10)}, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes a TCP connection, as net/http does before it
// closes one whose request it did not read to the end.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// lockAPI adapts the node to the generated LockService interface.
type lockAPI struct {
	s       *server.Server
	workers *workers // the node's, shared by its sessions
}

var _ fencelockv1connect.LockServiceHandler = (*lockAPI)(nil)

// fail counts err as a refusal of method and turns it into a Connect error.
func fail(s *server.Server, method string, err error) error {
	s.Refused(method, err)
	return wire.ToConnect(err)
}

func acquireRequest(m *fencelockv1.AcquireRequest) server.AcquireRequest {
	return server.AcquireRequest{Name: fencelock.LockName(m.Name), TTL: m.Ttl.AsDuration(), Wait: m.Wait.AsDuration(),
		RequestID: m.RequestId, Holder: m.Holder, KeepPlace: m.KeepPlace, NoSequencer: m.NoSequencer}
}

func acquireResponse(g fencelock.Grant) *fencelockv1.AcquireResponse {
	return &fencelockv1.AcquireResponse{Grant: &fencelockv1.Grant{
		Name: string(g.Name), Token: uint64(g.Token), LeaseId: string(g.LeaseID), Ttl: durationpb.New(g.TTL),
		Sequencer: g.Sequencer, ClusterId: g.ClusterID}}
}

// renewal is m as the node renews it.
func renewal(m *fencelockv1.RenewRequest) server.Renewal {
	return server.Renewal{Name: fencelock.LockName(m.Name), LeaseID: fencelock.LeaseID(m.LeaseId), Token: fencelock.Token(m.Token),
		Sign: !m.NoSequencer}
}

// renewAnswer is the answer to a call the node renewed as r.
func renewAnswer(r server.Renewal) (*fencelockv1.RenewResponse, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	return &fencelockv1.RenewResponse{Ttl: durationpb.New(r.TTL), Sequencer: r.Sequencer}, nil
}

func (a *lockAPI) Acquire(ctx context.Context, req *connect.Request[fencelockv1.AcquireRequest]) (*connect.Response[fencelockv1.AcquireResponse], error) {
	g, err := a.s.Acquire(ctx, acquireRequest(req.Msg))
	if err != nil {
		return nil, fail(a.s, "Acquire", err)
	}
	return connect.NewResponse(acquireResponse(g)), nil
}

func (a *lockAPI) Renew(ctx context.Context, req *connect.Request[fencelockv1.RenewRequest]) (*connect.Response[fencelockv1.RenewResponse], error) {
	rs := []server.Renewal{renewal(req.Msg)}
	a.s.Renew(ctx, rs)
	resp, err := renewAnswer(rs[0])
	if err != nil {
		return nil, fail(a.s, "Renew", err)
	}
	return connect.NewResponse(resp), nil
}

func (a *lockAPI) Release(ctx context.Context, req *connect.Request[fencelockv1.ReleaseRequest]) (*connect.Response[fencelockv1.ReleaseResponse], error) {
	m := req.Msg
	if err := a.s.Release(ctx, fencelock.LockName(m.Name), fencelock.LeaseID(m.LeaseId), fencelock.Token(m.Token)); err != nil {
		return nil, fail(a.s, "Release", err)
	}
	return connect.NewResponse(&fencelockv1.ReleaseResponse{}), nil
}

func (a *lockAPI) CancelWait(ctx context.Context, req *connect.Request[fencelockv1.CancelWaitRequest]) (*connect.Response[fencelockv1.CancelWaitResponse], error) {
	if err := a.s.CancelWait(ctx, fencelock.LockName(req.Msg.Name), req.Msg.RequestId); err != nil {
		return nil, fail(a.s, "CancelWait", err)
	}
	return connect.NewResponse(&fencelockv1.CancelWaitResponse{}), nil
}

func (a *lockAPI) Describe(ctx context.Context, req *connect.Request[fencelockv1.DescribeRequest]) (*connect.Response[fencelockv1.DescribeResponse], error) {
	li, err := a.s.Describe(ctx, fencelock.LockName(req.Msg.Name))
	if err != nil {
		return nil, fail(a.s, "Describe", err)
	}
	return connect.NewResponse(&fencelockv1.DescribeResponse{Lock: lockInfoMsg(li)}), nil
}

func (a *lockAPI) List(ctx context.Context, req *connect.Request[fencelockv1.ListRequest]) (*connect.Response[fencelockv1.ListResponse], error) {
	m := req.Msg
	locks, next, err := a.s.List(ctx, m.Prefix, m.PageToken, int(m.PageSize))
	if err != nil {
		return nil, fail(a.s, "List", err)
	}
	resp := &fencelockv1.ListResponse{NextPageToken: next}
	for _, li := range locks {
		resp.Locks = append(resp.Locks, lockInfoMsg(li))
	}
	return connect.NewResponse(resp), nil
}

func lockInfoMsg(li fencelock.LockInfo) *fencelockv1.LockInfo {
	m := &fencelockv1.LockInfo{Name: string(li.Name), Holder: li.Holder, Token: uint64(li.Token)}
	if li.Token != 0 {
		m.Ttl = durationpb.New(li.TTL)
	}
	if !li.Expires.IsZero() {
		m.Expires = timestamppb.New(li.Expires)
	}
	if !li.Acquired.IsZero() {
		m.Acquired = timestamppb.New(li.Acquired)
	}
	m.WaiterCount = uint32(li.WaiterCount)
	for _, w := range li.Waiters {
		m.Waiters = append(m.Waiters, &fencelockv1.Waiter{Holder: w.Holder, Ttl: durationpb.New(w.TTL)})
	}
	return m
}

func (a *lockAPI) CheckSequencer(ctx context.Context, req *connect.Request[fencelockv1.CheckSequencerRequest]) (*connect.Response[fencelockv1.CheckSequencerResponse], error) {
	seq, current, tok, err := a.s.CheckSequencer(ctx, req.Msg.Sequencer)
	if err != nil {
		return nil, fail(a.s, "CheckSequencer", err)
	}
	return connect.NewResponse(&fencelockv1.CheckSequencerResponse{Current: current, Name: string(seq.Lock), Token: uint64(tok)}), nil
}
