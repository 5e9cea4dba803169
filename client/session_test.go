package client

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// pingCounter counts the pings of the Session streams it carries.
type pingCounter struct {
	next  http.RoundTripper
	pings atomic.Int64
}

func (p *pingCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/Session") && r.Body != nil {
		r.Body = &pingReader{ReadCloser: r.Body, n: &p.pings}
	}
	return p.next.RoundTrip(r)
}

// pingReader decodes the SessionRequests of a stream's body as it is read.
type pingReader struct {
	io.ReadCloser
	buf []byte
	n   *atomic.Int64
}

func (p *pingReader) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	p.buf = append(p.buf, b[:n]...)
	for len(p.buf) >= 5 {
		size := int(binary.BigEndian.Uint32(p.buf[1:5]))
		if len(p.buf) < 5+size {
			break
		}
		var m fencelockv1.SessionRequest
		if proto.Unmarshal(p.buf[5:5+size], &m) == nil && m.Ping {
			p.n.Add(1)
		}
		p.buf = p.buf[5+size:]
	}
	return n, err
}

// TestStream_PingsOnlyWhileCallsAreOut: a stream with no call out sends
// nothing; one with a call waiting pings the node, whose answers keep the
// call alive; and when the node freezes (SIGSTOP: the kernel still holds
// its connections) the waiting call fails as unanswered within seconds,
// not after its wait.
func TestStream_PingsOnlyWhileCallsAreOut(t *testing.T) {
	srv := testproc.StartServer(t)
	counter := &pingCounter{next: newTransport(nil)}
	c := quietTestClient(t, srv.Addr, func(cfg *Config) {
		cfg.HTTPClient = &http.Client{Transport: counter}
		cfg.RetryTimeout = 100 * time.Millisecond
	})
	other := quietTestClient(t, srv.Addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := other.Acquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	l, err := c.Acquire(ctx, "opens-the-stream")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * pingAfter)
	if n := counter.pings.Load(); n != 0 {
		t.Fatalf("a stream without calls out sent %d pings, want none", n)
	}

	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "held", WithWait(30*time.Second))
		waited <- err
	}()
	time.Sleep(pingAfter + pingTimeout + pingAfter/2)
	select {
	case err := <-waited:
		t.Fatalf("a waiting acquire on a live node ended: %v", err)
	default:
	}
	if n := counter.pings.Load(); n == 0 {
		t.Fatal("a stream with a call waiting for over a second sent no ping")
	}

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer srv.Signal(syscall.SIGCONT)
	stopped := time.Now()
	select {
	case err := <-waited:
		if !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("acquire waiting on a frozen node = %v, want an error wrapping ErrUnavailable", err)
		}
		t.Logf("the wait on the frozen node failed %v after the stop", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(3 * (pingAfter + pingTimeout)):
		t.Fatalf("an acquire waiting on a frozen node still waits %v after the stop", time.Since(stopped).Round(time.Second))
	}
}

// TestStream_DropBeforeSendSendsNothing: a call dropped before the writer
// took it is not sent, and no cancel goes for it (the node reads a
// message's cancels before its calls, and would run the call); a call
// dropped after the writer took it is cancelled.
func TestStream_DropBeforeSendSendsNothing(t *testing.T) {
	t.Parallel()
	st := &stream{wake: make(chan struct{}, 1), dead: make(chan struct{}), calls: make(map[uint64]chan *fencelockv1.Result),
		reading: true} // the test reads
	st.timer = time.AfterFunc(time.Hour, func() {})
	defer st.timer.Stop()
	acquire := func() *fencelockv1.Call {
		return &fencelockv1.Call{Op: &fencelockv1.Call_Acquire{Acquire: &fencelockv1.AcquireRequest{Name: "x"}}}
	}
	_, sent, _ := st.add(acquire())
	st.pending = nil // the writer took it
	_, kept, _ := st.add(acquire())
	_, dropped, _ := st.add(acquire())
	st.drop(dropped)
	st.drop(sent)
	if len(st.pending) != 1 || st.pending[0].Id != kept {
		t.Errorf("pending calls %v, want only call %d: a call dropped before it was sent is not sent", st.pending, kept)
	}
	if len(st.cancels) != 1 || st.cancels[0] != sent {
		t.Errorf("cancels %v, want only call %d, the one sent", st.cancels, sent)
	}
}

