package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/server"
)

// maxSessionCalls bounds the calls one Session stream runs (or has answers
// waiting to be sent for) at once; calls past it are refused, and a stream
// with twice as many (a client that does not read its answers) is ended.
const maxSessionCalls = wire.MaxSessionCalls

// errTooManyCalls ends a stream whose client does not read its answers.
var errTooManyCalls = fmt.Errorf("more than %d calls and refusals on one stream: %w", 2*maxSessionCalls, fencelock.ErrTooLarge)

// maxProposing bounds the calls of one stream that are neither answered nor
// waiting in a lock's queue: calls whose entries are on their way through
// Raft. The others wait for a slot, so a burst of one client's calls puts
// no more than these ahead of another client's call in Raft's queue and
// on the node's threads. Renewals, cancels and pings take no slot and are
// not held up: the stream is read on while calls wait (up to
// maxSessionCalls).
const maxProposing = 256

// maxResults bounds the results one SessionResponse carries.
const maxResults = 256

// Session runs the calls of one stream, each in a goroutine of its own as
// the unary method would; the renewals of one message run together, on
// one. A call ends when its caller cancels it (a renewal is answered
// after its leader check) or the stream breaks. Results that are ready
// together go out in one message. A stream the client closes cleanly
// (io.EOF) still gets the answers of its calls under way.
func (a *lockAPI) Session(ctx context.Context, st *connect.BidiStream[fencelockv1.SessionRequest, fencelockv1.SessionResponse]) error {
	return serveSession(ctx, a.s, a.workers, newH2Stream(ctx, st, defaultWSPing.after+defaultWSPing.timeout))
}

// responseControllerKey carries a Session request's http.ResponseController
// in its context (boundBodies puts it there).
type responseControllerKey struct{}

// h2Stream is a Session stream on HTTP/2 (Connect).
type h2Stream struct {
	*connect.BidiStream[fencelockv1.SessionRequest, fencelockv1.SessionResponse]
	rc     *http.ResponseController // nil: no write deadline (served other than by Handler)
	window time.Duration            // how long a Send may take
	stuck  *time.Timer              // armed while a Send runs: resets the stream

	mu      sync.Mutex
	sending bool // a Send runs: the stream's response may be used
}

// newH2Stream is st, whose Sends may take up to window; ctx is the
// handler's (its request's, through boundBodies).
func newH2Stream(ctx context.Context, st *connect.BidiStream[fencelockv1.SessionRequest, fencelockv1.SessionResponse], window time.Duration) *h2Stream {
	rc, _ := ctx.Value(responseControllerKey{}).(*http.ResponseController)
	return &h2Stream{BidiStream: st, rc: rc, window: window}
}

// Send writes m, resetting the stream if the client has not taken it
// within the window (Session's: the time a silent WebSocket client is
// given): a client that stops reading fills HTTP/2's window, and a send
// would wait for it forever. (An HTTP/2 write deadline also fires on an
// idle stream, so the stream's is set, to the past, only once a send is
// stuck.)
func (s *h2Stream) Send(m *fencelockv1.SessionResponse) error {
	if s.rc == nil {
		return s.BidiStream.Send(m)
	}
	if s.stuck == nil {
		s.stuck = time.AfterFunc(time.Hour, s.reset)
	}
	s.mu.Lock()
	s.sending = true
	s.mu.Unlock()
	s.stuck.Reset(s.window)
	err := s.BidiStream.Send(m)
	s.stuck.Stop()
	s.mu.Lock()
	s.sending = false // after this the handler may return: reset must not touch rc
	s.mu.Unlock()
	return err
}

// reset resets the stream if a Send still runs.
func (s *h2Stream) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sending {
		_ = s.rc.SetWriteDeadline(time.Now().Add(-time.Second))
	}
}

// sessionStream is one Session stream: a Connect stream, or a WebSocket.
type sessionStream interface {
	Receive() (*fencelockv1.SessionRequest, error)
	Send(*fencelockv1.SessionResponse) error
}

// errTextMessage ends a WebSocket stream that sent text.
var errTextMessage = errors.New("a Session WebSocket carries binary messages only")

