package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/server"
	"github.com/gorilla/websocket"
)

// stalledNode is a node whose acquires stay on their way through Raft
// until raft is closed, then are granted.
type stalledNode struct {
	raft    chan struct{}
	ended   chan struct{} // if set, gets a value for each acquire whose context ended
	tokens  sync.Mutex
	granted fencelock.Token
}

func (n *stalledNode) Acquire(ctx context.Context, req server.AcquireRequest) (fencelock.Grant, error) {
	select {
	case <-n.raft:
	case <-ctx.Done():
		if n.ended != nil {
			n.ended <- struct{}{}
		}
		return fencelock.Grant{}, ctx.Err()
	}
	n.tokens.Lock()
	defer n.tokens.Unlock()
	n.granted++
	return fencelock.Grant{Name: req.Name, Token: n.granted, LeaseID: fencelock.NewLeaseID(), TTL: req.TTL}, nil
}

var errNotHere = errors.New("not on this node")

func (n *stalledNode) Renew(_ context.Context, rs []server.Renewal) {
	for i := range rs {
		rs[i].Err = errNotHere
	}
}
func (n *stalledNode) Release(context.Context, fencelock.LockName, fencelock.LeaseID, fencelock.Token) error {
	return errNotHere
}
func (n *stalledNode) CancelWait(context.Context, fencelock.LockName, string) error {
	return errNotHere
}
func (n *stalledNode) Refused(string, error) {}
func (n *stalledNode) Done() <-chan struct{} { return nil }

// sessionOnly serves Session streams on a node.
type sessionOnly struct {
	fencelockv1connect.UnimplementedLockServiceHandler
	n  node
	wk *workers
}

// testWorkers returns a pool of call goroutines that ends with the test.
func testWorkers(t *testing.T) *workers {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return newWorkers(done)
}

func (h sessionOnly) Session(ctx context.Context, st *connect.BidiStream[fencelockv1.SessionRequest, fencelockv1.SessionResponse]) error {
	return serveSession(ctx, h.n, h.wk, st)
}

// countingNode is a stalledNode that counts the acquires on their way
// through Raft, and answers renewals with an error of msg.
type countingNode struct {
	stalledNode
	msg          string
	mu           sync.Mutex
	inRaft, most int
}

func (n *countingNode) Acquire(ctx context.Context, req server.AcquireRequest) (fencelock.Grant, error) {
	n.mu.Lock()
	n.inRaft++
	n.most = max(n.most, n.inRaft)
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.inRaft--
		n.mu.Unlock()
	}()
	return n.stalledNode.Acquire(ctx, req)
}

func (n *countingNode) Renew(_ context.Context, rs []server.Renewal) {
	for i := range rs {
		rs[i].Err = fmt.Errorf("%s: %w", n.msg, errNotHere)
	}
}

// h2Session serves Session streams on a node as Handler does: through
// boundBodies, with Sends that may take up to window.
type h2Session struct {
	sessionOnly
	window time.Duration
	ended  chan struct{} // if set, gets a value when a stream's handler returns
}

func (h h2Session) Session(ctx context.Context, st *connect.BidiStream[fencelockv1.SessionRequest, fencelockv1.SessionResponse]) error {
	err := serveSession(ctx, h.n, h.wk, newH2Stream(ctx, st, h.window))
	if h.ended != nil {
		h.ended <- struct{}{}
	}
	return err
}

// sessionMux serves h's Session streams as Handler does, through
// boundBodies.
func sessionMux(h h2Session) http.Handler {
	path, handler := fencelockv1connect.NewLockServiceHandler(h)
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	return boundBodies(mux)
}

// h2Client opens a Session stream to h served on h2c.
func h2Client(t *testing.T, ctx context.Context, h h2Session) *connect.BidiStreamForClient[fencelockv1.SessionRequest, fencelockv1.SessionResponse] {
	addr := testproc.ServeH2C(t, sessionMux(h))
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return fencelockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, "http://"+addr).Session(ctx)
}

