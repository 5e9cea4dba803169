package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// maxMessageBytes keeps one SessionRequest well under a node's limit on
// a message (wire.MaxRequestBytes): the calls are added until it is
// passed, and the last call may be as large as a message can be.
const maxMessageBytes = wire.MaxRequestBytes / 2

// sessionNode is node over one Session stream per node (see Session in
// the API): acquire, renew, release and cancelWait travel on it, those
// ready together in one message; describe and list are unary calls. A
// broken stream fails the calls on it, and the next call opens another.
// When the HTTP client cannot reach the node with HTTP/2 (errNoStreams),
// the calls of that stream and every later call are unary calls instead.
type sessionNode struct {
	*connectNode
	closeIdle func()      // closes the client's idle connections
	noStreams atomic.Bool // the node is reached without HTTP/2: unary calls only
	mu        sync.Mutex
	cur       *stream   // nil: none open
	ws        *wsDialer // if set, streams are WebSockets
}

func newSessionNode(n *connectNode, closeIdle func(), ws *wsDialer) *sessionNode {
	return &sessionNode{connectNode: n, closeIdle: closeIdle, ws: ws}
}

// errLeft ends a stream the client left: its node answered not_leader and
// no other call was out on it.
var errLeft = errors.New("left a node that is not the leader")

// errHeldBack is how a call ends whose context ended before the client
// sent it (it waited for room among the calls out): the node is not to
// blame, and is not marked silent for it.
var errHeldBack = errors.New("the call waited in the client for room on its stream")

var _ node = (*sessionNode)(nil)

// stream is one open Session stream.
//
// While calls are out, one goroutine reads the stream, and hands each
// result to its call: the read turn. A call that finds nobody reading
// takes the turn itself when its carrier lets a call wait for a message
// until the call's context ends (selfRead, a WebSocket). It reads until
// its own result comes, and leaves the turn to a goroutine of the stream
// if other calls are out. A call that finds the stream idle also sends
// itself. At one call at a time, then, a call is carried by its own
// goroutine alone: no goroutine wakes another. Otherwise the stream's
// writer sends, and a reader goroutine reads until no call is out. An
// idle stream gets a reader within pingAfter (watch), which answers the
// node's WebSocket pings and notices a stream the node closed.
type stream struct {
	bidi     carrier
	selfRead selfReader // nil: only the stream's goroutines read
	cancel   context.CancelFunc
	wake     chan struct{} // buffered: calls or cancels are pending
	dead     chan struct{} // closed when the stream broke; err says why
	smu      sync.Mutex    // held while sending

	mu       sync.Mutex
	next     uint64
	calls    map[uint64]chan *fencelockv1.Result
	pending  []*fencelockv1.Call // not sent yet
	out      int                 // sent and not answered yet
	maxOut   int                 // the most sent and not answered: what a node runs for a stream
	cancels  []uint64
	err      error
	timer    *time.Timer // runs watch while calls are out
	watching bool        // timer is armed
	heard    time.Time   // the node's last message, or when calls went out
	pingAt   time.Time   // when the ping now unanswered went out; zero: none
	wantPing bool        // the writer is to send a ping
	reading  bool        // a goroutine has the read turn
}

// selfReader is a carrier whose calls' goroutines may read: once Dialed,
// Wait waits for a whole message, or until ctx ends and leaves the
// carrier as it was. Closed tells, without waiting, that the node closed
// it.
type selfReader interface {
	Dialed() bool
	Wait(ctx context.Context) error
	Closed() bool
}

// open returns the node's stream, opening one if none is.
func (n *sessionNode) open() *stream {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur != nil && !n.cur.ended() && !n.cur.closedIdle() {
		return n.cur
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bidi carrier
	if n.ws != nil {
		bidi = &wsCarrier{ctx: ctx, dial: n.ws}
	} else {
		bidi = n.rpc.Session(ctx)
	}
	n.cur = newStream(bidi, cancel, wire.MaxSessionCalls)
	return n.cur
}

// newStream starts a stream on bidi with at most maxOut calls out.
func newStream(bidi carrier, cancel context.CancelFunc, maxOut int) *stream {
	st := &stream{bidi: bidi, cancel: cancel, wake: make(chan struct{}, 1), dead: make(chan struct{}),
		calls: make(map[uint64]chan *fencelockv1.Result), maxOut: maxOut}
	st.selfRead, _ = bidi.(selfReader)
	st.timer = time.AfterFunc(time.Hour, st.watch)
	st.timer.Stop()
	go st.write()
	return st
}

// errClosedIdle ends a stream the node closed while nobody read it.
var errClosedIdle = errors.New("the node closed the stream while it was idle")

// closedIdle reports whether the node closed the stream while nobody
// read it (between a call and the idle stream's reader), and ends it if
// so: a call is not sent into a closed socket, to fail as unanswered.
func (st *stream) closedIdle() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.selfRead == nil || st.reading || len(st.calls) > 0 || !st.selfRead.Closed() {
		return false
	}
	st.failLocked(errClosedIdle)
	return true
}

