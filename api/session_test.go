package api_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/server"
	"github.com/gorilla/websocket"
)

// onEveryCarrier runs test once for each way a Session stream reaches the
// node: a Connect stream on HTTP/2, a WebSocket.
func onEveryCarrier(t *testing.T, test func(t *testing.T, carrier string)) {
	for _, carrier := range []string{"connect", "websocket"} {
		t.Run(carrier, func(t *testing.T) { test(t, carrier) })
	}
}

// openSession opens a Session stream to n on carrier, until ctx ends.
func openSession(t *testing.T, ctx context.Context, n *fencelocktest.Node, carrier string) *sessionConn {
	t.Helper()
	if carrier == "websocket" {
		ws, resp, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+n.Addr+api.WebSocketPath, nil)
		if err != nil {
			t.Fatalf("dial the Session WebSocket: %v (%v)", err, resp)
		}
		c := &sessionConn{t: t, st: wsConn{ws}}
		t.Cleanup(c.closeResponse)
		return c
	}
	addr := n.Addr
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	rpc := fencelockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, "http://"+addr)
	c := &sessionConn{t: t, st: rpc.Session(ctx)}
	t.Cleanup(c.closeResponse) // before the server's Close, which waits for the stream
	return c
}

type sessionConn struct {
	t  *testing.T
	st interface {
		Send(*fencelockv1.SessionRequest) error
		Receive() (*fencelockv1.SessionResponse, error)
		CloseResponse() error
	}
}

func (c *sessionConn) closeResponse() { _ = c.st.CloseResponse() }

// wsConn is a test's end of a Session WebSocket.
type wsConn struct{ c *websocket.Conn }

func (w wsConn) Send(m *fencelockv1.SessionRequest) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return w.c.WriteMessage(websocket.BinaryMessage, b)
}

func (w wsConn) Receive() (*fencelockv1.SessionResponse, error) {
	_, b, err := w.c.ReadMessage()
	if err != nil {
		return nil, err
	}
	m := &fencelockv1.SessionResponse{}
	return m, proto.Unmarshal(b, m)
}

func (w wsConn) CloseResponse() error { return w.c.Close() }

func (c *sessionConn) send(m *fencelockv1.SessionRequest) {
	c.t.Helper()
	if err := c.st.Send(m); err != nil {
		c.t.Fatal(err)
	}
}

// results receives until it has n results, by call id.
func (c *sessionConn) results(n int) map[uint64]*fencelockv1.Result {
	c.t.Helper()
	out := map[uint64]*fencelockv1.Result{}
	for len(out) < n {
		m, err := c.st.Receive()
		if err != nil {
			c.t.Fatal(err)
		}
		for _, r := range m.Results {
			out[r.Id] = r
		}
	}
	return out
}

// acquireCall is call id acquiring name by request rid, labelled rid.
func acquireCall(id uint64, name, rid string, wait time.Duration) *fencelockv1.Call {
	return &fencelockv1.Call{Id: id, Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{
		Name: name, Ttl: durationpb.New(time.Minute), Wait: durationpb.New(wait), RequestId: rid, Holder: rid}}}
}