// TestSession_AtMostMaxProposingInRaftAndRenewalsGoOn: of a burst of
// acquires, at most maxProposing are on their way through Raft at once;
// the stream is read on meanwhile, so a renewal and a ping sent after the
// burst are answered while Raft is stalled. Then every acquire is granted.
func TestSession_AtMostMaxProposingInRaftAndRenewalsGoOn(t *testing.T) {
	t.Parallel()
	n := &countingNode{stalledNode: stalledNode{raft: make(chan struct{})}, msg: "renewed"}
	var open sync.Once
	defer open.Do(func() { close(n.raft) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := h2Client(t, ctx, h2Session{sessionOnly: sessionOnly{n: n, wk: testWorkers(t)}, window: time.Minute})
	defer st.CloseResponse()
	var calls []*fencelockv1.Call
	for i := range maxProposing + 50 {
		calls = append(calls, &fencelockv1.Call{Id: uint64(i + 1), Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{
			Name: fmt.Sprintf("l%d", i), Ttl: durationpb.New(time.Minute), RequestId: "r"}}})
	}
	renewal := &fencelockv1.Call{Id: 100000, Op: &fencelockv1.Call_Renew{Renew: &fencelockv1.RenewRequest{Name: "x"}}}
	for _, m := range []*fencelockv1.SessionRequest{{Calls: calls}, {Ping: true, Calls: []*fencelockv1.Call{renewal}}} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	answered, pong := make(chan *fencelockv1.Result, len(calls)+1), make(chan struct{}, 1)
	go func() {
		for {
			m, err := st.Receive()
			if err != nil {
				return
			}
			if m.Pong {
				pong <- struct{}{}
			}
			for _, r := range m.Results {
				answered <- r
			}
		}
	}()
	for _, want := range []string{"renewal", "pong"} {
		select {
		case r := <-answered:
			if r.Id != renewal.Id {
				t.Fatalf("call %d answered while Raft was stalled", r.Id)
			}
		case <-pong:
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s while a burst of acquires waited for Raft", want)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n.mu.Lock()
		most := n.most
		n.mu.Unlock()
		if most > maxProposing || most < maxProposing && time.Now().After(deadline) {
			t.Fatalf("%d acquires on their way through Raft at most; want %d", most, maxProposing)
		}
		if most == maxProposing {
			break
		}
	}
	open.Do(func() { close(n.raft) })
	for range calls {
		select {
		case r := <-answered:
			if r.GetAcquire().GetGrant().GetToken() == 0 {
				t.Fatalf("call %d: %v, want a grant", r.Id, r)
			}
		case <-ctx.Done():
			t.Fatal("not every call was answered once Raft went on")
		}
	}
}

// TestSession_FailedSendEndsTheSession: once a send fails (the client
// stopped reading, or is gone), the stream's calls end and no call of it
// is granted any more: its grants would go to nobody.
func TestSession_FailedSendEndsTheSession(t *testing.T) {
	t.Parallel()
	n := &stalledNode{raft: make(chan struct{})}
	close(n.raft) // acquires are granted at once
	in := make(chan *fencelockv1.SessionRequest, 10)
	granted := make(chan struct{}, 10)
	st := &funcStream{in: in, send: func(m *fencelockv1.SessionResponse) error {
		for range m.Results {
			granted <- struct{}{}
		}
		return errors.New("write: deadline exceeded")
	}}
	done := make(chan struct{})
	go func() { _ = serveSession(context.Background(), n, testWorkers(t), st); close(done) }()
	in <- &fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{{Id: 1, Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{
		Name: "a", Ttl: durationpb.New(time.Minute)}}}}}
	<-granted // its answer's send fails
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the session goes on after a failed send")
	}
	n.tokens.Lock()
	defer n.tokens.Unlock()
	if n.granted != 1 {
		t.Fatalf("%d grants; want 1", n.granted)
	}
}

// funcStream is a Session stream whose messages come from in (until it is
// closed) and whose sends run send.
type funcStream struct {
	in    chan *fencelockv1.SessionRequest
	send  func(*fencelockv1.SessionResponse) error
	broke chan struct{} // if set, closing it breaks the stream
}

func (f *funcStream) Receive() (*fencelockv1.SessionRequest, error) {
	select {
	case m, ok := <-f.in:
		if !ok {
			return nil, io.EOF
		}
		return m, nil
	case <-f.broke:
		return nil, errors.New("connection reset")
	}
}

func (f *funcStream) Send(m *fencelockv1.SessionResponse) error { return f.send(m) }

// serve serves a Session on n whose messages come from in; it returns the
// channel its results go to (a nil for each pong), and each send then
// sleeps for pause.
func serve(t *testing.T, n node, in chan *fencelockv1.SessionRequest, pause time.Duration) <-chan *fencelockv1.Result {
	got := make(chan *fencelockv1.Result, 100)
	st := &funcStream{in: in, send: func(m *fencelockv1.SessionResponse) error {
		for _, r := range m.Results {
			got <- r
		}
		if m.Pong {
			got <- nil
		}
		time.Sleep(pause)
		return nil
	}}
	go func() { _ = serveSession(context.Background(), n, testWorkers(t), st) }()
	return got
}