// ended reports whether the stream has broken.
func (st *stream) ended() bool {
	select {
	case <-st.dead:
		return true
	default:
		return false
	}
}

// closeIdleSoon closes the client's idle connections, among them the one
// of a stream the client left: now, and twice more over the next second,
// as the HTTP/2 transport forgets an ended stream a moment after it ends
// (a connection still missed closes when idle for idleConn).
func (n *sessionNode) closeIdleSoon() {
	n.closeIdle()
	time.AfterFunc(100*time.Millisecond, n.closeIdle)
	time.AfterFunc(time.Second, n.closeIdle)
}

// leave closes st, the node's stream, if no call is out on it: a client
// that moved to the leader keeps no stream, nor connection, to a node that
// is not (10,000 clients would otherwise hold twice the connections).
func (n *sessionNode) leave(st *stream) {
	n.mu.Lock()
	left := n.cur == st && st.failIfIdle(errLeft)
	if left {
		n.cur = nil
	}
	n.mu.Unlock()
	if left {
		n.closeIdleSoon()
	}
}

// close ends the node's stream; calls on it fail.
func (n *sessionNode) close() {
	n.mu.Lock()
	st := n.cur
	n.cur = nil
	n.mu.Unlock()
	if st != nil {
		st.fail(errors.New("client closed"))
	}
}

// do makes one call on the stream and waits for its result. When ctx ends
// first, the call is cancelled on the node. A stream the node refused for
// want of HTTP/2 turns this call and the later ones into unary calls.
func (n *sessionNode) do(ctx context.Context, c *fencelockv1.Call) (*fencelockv1.Result, error) {
	if n.noStreams.Load() {
		return n.unary(ctx, c)
	}
	st := n.open()
	ch, id, reads := st.add(c) // ch is nil if st ended before: never ready
	r, ended := st.await(ctx, ch, reads)
	switch {
	case r != nil:
		return n.result(st, r)
	case !ended: // ctx ended
		if !st.drop(id) {
			return nil, fmt.Errorf("%w: %w", errHeldBack, ctx.Err())
		}
		return nil, ctx.Err()
	case errors.Is(st.err, errNoStreams):
		n.noStreams.Store(true)
		return n.unary(ctx, c)
	case errors.Is(st.err, errLeft) && ch == nil: // left before this call was added: a new stream
		return n.do(ctx, c)
	}
	return nil, wire.NoAnswer(st.err)
}

// await returns the result ch is to get, read by this goroutine if it
// has the read turn (reads). It returns nil when the stream ended first
// (ended) or ctx did. A result that came before the stream ended is
// returned: its call is not to be sent again.
func (st *stream) await(ctx context.Context, ch chan *fencelockv1.Result, reads bool) (r *fencelockv1.Result, ended bool) {
	if reads {
		r, ended = st.readFor(ctx, ch)
		st.passTurn()
		return r, ended
	}
	select {
	case r := <-ch:
		return r, false
	case <-st.dead:
		select {
		case r := <-ch:
			return r, false
		default:
			return nil, true
		}
	case <-ctx.Done():
		return nil, false
	}
}

// readFor reads messages, with the read turn, until ch has its result,
// the stream ends or ctx ends.
func (st *stream) readFor(ctx context.Context, ch chan *fencelockv1.Result) (*fencelockv1.Result, bool) {
	for {
		select {
		case r := <-ch:
			return r, false
		default:
		}
		if st.selfRead.Wait(ctx) != nil {
			return nil, false
		}
		if _, err := st.readOne(); err != nil {
			select {
			case r := <-ch:
				return r, false
			default:
				return nil, true
			}
		}
	}
}

// passTurn gives up the read turn: to a reader goroutine if calls are out.
func (st *stream) passTurn() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.calls) > 0 && st.err == nil {
		go st.read()
		return
	}
	st.leaveTurnLocked()
}