// serveSession runs stream st's calls on n, each on one of w
// (lockAPI.Session).
func serveSession(ctx context.Context, n node, w *workers, st sessionStream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the node closes: the stream ends
		select {
		case <-n.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	ss := &session{n: n, calls: make(map[uint64]*running), proposing: make(chan struct{}, maxProposing),
		stream: ctx, base: context.WithoutCancel(ctx), workers: w}
	ss.goneFunc = ss.gone
	ss.box = &outbox{st: st,
		sent:  func(n int) { ss.active.Add(-int64(n)) },
		alone: func() bool { return ss.active.Load() <= 1 },
		broke: cancel}
	ss.box.idle.L = &ss.box.mu
	read := make(chan error, 1)
	go func() { read <- ss.read(ctx, st) }()
	select {
	case err := <-read:
		if !errors.Is(err, io.EOF) {
			cancel() // the stream broke: its calls end as if their clients went away
		}
	case <-ctx.Done():
	}
	ss.mu.Lock()
	ss.closed = true // no call starts any more
	ss.mu.Unlock()
	ss.end(ctx)
	ss.box.close()
	return nil
}

// end waits for the stream's calls to finish. Once ctx ends it ends them,
// maxProposing at a time: a stream with thousands of waits that breaks
// does not wake them all at once ahead of other clients' calls.
func (ss *session) end(ctx context.Context) {
	all := make(chan struct{})
	go func() {
		ss.wg.Wait()
		close(all)
	}()
	select {
	case <-all:
		return
	case <-ctx.Done():
	}
	for {
		wave := make([]*running, 0, maxProposing)
		ss.mu.Lock()
		for _, r := range ss.calls {
			if len(wave) == maxProposing {
				break
			}
			wave = append(wave, r)
		}
		ss.mu.Unlock()
		if len(wave) == 0 {
			break
		}
		for _, r := range wave {
			r.cancel(nil) // the stream broke: a grace for a retry
		}
		for _, r := range wave {
			<-r.done
		}
	}
	<-all
}

// node is what a Session stream runs its calls on: *server.Server.
type node interface {
	Acquire(ctx context.Context, req server.AcquireRequest) (fencelock.Grant, error)
	Renew(ctx context.Context, rs []server.Renewal)
	Release(ctx context.Context, name fencelock.LockName, id fencelock.LeaseID, token fencelock.Token) error
	CancelWait(ctx context.Context, name fencelock.LockName, rid string) error
	Refused(method string, err error)
	Done() <-chan struct{}
}

// session is one Session stream's calls.
type session struct {
	n   node
	box *outbox        // answers and pongs to send
	wg  sync.WaitGroup // calls running, until their answer is sent
	// proposing holds a slot for each call neither answered nor queued
	// (maxProposing).
	proposing chan struct{}
	stream    context.Context // ends when the stream breaks: its callers are gone
	base      context.Context // of the calls: it ends only when end ends them
	workers   *workers        // the goroutines the calls run on
	goneFunc  func() bool     // gone, made once: each call's Acquire is given it

	mu     sync.Mutex
	calls  map[uint64]*running // by id
	active atomic.Int64        // calls running or with an answer not yet sent; grows under mu
	closed bool                // the stream is ending
}

// gone reports that the stream broke: a call granted before end ended it
// hands the grant back.
func (ss *session) gone() bool { return ss.stream.Err() != nil }

// read starts the stream's calls and cancels those whose callers gave up,
// until the stream ends.
func (ss *session) read(ctx context.Context, st sessionStream) error {
	for {
		m, err := st.Receive()
		if err != nil {
			return err
		}
		if m.Ping {
			ss.box.put(true)
		}
		ss.mu.Lock()
		for _, id := range m.Cancel {
			if r := ss.calls[id]; r != nil {
				r.cancel(server.ErrWithdrawn) // taken back at once
			}
		}
		ss.mu.Unlock()
		var renewals []*fencelockv1.Call
		for _, c := range m.Calls {
			if c.GetRenew() != nil {
				renewals = append(renewals, c)
			}
		}
		if err := ss.renew(renewals); err != nil { // first: they keep leases alive
			return err
		}
		for _, c := range m.Calls {
			if c.GetRenew() != nil {
				continue
			}
			if err := ss.start(c); err != nil {
				return err
			}
		}
	}
}

// renew runs the renewals of one message together, on one goroutine: one
// check that the node leads serves them all. They take no slot, and as
// they are answered after that check, a cancel does not cut them short;
// their ids are not checked against running calls. Those past
// maxSessionCalls are refused. errTooManyCalls: the stream must end.
func (ss *session) renew(cs []*fencelockv1.Call) error {
	if len(cs) == 0 {
		return nil
	}
	n := int64(len(cs))
	ss.mu.Lock()
	active, err := ss.admit(n)
	if err != nil {
		ss.mu.Unlock()
		return err
	}
	over := min(max(active-maxSessionCalls, 0), n) // the last over are refused
	ss.wg.Add(1)
	ss.mu.Unlock()
	ss.workers.run(taskFunc(func() {
		defer ss.wg.Done()
		ss.box.put(false, ss.renewed(cs[:n-over], cs[n-over:])...)
	}))
	return nil
}

// renewed renews cs on the node and returns their answers, with refusals
// for refused.
func (ss *session) renewed(cs, refused []*fencelockv1.Call) []*fencelockv1.Result {
	answers := make([]*fencelockv1.Result, 0, len(cs)+len(refused))
	for _, c := range refused {
		answers = append(answers, failed(ss.n, c.Id, "Session", fmt.Errorf("more than %d calls on one stream: %w", maxSessionCalls, fencelock.ErrTooLarge)))
	}
	rs := make([]server.Renewal, len(cs))
	for i, c := range cs {
		rs[i] = renewal(c.GetRenew())
	}
	ss.n.Renew(ss.stream, rs)
	for i, c := range cs {
		if resp, err := renewAnswer(rs[i]); err != nil {
			answers = append(answers, failed(ss.n, c.Id, "Renew", err))
		} else {
			answers = append(answers, &fencelockv1.Result{Id: c.Id, Result: &fencelockv1.Result_Renew{Renew: resp}})
		}
	}
	return answers
}

// admit counts n more calls on the stream, under ss.mu, and returns how
// many it has now. context.Canceled: the stream is ending;
// errTooManyCalls: it must end (its client does not read its answers).
func (ss *session) admit(n int64) (int64, error) {
	if ss.closed {
		return 0, context.Canceled
	}
	if ss.active.Load()+n > 2*maxSessionCalls {
		return 0, errTooManyCalls
	}
	return ss.active.Add(n), nil
}

// start runs call c, or refuses it at once if its id runs already or the
// stream has too many calls. errTooManyCalls: the stream must end.
func (ss *session) start(c *fencelockv1.Call) error {
	ss.mu.Lock()
	active, err := ss.admit(1)
	if err != nil {
		ss.mu.Unlock()
		return err
	}
	var refusal error
	if _, dup := ss.calls[c.Id]; dup {
		refusal = fmt.Errorf("call id %d is running on this stream: %w", c.Id, fencelock.ErrInvalidArgument)
	} else if active > maxSessionCalls {
		refusal = fmt.Errorf("more than %d calls on one stream: %w", maxSessionCalls, fencelock.ErrTooLarge)
	}
	if refusal != nil {
		ss.mu.Unlock()
		ss.box.put(false, failed(ss.n, c.Id, "Session", refusal))
		return nil
	}
	cctx, cancel := context.WithCancelCause(ss.base)
	rn := &running{ss: ss, c: c, ctx: cctx, cancel: cancel, done: make(chan struct{})}
	ss.calls[c.Id] = rn
	ss.wg.Add(1)
	ss.mu.Unlock()
	ss.workers.run(rn)
	return nil
}

// running is one call under way.
type running struct {
	ss     *session
	c      *fencelockv1.Call
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the call has ended
	slot   atomic.Bool   // it holds a slot of ss.proposing
}

// run waits for a slot, runs c (a call through Raft: not a renewal), and
// queues its answer.
func (rn *running) run() {
	ss := rn.ss
	defer ss.wg.Done()
	var r *fencelockv1.Result
	select {
	case ss.proposing <- struct{}{}:
		rn.slot.Store(true)
	case <-rn.ctx.Done():
	case <-ss.stream.Done():
	}
	if !rn.slot.Load() || ss.gone() { // a call of a stream that broke is not proposed
		r = failed(ss.n, rn.c.Id, "Session", fmt.Errorf("call %d: %w: %w", rn.c.Id, fencelock.ErrUnavailable, cmp.Or(context.Cause(rn.ctx), context.Cause(ss.stream))))
	}
	if r == nil {
		r = run(rn.ctx, ss.n, rn.c, rn.free, ss.goneFunc)
	}
	rn.free()
	rn.cancel(nil)
	ss.mu.Lock()
	delete(ss.calls, rn.c.Id)
	ss.mu.Unlock()
	close(rn.done)
	ss.box.put(false, r)
}

// free gives back the call's slot, once: when it is answered, or queued
// in a lock's line.
func (rn *running) free() {
	if rn.slot.CompareAndSwap(true, false) {
		<-rn.ss.proposing
	}
}

// maxIdleWorkers bounds the goroutines a node keeps waiting for calls.
const maxIdleWorkers = 256

// workers runs the calls of a node's sessions on goroutines kept between
// calls: a call goes deep (Raft's Apply, a signature), and a new goroutine
// grows its stack by copying it several times on the way, which cost 9 %
// of a busy node's CPU; a goroutine kept grows it once. At most
// maxIdleWorkers wait, whatever the number of sessions; they end when the
// node closes.
type workers struct {
	work chan task       // unbuffered: a send succeeds only to an idle worker
	done <-chan struct{} // the node closed
	idle atomic.Int32
}

// task is what a worker runs: a *running (a call), or a taskFunc.
type task interface{ run() }

type taskFunc func()

func (f taskFunc) run() { f() }

func newWorkers(done <-chan struct{}) *workers {
	return &workers{work: make(chan task), done: done}
}

// run runs t on an idle worker, or on a new one if none is idle.
func (w *workers) run(t task) {
	select {
	case w.work <- t:
	default:
		go w.loop(t)
	}
}

// loop runs t, then waits for more unless maxIdleWorkers wait already,
// until the node closes.
func (w *workers) loop(t task) {
	for {
		t.run()
		t = nil // an idle worker keeps nothing of its last call
		if w.idle.Add(1) > maxIdleWorkers {
			w.idle.Add(-1)
			return
		}
		select {
		case t = <-w.work:
			w.idle.Add(-1)
		case <-w.done:
			w.idle.Add(-1)
			return
		}
	}
}

// outbox sends a stream's answers on the goroutines that make them, with
// no writer of its own to hand them to: the one that finds nobody sending
// sends what is queued, its own among it, until nothing is; answers
// queued meanwhile go out together, up to maxResults a message. After a
// failed send, or once closed, it sends nothing.
type outbox struct {
	st interface {
		Send(*fencelockv1.SessionResponse) error
	}
	sent func(n int) // as each message goes to be sent, with its number of answers
	// broke ends the session when a send fails: the client is gone or
	// reads nothing, and no call of its may be granted any more.
	broke func()
	// alone reports that no other call of the stream is running or waits
	// to be answered: nobody could join a message, so none is waited for.
	alone func() bool

	mu      sync.Mutex
	idle    sync.Cond // L is &mu; signalled when sending ends
	results []*fencelockv1.Result
	pong    bool // a pong is due
	sending bool
	broken  bool
}

// put queues answers rs and a pong (if pong), and sends the
// queue unless another goroutine is sending it.
func (o *outbox) put(pong bool, rs ...*fencelockv1.Result) {
	o.mu.Lock()
	o.results = append(o.results, rs...)
	o.pong = o.pong || pong
	if o.sending {
		o.mu.Unlock()
		return
	}
	o.sending = true
	o.mu.Unlock()
	if !o.alone() {
		runtime.Gosched() // the calls that can finish now queue theirs: one message
	}
	o.mu.Lock()
	for len(o.results) > 0 || o.pong {
		n := min(len(o.results), maxResults)
		resp := &fencelockv1.SessionResponse{Results: o.results[:n:n], Pong: o.pong}
		o.results, o.pong = o.results[n:], false
		if len(o.results) == 0 {
			o.results = nil
		}
		broken := o.broken
		o.mu.Unlock()
		// Counted out before the send: the client may read these answers
		// and send more calls before Send returns.
		o.sent(n)
		if !broken && o.st.Send(resp) != nil {
			o.mu.Lock()
			o.broken = true
			o.mu.Unlock()
			o.broke()
		}
		o.mu.Lock()
	}
	o.sending = false
	o.idle.Broadcast()
	o.mu.Unlock()
}

// close makes the outbox send nothing more and waits for a send under way.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.broken = true
	for o.sending {
		o.idle.Wait()
	}
}