// bigAnswers returns a Session server whose renewals are answered with
// 8 KB errors, whose sends may take 300 ms, and which tells ended when a
// stream's handler returns.
func bigAnswers(t *testing.T) (h2Session, chan struct{}) {
	n := &countingNode{stalledNode: stalledNode{raft: make(chan struct{})}, msg: strings.Repeat("x", 8000)}
	ended := make(chan struct{}, 1)
	return h2Session{sessionOnly: sessionOnly{n: n, wk: testWorkers(t)}, window: 300 * time.Millisecond, ended: ended}, ended
}

// rawSession opens a connection to addr that speaks HTTP/2 frame by frame,
// with settings, and starts Session stream 1 on it, whose first message
// holds calls renewals. The framer is the caller's, but for its first
// frames.
func rawSession(t *testing.T, addr string, calls int, settings ...http2.Setting) (net.Conn, *http2.Framer) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", fencelockv1connect.LockServiceSessionProcedure},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	var m fencelockv1.SessionRequest
	for id := range uint64(calls) {
		m.Calls = append(m.Calls, &fencelockv1.Call{Id: id + 1, Op: &fencelockv1.Call_Renew{Renew: &fencelockv1.RenewRequest{Name: "x"}}})
	}
	b, err := proto.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	var open []error
	open = append(open, fr.WriteSettings(settings...))
	for _, s := range settings {
		if s.ID == http2.SettingInitialWindowSize { // the connection's window too
			open = append(open, fr.WriteWindowUpdate(0, s.Val-65535))
		}
	}
	open = append(open, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}),
		fr.WriteData(1, false, append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)))
	for _, err := range open {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c, fr
}

// TestSession_HTTP2ClientThatStopsReadingIsEnded: a client that sends
// calls and grants no flow-control window for the answers (as one that
// stops reading) holds the node's send; the send gives up after the
// stream's window and the session ends (it would otherwise hold its calls,
// and their answers, for the connection's life).
func TestSession_HTTP2ClientThatStopsReadingIsEnded(t *testing.T) {
	t.Parallel()
	h, ended := bigAnswers(t)
	addr := testproc.ServeH2C(t, sessionMux(h))
	var wmu sync.Mutex // the framer's writes, from here on
	wmu.Lock()
	_, fr := rawSession(t, addr, 100) // 100 answers of 8 KB: more than the 64 KiB window
	wmu.Unlock()
	go func() { // acks settings and pings, and never opens a window
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			wmu.Lock()
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					_ = fr.WritePing(true, f.Data)
				}
			}
			wmu.Unlock()
		}
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the session of a client that takes no answers still runs after 10 s")
	}
}

