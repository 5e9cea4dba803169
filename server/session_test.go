package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
)

// openSession opens a Session stream to s, served over h2c, until ctx ends.
func openSession(t *testing.T, ctx context.Context, s *Server) *sessionConn {
	t.Helper()
	addr := testproc.ServeH2C(t, s.Handler())
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

func acquireCall(id uint64, name, rid string, wait time.Duration) *fencelockv1.Call {
	return &fencelockv1.Call{Id: id, Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{
		Name: name, Ttl: durationpb.New(time.Minute), Wait: durationpb.New(wait), RequestId: rid}}}
}

// TestSession_CallsRunAsTheirUnaryMethods: calls on one stream are answered
// by id, as their unary methods would answer them, errors included.
func TestSession_CallsRunAsTheirUnaryMethods(t *testing.T) {
	s := openInProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openSession(t, ctx, s)
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

// TestSession_CancelAndStreamEndTakeWaitsBack: a cancelled call, and every
// call of a stream that broke, leave no waiter once the grace is over.
func TestSession_CancelAndStreamEndTakeWaitsBack(t *testing.T) {
	s := openInProcess(t)
	queueBehind(t, s, "l")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c := openSession(t, ctx, s)
	c.send(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{
		acquireCall(1, "l", "w1", time.Minute), acquireCall(2, "l", "w2", time.Minute)}})
	eventually(t, "both queued", func() bool { return s.fsm.Queued("l", "w1") && s.fsm.Queued("l", "w2") })
	c.send(&fencelockv1.SessionRequest{Cancel: []uint64{1}})
	if got := c.results(1); !errors.Is(wire.FromStatus(got[1].GetError()), context.Canceled) {
		t.Fatalf("the cancelled call: %v, want canceled", got[1])
	}
	c.closeResponse() // the stream breaks: the client resets it
	defer cancel()
	deadline := time.Now().Add(callGrace + 5*time.Second)
	for s.fsm.Queued("l", "w1") || s.fsm.Queued("l", "w2") {
		if time.Now().After(deadline) {
			t.Fatalf("still queued after the grace: w1 (cancelled) %v, w2 (broken stream) %v", s.fsm.Queued("l", "w1"), s.fsm.Queued("l", "w2"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSession_RefusesDuplicateIDs: a call whose id runs already on the
// stream is refused; the running one is not disturbed.
func TestSession_RefusesDuplicateIDs(t *testing.T) {
	s := openInProcess(t)
	queueBehind(t, s, "l")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openSession(t, ctx, s)
	c.send(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{acquireCall(1, "l", "w1", time.Minute)}})
	eventually(t, "queued", func() bool { return s.fsm.Queued("l", "w1") })
	c.send(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{acquireCall(1, "x", "x1", 0)}})
	if got := c.results(1); !errors.Is(wire.FromStatus(got[1].GetError()), fencelock.ErrInvalidArgument) {
		t.Fatalf("a second call 1: %v, want ErrInvalidArgument", got[1])
	}
	if !s.fsm.Queued("l", "w1") {
		t.Fatal("the running call 1 was disturbed")
	}
}

// TestAcquire_GrantToACallerGoneIsHandedBack: a call whose stream broke
// but whose context has not ended yet (it waits for its wave in
// session.end) is not handed a grant: the grant is taken back with the
// request, and the lock does not stay held by nobody.
func TestAcquire_GrantToACallerGoneIsHandedBack(t *testing.T) {
	s := openInProcess(t)
	req := AcquireRequest{Name: "l", TTL: time.Minute, RequestID: "r", gone: func() bool { return true }}
	if g, err := s.Acquire(context.Background(), req); err == nil {
		t.Fatalf("a caller that is gone was handed grant %+v", g)
	}
	deadline := time.Now().Add(callGrace + 5*time.Second)
	for s.fsm.Holds("l", "r", "") {
		if time.Now().After(deadline) {
			t.Fatal("the grant made for a caller that is gone is still held after the grace")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSession_ReadsNoFurtherWhileMaxProposingAreInRaft: a stream with
// maxProposing calls on their way through Raft is not read further: a
// later message of it (a call with the id of one running, which would be
// refused at once) waits until one of them is answered. Then every call is
// answered.
func TestSession_ReadsNoFurtherWhileMaxProposingAreInRaft(t *testing.T) {
	s := openInProcess(t)
	gate := make(chan struct{})
	var open sync.Once
	defer open.Do(func() { close(gate) }) // before the server's Close, which waits for Raft
	observe := s.store.appended           // raft's leader loop reads it after this write (channels order them)
	s.store.appended = func(n int) { <-gate; observe(n) }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openSession(t, ctx, s)
	var calls []*fencelockv1.Call
	for i := range maxProposing + 1 {
		calls = append(calls, acquireCall(uint64(i+1), fmt.Sprintf("l%d", i), "r", 0))
	}
	c.send(&fencelockv1.SessionRequest{Calls: calls})
	// Read, it would be refused at once: call 1 runs.
	c.send(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{acquireCall(1, "l0", "r", 0)}})
	answered := make(chan *fencelockv1.Result, len(calls)+1) // and the second call 1
	go func() {
		for {
			m, err := c.st.Receive()
			if err != nil {
				return
			}
			for _, r := range m.Results {
				answered <- r
			}
		}
	}()
	select {
	case r := <-answered:
		t.Fatalf("call %d answered while Raft was stalled (%v): the stream was read on", r.Id, r)
	case <-time.After(500 * time.Millisecond):
	}
	open.Do(func() { close(gate) })
	for range calls {
		var r *fencelockv1.Result
		select {
		case r = <-answered:
		case <-ctx.Done():
			t.Fatal("not every call was answered once Raft went on")
		}
		if r.GetAcquire().GetGrant().GetToken() == 0 && r.Id != 1 { // the second call 1 may be refused
			t.Fatalf("call %d: %v, want a grant", r.Id, r)
		}
	}
}

// TestSession_EndEndsCallsInWaves: once the stream's context ends, end
// cancels its calls at most maxProposing at a time, each wave after the
// last has ended, and returns when all have.
func TestSession_EndEndsCallsInWaves(t *testing.T) {
	ss := &session{calls: make(map[uint64]*running)}
	var mu sync.Mutex
	ending, most, ended := 0, 0, 0
	const n = 3*maxProposing + 5
	for id := range uint64(n) {
		r := &running{done: make(chan struct{})}
		var once sync.Once
		r.cancel = func() {
			once.Do(func() {
				mu.Lock()
				ending++
				most = max(most, ending)
				mu.Unlock()
				go func() {
					time.Sleep(time.Millisecond)
					mu.Lock()
					ending--
					ended++
					mu.Unlock()
					ss.mu.Lock()
					delete(ss.calls, id)
					ss.mu.Unlock()
					close(r.done)
					ss.wg.Done()
				}()
			})
		}
		ss.calls[id] = r
		ss.wg.Add(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ss.end(ctx)
	mu.Lock()
	defer mu.Unlock()
	if ended != n || most > maxProposing || most == 0 {
		t.Fatalf("ended %d of %d calls, at most %d ending at once; want all, at most %d at once", ended, n, most, maxProposing)
	}
}