// idleCarrier sends into nothing and never receives: a stream whose
// answers the test hands to the calls itself.
type idleCarrier struct{}

func (idleCarrier) Send(*fencelockv1.SessionRequest) error         { return nil }
func (idleCarrier) Receive() (*fencelockv1.SessionResponse, error) { select {} }
func (idleCarrier) CloseRequest() error                            { return nil }
func (idleCarrier) CloseResponse() error                           { return nil }

// A call answered just before its stream is left (another call's answer
// was not_leader) returns that answer: it is not sent again on a new
// stream, where a release that succeeded would fail with NotHolder. And a
// call made on a stream left before the call was added goes on a new one.
func TestSession_AnsweredCallIsNotSentAgainWhenTheStreamIsLeft(t *testing.T) {
	t.Parallel()
	for i := 0; i < 40; i++ {
		n := newSessionNode(newConnectNode(http.DefaultClient, "http://127.0.0.1:1"), func() {}, newWSDialer("http://127.0.0.1:1", nil, ""))
		st := &stream{bidi: idleCarrier{}, cancel: func() {}, wake: make(chan struct{}, 1), dead: make(chan struct{}),
			calls: make(map[uint64]chan *fencelockv1.Result), reading: true} // the test reads
		st.timer = time.AfterFunc(time.Hour, func() {})
		st.timer.Stop()
		n.cur = st
		go func() { // the node answers the call; then the stream is left
			<-st.wake
			st.mu.Lock()
			c := st.pending[0]
			st.pending = nil
			ch := st.calls[c.Id]
			delete(st.calls, c.Id)
			ch <- &fencelockv1.Result{Id: c.Id, Result: &fencelockv1.Result_Release{Release: &fencelockv1.ReleaseResponse{}}}
			st.mu.Unlock()
			n.leave(st)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := n.release(ctx, &fencelockv1.ReleaseRequest{Name: "x", LeaseId: "l", Token: 1})
		cancel()
		if err != nil {
			t.Fatalf("release %d, answered with success, failed: %v", i, err)
		}
	}
	st := &stream{dead: make(chan struct{}), calls: make(map[uint64]chan *fencelockv1.Result)}
	st.err = errLeft
	if ch, _, _ := st.add(&fencelockv1.Call{}); ch != nil || len(st.pending) != 0 {
		t.Error("a call was queued on a stream that had ended")
	}
}

// echoCarrier answers every call it is sent, a moment later, and counts
// the most calls it had unanswered.
type echoCarrier struct {
	answers          chan *fencelockv1.SessionResponse
	mu               sync.Mutex
	unanswered, most int
}

func (e *echoCarrier) Send(m *fencelockv1.SessionRequest) error {
	e.mu.Lock()
	e.unanswered += len(m.Calls)
	e.most = max(e.most, e.unanswered)
	e.mu.Unlock()
	go func() {
		time.Sleep(5 * time.Millisecond)
		resp := &fencelockv1.SessionResponse{}
		for _, c := range m.Calls {
			resp.Results = append(resp.Results, &fencelockv1.Result{Id: c.Id, Result: &fencelockv1.Result_Release{Release: &fencelockv1.ReleaseResponse{}}})
		}
		e.mu.Lock()
		e.unanswered -= len(m.Calls)
		e.mu.Unlock()
		e.answers <- resp
	}()
	return nil
}

func (e *echoCarrier) Receive() (*fencelockv1.SessionResponse, error) { return <-e.answers, nil }
func (e *echoCarrier) CloseRequest() error                            { return nil }
func (e *echoCarrier) CloseResponse() error                           { return nil }

// nodeOver is a session node whose stream runs over carrier b with at most
// maxOut calls out; the stream fails when the test ends.
func nodeOver(t *testing.T, b carrier, maxOut int) (*sessionNode, *stream) {
	n := newSessionNode(newConnectNode(http.DefaultClient, "http://127.0.0.1:1"), func() {}, newWSDialer("http://127.0.0.1:1", nil, ""))
	st := newStream(b, func() {}, maxOut)
	n.cur = st
	t.Cleanup(func() { st.fail(errors.New("test over")) })
	return n, st
}

// The client has at most maxOut calls out on a stream (the node refuses
// calls past wire.MaxSessionCalls, and ends a stream with twice as many);
// the others go out as answers come back, and all are answered.
func TestSession_AtMostMaxOutCallsOut(t *testing.T) {
	t.Parallel()
	e := &echoCarrier{answers: make(chan *fencelockv1.SessionResponse, 100)}
	n, _ := nodeOver(t, e, 8)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 50 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := n.release(ctx, &fencelockv1.ReleaseRequest{Name: "x", LeaseId: "l", Token: 1}); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	if failed.Load() > 0 || e.most > 8 || e.most == 0 {
		t.Fatalf("%d calls failed; at most %d out at once, want 1..8", failed.Load(), e.most)
	}
	n2 := newSessionNode(newConnectNode(http.DefaultClient, "http://127.0.0.1:1"), func() {}, newWSDialer("http://127.0.0.1:1", nil, ""))
	if out := n2.open().maxOut; out <= 0 || out > wire.MaxSessionCalls {
		t.Errorf("a stream keeps up to %d calls out; a node refuses past %d", out, wire.MaxSessionCalls)
	}
	n2.close()
}

// silentCarrier takes every message and answers none.
type silentCarrier struct{ closed chan struct{} }

func (s *silentCarrier) Send(*fencelockv1.SessionRequest) error { return nil }
func (s *silentCarrier) Receive() (*fencelockv1.SessionResponse, error) {
	<-s.closed
	return nil, io.EOF
}
func (s *silentCarrier) CloseRequest() error  { return nil }
func (s *silentCarrier) CloseResponse() error { return nil }

// TestSession_ACallHeldBackDoesNotSilenceItsNode: a call whose context
// ends while it waits in the client for room among the calls out ends
// with errHeldBack, and its attempt does not mark the node silent; a call
// sent and not answered does.
func TestSession_ACallHeldBackDoesNotSilenceItsNode(t *testing.T) {
	t.Parallel()
	carrier := &silentCarrier{closed: make(chan struct{})}
	defer close(carrier.closed)
	n, st := nodeOver(t, carrier, 1)

	c := &Client{cfg: Config{AttemptTimeout: 300 * time.Millisecond, SilentFor: time.Minute}}
	release := func(ctx context.Context, _ *endpoint) error {
		return n.release(ctx, &fencelockv1.ReleaseRequest{Name: "x", LeaseId: "l", Token: 1})
	}
	sentEP, heldEP := &endpoint{host: "sent"}, &endpoint{host: "held"}
	errs := make(chan error, 1)
	go func() { errs <- c.attempt(context.Background(), sentEP, 0, release) }()
	for { // the first call is out: the stream has room for no other
		st.mu.Lock()
		out := st.out
		st.mu.Unlock()
		if out == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	err := c.attempt(context.Background(), heldEP, 0, release)
	if !errors.Is(err, errHeldBack) || !errors.Is(err, fencelock.ErrUnavailable) {
		t.Errorf("a call held back in the client: %v, want errHeldBack and ErrUnavailable", err)
	}
	if heldEP.silent() {
		t.Error("a call held back in the client marked its node silent")
	}
	if err := <-errs; errors.Is(err, errHeldBack) || !sentEP.silent() {
		t.Errorf("a call sent and not answered: %v, silent %v; want the node marked silent", err, sentEP.silent())
	}
}

// acquireRelease takes and releases lock name through c.
func acquireRelease(t *testing.T, ctx context.Context, c *Client, name string) {
	t.Helper()
	l, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// streamOf returns the stream c has open to its one node.
func streamOf(t *testing.T, c *Client) *stream {
	t.Helper()
	n := (*c.eps.Load())[0].node.(*sessionNode)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil {
		t.Fatal("no stream open")
	}
	return n.cur
}

func readingNow(st *stream) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.reading
}

// TestStream_OneCallAtATimeIsCarriedByItsCaller: on a WebSocket, calls
// made one at a time are read by their callers: once one returns, no
// goroutine holds the stream's read turn. An idle stream gets a reader
// of its own within pingAfter (it answers the node's pings, and notices
// a stream the node closed).
func TestStream_OneCallAtATimeIsCarriedByItsCaller(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	c := quietTestClient(t, srv.Addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pair := func() { acquireRelease(t, ctx, c, "one-at-a-time") }
	pair() // dials: its calls are read by a goroutine of the stream
	st := streamOf(t, c)
	self := 0
	for range 20 {
		pair()
		if !readingNow(st) {
			self++
		}
	}
	// The idle stream's reader, from a watch that ran meanwhile, may hold
	// the turn at a check or two.
	if self < 15 {
		t.Fatalf("after %d of 20 pairs of calls made one at a time, a goroutine held the read turn", 20-self)
	}
	if streamOf(t, c) != st {
		t.Fatal("the calls opened another stream")
	}
	testproc.Eventually(t, "an idle stream has a reader", func() bool { return readingNow(st) })
}

// TestStream_AReadingCallEndsWithItsContext: a call that holds the read
// turn returns when its context ends, long before its wait would, and
// leaves the stream working: a call made meanwhile was answered through
// it, and later calls go on the same stream.
func TestStream_AReadingCallEndsWithItsContext(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	c := quietTestClient(t, srv.Addr, nil)
	other := quietTestClient(t, srv.Addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, err := other.Acquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	warm := func() { acquireRelease(t, ctx, c, "warm") }
	warm() // dials
	st := streamOf(t, c)
	// The test holds the watch off, so that no idle reader takes the turn;
	// one that has is gone once it answered the next lone call.
	st.mu.Lock()
	st.timer.Stop()
	st.watching = true
	st.mu.Unlock()
	warm()
	testproc.Eventually(t, "no goroutine holds the read turn", func() bool { return !readingNow(st) })

	waitCtx, stop := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(waitCtx, "held", WithWait(time.Minute))
		waited <- err
	}()
	testproc.Eventually(t, "the waiting call reads", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.reading && st.out == 1
	})
	free, err := c.Acquire(ctx, "free") // answered through the waiting call's reading
	if err != nil {
		t.Fatal(err)
	}
	stop()
	stopped := time.Now()
	select {
	case err := <-waited:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the waiting acquire ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a call reading its stream did not end with its context")
	}
	t.Logf("ended %v after its context", time.Since(stopped).Round(time.Millisecond))
	if err := free.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if streamOf(t, c) != st {
		t.Fatal("the end of a reading call's context broke its stream")
	}
}

// TestStream_ALastReaderLeavingArmsTheWatch: a reader that gives up the
// turn with no call out arms the stream's watch, which then gives the
// idle stream a reader (a watch that ran while the turn was still held
// started none).
func TestStream_ALastReaderLeavingArmsTheWatch(t *testing.T) {
	t.Parallel()
	carrier := &silentCarrier{closed: make(chan struct{})}
	st := newStream(carrier, func() {}, 8)
	t.Cleanup(func() {
		st.fail(errors.New("test over"))
		close(carrier.closed)
	})
	st.mu.Lock()
	st.reading = true // a caller read, and the watch ran meanwhile: disarmed
	st.mu.Unlock()
	st.passTurn()
	st.mu.Lock()
	watching := st.watching
	st.mu.Unlock()
	if !watching {
		t.Fatal("the last reader left, and no watch is armed: the idle stream would get no reader")
	}
	testproc.Eventually(t, "the idle stream has a reader", func() bool { return readingNow(st) })
}

// TestStream_AStreamClosedWhileIdleIsNotUsed: a call after the node
// closed the stream while nobody read it (here: the node restarted, and
// the test held off the idle stream's reader) goes on a new stream, and
// does not mark the node silent.
func TestStream_AStreamClosedWhileIdleIsNotUsed(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	c := quietTestClient(t, srv.Addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pair := func() { acquireRelease(t, ctx, c, "restart") }
	pair()
	st := streamOf(t, c)
	st.mu.Lock()
	st.timer.Stop()
	st.watching = true // no idle reader from here on
	st.mu.Unlock()
	pair() // an idle reader that started before is gone after a lone call
	testproc.Eventually(t, "nobody reads the idle stream", func() bool { return !readingNow(st) })
	srv.Kill9()
	srv.Start()
	pair()
	if streamOf(t, c) == st {
		t.Fatal("the call went on the stream the node had closed")
	}
	if ep := (*c.eps.Load())[0]; ep.silent() {
		t.Fatal("a stream closed while idle marked its node silent")
	}
}