// TestSession_EndEndsCallsInWaves: once the stream's context ends, end
// cancels its calls at most maxProposing at a time, each wave after the
// last has ended, and returns when all have.
func TestSession_EndEndsCallsInWaves(t *testing.T) {
	t.Parallel()
	ss := &session{calls: make(map[uint64]*running)}
	var mu sync.Mutex
	ending, most, ended := 0, 0, 0
	const n = 3*maxProposing + 5
	for id := range uint64(n) {
		r := &running{done: make(chan struct{})}
		var once sync.Once
		r.cancel = func(error) {
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

// TestWebSocket_silentClientIsClosed: the node ends a Session WebSocket
// whose client sends nothing, not even the pongs to its pings; one that
// reads (and so answers the pings) stays open.
func TestWebSocket_silentClientIsClosed(t *testing.T) {
	ping := wsPing{after: 100 * time.Millisecond, timeout: 100 * time.Millisecond}
	addr := testproc.ServeH2C(t, sessionWebSocket(&stalledNode{raft: make(chan struct{})}, testWorkers(t), ping))
	dial := func() *websocket.Conn {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	silent, reading := dial(), dial()
	pongs := make(chan *fencelockv1.SessionResponse, 1)
	go func() {
		for {
			_, b, err := reading.ReadMessage() // answers the node's pings meanwhile
			if err != nil {
				return
			}
			m := &fencelockv1.SessionResponse{}
			if proto.Unmarshal(b, m) == nil && m.Pong {
				pongs <- m
			}
		}
	}()
	time.Sleep(600 * time.Millisecond) // past the ping and its timeout, twice
	_ = silent.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _, err := silent.ReadMessage()
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a silent client's socket: %v, want it closed by the node", err)
	}
	b, _ := proto.Marshal(&fencelockv1.SessionRequest{Ping: true})
	if err := reading.WriteMessage(websocket.BinaryMessage, b); err != nil {
		t.Fatalf("the reading client's socket was closed: %v", err)
	}
	select {
	case <-pongs:
	case <-time.After(2 * time.Second):
		t.Fatal("the reading client got no pong: its socket was closed")
	}
}

// TestWebSocket_closeFrameEndsTheCalls: a client's close frame ends its
// stream as a broken one: the calls waiting on it end (nothing could be
// sent after it), rather than waiting to answer into a closed socket.
func TestWebSocket_closeFrameEndsTheCalls(t *testing.T) {
	t.Parallel()
	n := &stalledNode{raft: make(chan struct{}), ended: make(chan struct{}, 1)}
	addr := testproc.ServeH2C(t, sessionWebSocket(n, testWorkers(t), defaultWSPing))
	c, _, err := websocket.DefaultDialer.Dial("ws://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := proto.Marshal(&fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{{Id: 1, Op: &fencelockv1.Call_Acquire{
		Acquire: &fencelockv1.AcquireRequest{Name: "l", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)}}}}})
	if err := c.WriteMessage(websocket.BinaryMessage, b); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the call waits
	if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the call still waits 5 s after its client closed the socket")
	}
}

// TestWebSocket_clientThatStopsReadingIsEnded: a send to a client that
// takes nothing fails once the silent client's time is up, so that its
// session, and the socket, end.
func TestWebSocket_clientThatStopsReadingIsEnded(t *testing.T) {
	t.Parallel()
	p := wsPing{after: 100 * time.Millisecond, timeout: 100 * time.Millisecond}
	failed := make(chan time.Duration, 1)
	up := websocket.Upgrader{}
	addr := testproc.ServeH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		ws := &wsStream{c: c, p: p}
		big := &fencelockv1.SessionResponse{Results: []*fencelockv1.Result{{Id: 1, Result: &fencelockv1.Result_Error{
			Error: &fencelockv1.Status{Message: strings.Repeat("x", 1<<20)}}}}}
		start := time.Now()
		for time.Since(start) < 10*time.Second {
			if err := ws.Send(big); err != nil {
				failed <- time.Since(start)
				return
			}
		}
	}))
	c, _, err := websocket.DefaultDialer.Dial("ws://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() // never read
	select {
	case d := <-failed:
		t.Logf("the send failed after %v", d.Round(time.Millisecond))
	case <-time.After(8 * time.Second):
		t.Fatal("sends to a client that reads nothing still block after 8 s")
	}
}

// TestWorkers_reuseIdleGoroutines: a call that finds a worker idle runs
// on it (no goroutine of its own); at most maxIdleWorkers stay idle; they
// end when the node closes.
func TestWorkers_reuseIdleGoroutines(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	w := newWorkers(done)
	idle := func(n int32) {
		t.Helper()
		testproc.Eventually(t, fmt.Sprintf("%d idle workers", n), func() bool { return w.idle.Load() == n })
	}
	var ran sync.WaitGroup
	ran.Add(1)
	w.run(taskFunc(ran.Done))
	ran.Wait()
	idle(1)

	release := make(chan struct{})
	started := make(chan struct{}, 4*maxIdleWorkers)
	block := func() { started <- struct{}{}; <-release }
	// A worker counts itself idle a moment before it waits: a call made
	// in between starts a goroutine of its own, and the next one tries
	// again.
	testproc.Eventually(t, "a call runs on the idle worker, none idle", func() bool {
		w.run(taskFunc(block))
		<-started
		return w.idle.Load() == 0
	})
	for range 2*maxIdleWorkers - 1 {
		w.run(taskFunc(block))
	}
	for range 2*maxIdleWorkers - 1 {
		<-started
	}
	close(release)
	idle(maxIdleWorkers)
	close(done)
	idle(0)
}

// entryCountNode is a stalledNode that counts the acquires that reach it.
type entryCountNode struct {
	stalledNode
	entered atomic.Int32
}