// waiting reports which of holders wait for lock name on n.
func waiting(t *testing.T, n *fencelocktest.Node, name fencelock.LockName) map[string]bool {
	t.Helper()
	li, err := n.Server.Describe(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, w := range li.Waiters {
		out[w.Holder] = true
	}
	return out
}

// holdLock takes name on n for a minute, so that other requests queue.
func holdLock(t *testing.T, n *fencelocktest.Node, name fencelock.LockName) {
	t.Helper()
	if _, err := n.Server.Acquire(context.Background(), server.AcquireRequest{Name: name, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testproc.Eventually(t, what, cond)
}

// TestSession_CallsRunAsTheirUnaryMethods: calls on one stream are answered
// by id, as their unary methods would answer them, errors included.
func TestSession_CallsRunAsTheirUnaryMethods(t *testing.T) {
	t.Parallel()
	onEveryCarrier(t, testSession_CallsRunAsTheirUnaryMethods)
}

func testSession_CallsRunAsTheirUnaryMethods(t *testing.T, carrier string) {
	n := fencelocktest.StartNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openSession(t, ctx, n, carrier)
	c.send(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{
		acquireCall(1, "a", "r1", 0), acquireCall(2, "b", "r2", 0), acquireCall(3, "", "r3", 0)}})
	got := c.results(3)
	g := got[1].GetAcquire().GetGrant()
	if g == nil || got[2].GetAcquire().GetGrant() == nil {
		t.Fatalf("results %v, want grants for calls 1 and 2", got)
	}
	if err := wire.FromStatus(got[3].GetError()); !errors.Is(err, fencelock.ErrInvalidName) {
		t.Errorf("call 3 (no name): %v, want ErrInvalidName", err)
	}
	c.send(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{
		{Id: 4, Op: &fencelockv1.Call_Release{Release: &fencelockv1.ReleaseRequest{Name: "a", LeaseId: g.LeaseId, Token: g.Token}}},
		acquireCall(5, "b", "other", 0)}})
	got = c.results(2)
	if got[4].GetRelease() == nil {
		t.Errorf("release: %v", got[4])
	}
	var held *fencelock.LockHeldError
	if err := wire.FromStatus(got[5].GetError()); !errors.As(err, &held) || held.Token == 0 {
		t.Errorf("try-lock of a held lock: %v, want a LockHeldError", err)
	}
}

// TestSession_CancelAndStreamEndTakeWaitsBack: a cancelled call's request
// has left the queue when its answer comes (its caller withdrew it), while
// the other call's stays; every call of a stream that broke leaves no
// waiter once the grace is over.
func TestSession_CancelAndStreamEndTakeWaitsBack(t *testing.T) {
	t.Parallel()
	onEveryCarrier(t, testSession_CancelAndStreamEndTakeWaitsBack)
}

func testSession_CancelAndStreamEndTakeWaitsBack(t *testing.T, carrier string) {
	n := fencelocktest.StartNode(t)
	holdLock(t, n, "l")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c := openSession(t, ctx, n, carrier)
	c.send(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{
		acquireCall(1, "l", "w1", time.Minute), acquireCall(2, "l", "w2", time.Minute)}})
	eventually(t, "both queued", func() bool { w := waiting(t, n, "l"); return w["w1"] && w["w2"] })
	c.send(&fencelockv1.SessionRequest{Cancel: []uint64{1}})
	if got := c.results(1); !errors.Is(wire.FromStatus(got[1].GetError()), context.Canceled) {
		t.Fatalf("the cancelled call: %v, want canceled", got[1])
	}
	if w := waiting(t, n, "l"); w["w1"] || !w["w2"] {
		t.Fatalf("once the cancel was answered: w1 (cancelled) waits %v, w2 waits %v; want only w2", w["w1"], w["w2"])
	}
	c.closeResponse() // the stream breaks: the client resets it
	defer cancel()
	deadline := time.Now().Add(10 * time.Second) // the grace is 3 s
	for waiting(t, n, "l")["w2"] {
		if time.Now().After(deadline) {
			t.Fatal("w2 (broken stream) still queued after the grace")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSession_RefusesDuplicateIDs: a call whose id runs already on the
// stream is refused; the running one is not disturbed.
func TestSession_RefusesDuplicateIDs(t *testing.T) {
	t.Parallel()
	onEveryCarrier(t, testSession_RefusesDuplicateIDs)
}

func testSession_RefusesDuplicateIDs(t *testing.T, carrier string) {
	n := fencelocktest.StartNode(t)
	holdLock(t, n, "l")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openSession(t, ctx, n, carrier)
	c.send(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{acquireCall(1, "l", "w1", time.Minute)}})
	eventually(t, "queued", func() bool { return waiting(t, n, "l")["w1"] })
	c.send(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{acquireCall(1, "x", "x1", 0)}})
	if got := c.results(1); !errors.Is(wire.FromStatus(got[1].GetError()), fencelock.ErrInvalidArgument) {
		t.Fatalf("a second call 1: %v, want ErrInvalidArgument", got[1])
	}
	if !waiting(t, n, "l")["w1"] {
		t.Fatal("the running call 1 was disturbed")
	}
}