// run runs one call as its unary method would; queued is called if an
// Acquire's request waits in the queue, and gone reports that its caller
// is gone.
func run(ctx context.Context, s node, c *fencelockv1.Call, queued func(), gone func() bool) *fencelockv1.Result {
	r := &fencelockv1.Result{Id: c.Id}
	switch op := c.Op.(type) {
	case *fencelockv1.Call_Acquire:
		req := acquireRequest(op.Acquire)
		req.Queued, req.Gone = queued, gone
		g, err := s.Acquire(ctx, req)
		if err != nil {
			return failed(s, c.Id, "Acquire", err)
		}
		r.Result = &fencelockv1.Result_Acquire{Acquire: acquireResponse(g)}
	case *fencelockv1.Call_Release:
		m := op.Release
		if err := s.Release(ctx, fencelock.LockName(m.Name), fencelock.LeaseID(m.LeaseId), fencelock.Token(m.Token)); err != nil {
			return failed(s, c.Id, "Release", err)
		}
		r.Result = &fencelockv1.Result_Release{Release: &fencelockv1.ReleaseResponse{}}
	case *fencelockv1.Call_CancelWait:
		if err := s.CancelWait(ctx, fencelock.LockName(op.CancelWait.Name), op.CancelWait.RequestId); err != nil {
			return failed(s, c.Id, "CancelWait", err)
		}
		r.Result = &fencelockv1.Result_CancelWait{CancelWait: &fencelockv1.CancelWaitResponse{}}
	default:
		return failed(s, c.Id, "Session", fmt.Errorf("call %d has no operation: %w", c.Id, fencelock.ErrInvalidArgument))
	}
	return r
}

// failed is the result of call id that failed with err, counted as a
// refusal of method.
func failed(s node, id uint64, method string, err error) *fencelockv1.Result {
	s.Refused(method, err)
	return &fencelockv1.Result{Id: id, Result: &fencelockv1.Result_Error{Error: wire.ToStatus(err)}}
}