func (n *entryCountNode) Acquire(ctx context.Context, req server.AcquireRequest) (fencelock.Grant, error) {
	n.entered.Add(1)
	return n.stalledNode.Acquire(ctx, req)
}

// TestSession_BrokenStreamProposesNoMore: the calls of a stream that broke
// while they waited for a Raft slot are not proposed: each would be granted
// to nobody and taken back, costing Raft three entries.
func TestSession_BrokenStreamProposesNoMore(t *testing.T) {
	t.Parallel()
	n := &entryCountNode{stalledNode: stalledNode{raft: make(chan struct{})}}
	in := make(chan *fencelockv1.SessionRequest, 1)
	broke := make(chan struct{})
	st := &funcStream{in: in, send: func(*fencelockv1.SessionResponse) error { return nil }, broke: broke}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = serveSession(ctx, n, testWorkers(t), st); close(done) }()
	var calls []*fencelockv1.Call
	for i := range maxProposing + 1000 {
		calls = append(calls, &fencelockv1.Call{Id: uint64(i + 1), Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{
			Name: fmt.Sprintf("l%d", i), Ttl: durationpb.New(time.Minute)}}})
	}
	in <- &fencelockv1.SessionRequest{Calls: calls}
	for n.entered.Load() < maxProposing {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	before := n.entered.Load()
	close(broke)
	cancel() // as Connect does when the client resets the stream
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the session did not end")
	}
	if after := n.entered.Load(); after > before {
		t.Fatalf("%d acquires reached Raft before the stream broke, %d after", before, after-before)
	}
}

// TestSession_ClientAtTheBoundIsNotRefused: a client that keeps
// maxSessionCalls calls out, and sends one more as soon as an answer
// comes, is not refused: the node counts an answer out when it goes to be
// sent, not once its send returns (the client may have read it before).
func TestSession_ClientAtTheBoundIsNotRefused(t *testing.T) {
	t.Parallel()
	n := &countingNode{stalledNode: stalledNode{raft: make(chan struct{})}, msg: "renewed"}
	defer close(n.raft)
	in := make(chan *fencelockv1.SessionRequest, 10)
	got := serve(t, n, in, 100*time.Millisecond) // the sender is descheduled after its write
	defer close(in)
	var calls []*fencelockv1.Call
	for i := range maxSessionCalls - 1 { // long waits
		calls = append(calls, &fencelockv1.Call{Id: uint64(i + 1), Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{
			Name: fmt.Sprintf("l%d", i), Ttl: durationpb.New(time.Minute)}}})
	}
	renew := func(id uint64) *fencelockv1.Call {
		return &fencelockv1.Call{Id: id, Op: &fencelockv1.Call_Renew{Renew: &fencelockv1.RenewRequest{Name: "x"}}}
	}
	in <- &fencelockv1.SessionRequest{Calls: append(calls, renew(100000))} // maxSessionCalls out
	<-got                                                                  // one answered: one more may go
	in <- &fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{renew(100001)}}
	select {
	case r := <-got:
		if !strings.Contains(r.GetError().GetMessage(), "renewed") {
			t.Fatalf("call %d, the client's %dth out, was refused: %v", r.Id, maxSessionCalls, r.GetError().GetMessage())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
}

// TestHTTPServer_ClosesAConnectionThatTakesNothing: a client that opens
// every flow-control window, sends on (pings) and reads nothing fills the
// socket, so that not even the reset of its stream can be written;
// HTTPServer closes the connection once it could write nothing for
// writeByteTimeout, and the session ends.
func TestHTTPServer_ClosesAConnectionThatTakesNothing(t *testing.T) {
	t.Parallel()
	h, ended := bigAnswers(t)
	ln := testproc.Listen(t)
	hs := HTTPServer(sessionMux(h))
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	// 4,000 answers of 8 KB: more than the sockets hold.
	_, fr := rawSession(t, ln.Addr().String(), 4000, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	go func() { // the client sends on (so the node's pings for an idle peer never start), reading nothing
		for i := uint64(0); ; i++ {
			time.Sleep(500 * time.Millisecond)
			if fr.WritePing(false, [8]byte{byte(i)}) != nil {
				return
			}
		}
	}()
	select { // the socket is never read
	case <-ended:
	case <-time.After(writeByteTimeout + 20*time.Second):
		t.Fatalf("the session of a client that takes no byte still runs %v after", writeByteTimeout+20*time.Second)
	}
}

// batchNode records the renewals each Renew call of the session carries,
// and renews them once proceed is closed, unless ctx ended.
type batchNode struct {
	stalledNode
	batches chan int
	proceed chan struct{}
}

func (n *batchNode) Renew(ctx context.Context, rs []server.Renewal) {
	n.batches <- len(rs)
	<-n.proceed
	for i := range rs {
		rs[i].TTL, rs[i].Err = time.Minute, ctx.Err()
	}
}

// TestSession_RenewalsOfAMessageGoTogether: the renewals of one message
// reach the node in one Renew (one leader check), and a cancel of one of
// them does not cut it short: each is answered with its renewal.
func TestSession_RenewalsOfAMessageGoTogether(t *testing.T) {
	t.Parallel()
	n := &batchNode{stalledNode: stalledNode{raft: make(chan struct{})}, batches: make(chan int, 10), proceed: make(chan struct{})}
	defer close(n.raft)
	in := make(chan *fencelockv1.SessionRequest, 10)
	got := serve(t, n, in, 0)
	defer close(in)
	calls := []*fencelockv1.Call{{Id: 1, Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{Name: "w", Ttl: durationpb.New(time.Minute)}}}}
	for id := uint64(2); id <= 4; id++ {
		calls = append(calls, &fencelockv1.Call{Id: id, Op: &fencelockv1.Call_Renew{Renew: &fencelockv1.RenewRequest{
			Name: "x", LeaseId: "L", Token: id, NoSequencer: true}}})
	}
	in <- &fencelockv1.SessionRequest{Calls: calls}
	if b := receive(t, n.batches); b != 3 {
		t.Fatalf("the node renewed %d grants in one call, want the message's 3", b)
	}
	in <- &fencelockv1.SessionRequest{Cancel: []uint64{3}, Ping: true} // answered after the cancel is read
	if r := receive(t, got); r != nil {
		t.Fatalf("an answer before the node renewed: %v", r)
	}
	close(n.proceed)
	answered := map[uint64]bool{}
	for range 3 {
		r := receive(t, got)
		if r.GetRenew().GetTtl().AsDuration() != time.Minute {
			t.Errorf("call %d: %v, want its renewal", r.GetId(), r)
		}
		answered[r.GetId()] = true
	}
	if !answered[2] || !answered[3] || !answered[4] {
		t.Errorf("answered calls %v, want 2, 3 and 4", answered)
	}
	select {
	case b := <-n.batches:
		t.Errorf("a second Renew of %d grants for one message", b)
	default:
	}
}

// receive returns the next value of ch, failing t after 10 s without one.
func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing came")
	}
	var zero T
	return zero
}