// result is the outcome of answer r on st; a not_leader answer leaves st.
func (n *sessionNode) result(st *stream, r *fencelockv1.Result) (*fencelockv1.Result, error) {
	if e := r.GetError(); e != nil {
		err := wire.FromStatus(e)
		if errors.Is(err, fencelock.ErrNotLeader) {
			n.leave(st)
		}
		return nil, err
	}
	return r, nil
}

// add queues call c and returns the channel of its result, or nil if the
// stream has ended (c is not queued: it may go on another stream), and
// whether the caller has the read turn. A call that finds the stream idle
// is sent at once, by the caller.
func (st *stream) add(c *fencelockv1.Call) (ch chan *fencelockv1.Result, id uint64, reads bool) {
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return nil, 0, false
	}
	ch = make(chan *fencelockv1.Result, 1)
	st.next++
	c.Id = st.next
	if len(st.calls) == 0 {
		st.heard, st.pingAt = time.Now(), time.Time{}
	}
	st.calls[c.Id] = ch
	if !st.watching {
		st.watching = true
		st.timer.Reset(pingAfter)
	}
	st.pending = append(st.pending, c)
	self := st.selfRead != nil && st.selfRead.Dialed()
	alone := self && !st.reading && st.out == 0 && len(st.pending) == 1
	spawn := false
	if !st.reading {
		st.reading, reads, spawn = true, self, !self
	}
	st.mu.Unlock()
	if spawn {
		go st.read()
	}
	if alone && st.smu.TryLock() {
		st.send()
		st.smu.Unlock()
	} else {
		st.signal()
	}
	return ch, c.Id, reads
}

// drop forgets call id and cancels it on the node, and reports whether it
// had been sent. A call not sent yet is not sent at all: the node reads a
// message's cancels before its calls, so a cancel sent with its call would
// be lost.
func (st *stream) drop(id uint64) (sent bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.calls[id]; !ok {
		return true // answered meanwhile
	}
	delete(st.calls, id)
	if i := slices.IndexFunc(st.pending, func(c *fencelockv1.Call) bool { return c.Id == id }); i >= 0 {
		st.pending = slices.Delete(st.pending, i, i+1)
		return false
	}
	st.cancels = append(st.cancels, id)
	st.signal()
	return true
}

func (st *stream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// write sends what is pending, as few messages as fit, whenever there is
// some, until the stream breaks.
func (st *stream) write() {
	defer st.bidi.CloseRequest()
	for {
		select {
		case <-st.dead:
			return
		case <-st.wake:
		}
		runtime.Gosched() // calls made together go out together: one write
		st.smu.Lock()
		ok := st.send()
		st.smu.Unlock()
		if !ok {
			return
		}
	}
}

// send sends what is pending, as few messages as fit; false if the
// stream broke. The caller holds smu.
func (st *stream) send() bool {
	calls, cancels, ping := st.take()
	for len(calls) > 0 || len(cancels) > 0 || ping {
		m := &fencelockv1.SessionRequest{Cancel: cancels, Ping: ping}
		cancels, ping = nil, false
		for size := 0; len(calls) > 0 && (size < maxMessageBytes || len(m.Calls) == 0); calls = calls[1:] {
			size += calls[0].SizeVT()
			m.Calls = append(m.Calls, calls[0])
		}
		if err := st.bidi.Send(m); err != nil {
			if !errors.Is(err, io.EOF) {
				st.fail(err)
			} // else the stream ended: the reader learns why
			return false
		}
	}
	return true
}

// take returns what is to be sent: the pending calls, as many as may be
// out (the rest wait for answers), the cancels, and whether to ping.
func (st *stream) take() (calls []*fencelockv1.Call, cancels []uint64, ping bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := max(min(len(st.pending), st.maxOut-st.out), 0)
	if n == len(st.pending) {
		calls, st.pending = st.pending, nil
	} else {
		calls = slices.Clone(st.pending[:n])
		st.pending = slices.Delete(st.pending, 0, n)
	}
	st.out += n
	cancels, ping = st.cancels, st.wantPing
	st.cancels, st.wantPing = nil, false
	return calls, cancels, ping
}

// read is the stream's reader goroutine, which has the read turn: it
// reads until the stream breaks, or, if calls may read for themselves,
// until it has answered a lone call (none other out). Calls made together
// keep it, and the writer: they go out together, and a call that found
// the stream idle would go out alone.
func (st *stream) read() {
	for {
		answered, err := st.readOne()
		if err != nil || answered == 1 && st.selfRead != nil && st.leaveIfIdle() {
			return
		}
	}
}

// leaveIfIdle gives up the read turn if no call is out, and reports
// whether it did.
func (st *stream) leaveIfIdle() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.calls) > 0 {
		return false
	}
	st.leaveTurnLocked()
	return true
}