// TestSession_RenewalsGoFirstAndPastTheBoundAreRefused: a message's
// renewals are taken before its other calls, so that near the bound an
// acquire is refused rather than a renewal; renewals past the bound are
// refused, each with too_large.
func TestSession_RenewalsGoFirstAndPastTheBoundAreRefused(t *testing.T) {
	t.Parallel()
	n := &stalledNode{raft: make(chan struct{})}
	defer close(n.raft)
	in := make(chan *fencelockv1.SessionRequest, 10)
	got := serve(t, n, in, 0)
	defer close(in)
	acquire := func(id uint64) *fencelockv1.Call {
		return &fencelockv1.Call{Id: id, Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{
			Name: fmt.Sprintf("l%d", id), Ttl: durationpb.New(time.Minute)}}}
	}
	renew := func(id uint64) *fencelockv1.Call {
		return &fencelockv1.Call{Id: id, Op: &fencelockv1.Call_Renew{Renew: &fencelockv1.RenewRequest{Name: "x"}}}
	}
	var waits []*fencelockv1.Call
	for id := range uint64(maxSessionCalls - 2) { // stay on their way through Raft
		waits = append(waits, acquire(id+1))
	}
	in <- &fencelockv1.SessionRequest{Calls: waits}
	in <- &fencelockv1.SessionRequest{Calls: []*fencelockv1.Call{acquire(100000), renew(100001), renew(100002), renew(100003)}}
	want := map[uint64]string{100000: "too_large", 100001: "not on this node", 100002: "not on this node", 100003: "too_large"}
	for range want {
		r := receive(t, got)
		e := r.GetError()
		if w, ok := want[r.Id]; !ok || !strings.Contains(e.GetMessage()+" "+e.GetDetail().GetCode(), w) {
			t.Errorf("call %d: %v, want %q", r.Id, e, want[r.Id])
		}
	}
}