// leaveTurnLocked gives up the read turn of a stream with no call out,
// and arms the watch, which gives the stream a reader if it stays idle
// (a watch that ran while the turn was still held started none).
func (st *stream) leaveTurnLocked() {
	st.reading = false
	if !st.watching && st.err == nil {
		st.watching = true
		st.timer.Reset(pingAfter)
	}
}

// readOne reads one message and hands each result to its call. It
// returns how many calls it answered, or the error that broke the stream.
func (st *stream) readOne() (answered int, err error) {
	m, err := st.bidi.Receive()
	if err != nil {
		st.fail(err)
		return 0, err
	}
	st.mu.Lock()
	st.heard, st.pingAt = time.Now(), time.Time{}
	st.out = max(st.out-len(m.Results), 0) // every call sent is answered once
	for _, r := range m.Results {
		if ch := st.calls[r.Id]; ch != nil {
			delete(st.calls, r.Id)
			ch <- r
			answered++
		}
	}
	held := len(st.pending) > 0 // calls waited for these answers
	st.mu.Unlock()
	if held {
		st.signal()
	}
	return answered, nil
}

// watch runs on the stream's timer while calls are out. When the node has
// sent nothing for pingAfter it pings it, and when a ping goes unanswered
// for pingTimeout it breaks the stream, failing the calls on it: a frozen
// node (SIGSTOP, a stalled VM) still has its connections accepted by the
// kernel, and this is how the client finds it out, however long the calls
// meant to wait. A stream without calls out sends nothing.
func (st *stream) watch() {
	ping, silent := st.due(time.Now())
	switch {
	case silent:
		st.fail(fmt.Errorf("the node answered no ping within %v", pingTimeout))
	case ping:
		st.signal()
	}
}

// due decides what watch does at now, and re-arms the timer.
func (st *stream) due(now time.Time) (ping, silent bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.err != nil || len(st.calls) == 0:
		st.watching, st.pingAt = false, time.Time{}
		if st.err == nil && !st.reading {
			st.reading = true // an idle stream's reader
			go st.read()
		}
		return false, false
	case !st.pingAt.IsZero():
		left := pingTimeout - now.Sub(st.pingAt)
		if left <= 0 {
			return false, true
		}
		st.timer.Reset(left)
		return false, false
	case now.Sub(st.heard) < pingAfter:
		st.timer.Reset(pingAfter - now.Sub(st.heard))
		return false, false
	}
	st.pingAt, st.wantPing = now, true
	st.timer.Reset(pingTimeout)
	return true, false
}

// failIfIdle ends the stream with err if no call is out on it, and
// reports whether it did.
func (st *stream) failIfIdle(err error) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil || len(st.calls) > 0 || len(st.pending) > 0 {
		return false
	}
	st.failLocked(err)
	return true
}

// fail ends the stream with err (the first cause wins).
func (st *stream) fail(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.failLocked(err)
}

func (st *stream) failLocked(err error) {
	if st.err != nil {
		return
	}
	st.err = err
	close(st.dead)
	st.cancel()
	// Closing the response resets the stream: a context that ends does not,
	// and the node would keep the stream's calls waiting.
	go st.bidi.CloseResponse()
}

func (n *sessionNode) acquire(ctx context.Context, req *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
	r, err := n.do(ctx, &fencelockv1.Call{Op: &fencelockv1.Call_Acquire{Acquire: req}})
	if err != nil {
		return nil, err
	}
	return r.GetAcquire().GetGrant(), nil
}

func (n *sessionNode) renew(ctx context.Context, req *fencelockv1.RenewRequest) (*fencelockv1.RenewResponse, error) {
	r, err := n.do(ctx, &fencelockv1.Call{Op: &fencelockv1.Call_Renew{Renew: req}})
	if err != nil {
		return nil, err
	}
	return r.GetRenew(), nil
}

func (n *sessionNode) release(ctx context.Context, req *fencelockv1.ReleaseRequest) error {
	_, err := n.do(ctx, &fencelockv1.Call{Op: &fencelockv1.Call_Release{Release: req}})
	return err
}

func (n *sessionNode) cancelWait(ctx context.Context, name, rid string) error {
	_, err := n.do(ctx, &fencelockv1.Call{Op: &fencelockv1.Call_CancelWait{CancelWait: &fencelockv1.CancelWaitRequest{Name: name, RequestId: rid}}})
	return err
}
