package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// The pipe: batches travel as frames on one upgraded HTTP/1.1 connection
// per node, many out at once, instead of one HTTP request each (see
// PipeRequest in the API). A node that refuses the upgrade (an older
// version, or a proxy in between) gets Connect Batch requests instead, and
// the pipe is tried again after retryBatchAfter.

// errNoPipe: the node does not speak the pipe; use Connect.
var errNoPipe = errors.New("pipe not supported by this node")

// errClientClosed: a call made after Client.Close.
var errClientClosed = errors.New("client closed")

const (
	pipeDialTimeout = 3 * time.Second
	// maxPipeStall: a request out this long (or an attempt's whole time, if
	// shorter), with no answer to anything since it went out, means the
	// connection is dead.
	maxPipeStall = time.Second
	// maxPipeAnswer bounds one answer frame (a batch of the node's largest
	// size with long error messages stays far below it).
	maxPipeAnswer = 16 << 20
)

// pipe is the client's end of one node's pipe.
type pipe struct {
	url    string // the node's base URL, http://host:port
	rt     http.RoundTripper
	noPipe offSwitch // the node refused the upgrade
	// lateWait bounds how long an answer is awaited for a caller that left;
	// stall is when a connection with no answer counts as dead.
	lateWait, stall time.Duration

	mu      sync.Mutex // guards conn, closed and dialing
	conn    *pipeConn
	closed  bool
	dialing chan struct{} // closed when the dial under way ends; nil if none
}

// roundTrip sends a Batch request on the pipe and returns its answer.
// errNoPipe means: send it with Connect. See pipeConn.exchange for late.
func (p *pipe) roundTrip(ctx context.Context, req *fencelockv1.BatchRequest, late func(*fencelockv1.BatchResponse, error)) (*fencelockv1.BatchResponse, error) {
	var lateAll func(*fencelockv1.PipeResponse, error)
	if late != nil {
		lateAll = func(resp *fencelockv1.PipeResponse, err error) { late(resp.GetBatch(), err) }
	}
	resp, err := p.exchange(ctx, &fencelockv1.PipeRequest{Batch: req}, p.stall, nil, lateAll)
	return resp.GetBatch(), err
}

// acquire sends an Acquire that may wait in the queue and returns its
// answer. If ctx ends first and the caller is gone (not just this attempt:
// a retry with the same request id will take the request over), the node is
// told to stop waiting; late (if set) gets the answer that follows.
// errNoPipe means: send it with Connect.
func (p *pipe) acquire(ctx context.Context, req *fencelockv1.AcquireRequest, gone func() bool, late func(*fencelockv1.AcquireResponse, error)) (*fencelockv1.AcquireResponse, error) {
	var lateAll func(*fencelockv1.PipeResponse, error)
	if late != nil {
		lateAll = func(resp *fencelockv1.PipeResponse, err error) { late(resp.GetAcquire(), err) }
	}
	// No stall check: a wait may rightly go without an answer for long.
	resp, err := p.exchange(ctx, &fencelockv1.PipeRequest{Acquire: req}, 0, gone, lateAll)
	if err == nil && resp.GetAcquire() == nil {
		err = fmt.Errorf("acquire answered without a grant: %w", fencelock.ErrUnavailable)
	}
	return resp.GetAcquire(), err
}

// exchange sends m on the pipe and returns its answer (see
// pipeConn.exchange).
func (p *pipe) exchange(ctx context.Context, m *fencelockv1.PipeRequest, stall time.Duration, gone func() bool, late func(*fencelockv1.PipeResponse, error)) (*fencelockv1.PipeResponse, error) {
	if p.noPipe.off() {
		return nil, errNoPipe
	}
	c, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.exchange(ctx, m, stall, p.lateWait, gone, late)
}

// get returns the open connection, or opens one. One dial at a time: other
// callers wait for it, each as long as its own context allows.
func (p *pipe) get(ctx context.Context) (*pipeConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("pipe: %w", errClientClosed)
		}
		if p.conn != nil && p.conn.broken() == nil {
			c := p.conn
			p.mu.Unlock()
			return c, nil
		}
		if wait := p.dialing; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				if p.noPipe.off() {
					return nil, errNoPipe // that dial found no pipe
				}
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		p.dialing = done
		p.mu.Unlock()
		rwc, err := p.open(ctx)
		p.mu.Lock()
		p.dialing = nil
		var c *pipeConn
		if err == nil {
			c = newPipeConn(rwc)
			if p.closed {
				c.fail(errClientClosed)
				err = fmt.Errorf("pipe: %w", errClientClosed)
			} else {
				p.conn = c
			}
		}
		p.mu.Unlock()
		close(done)
		return c, err
	}
}

// open upgrades a new HTTP/1.1 connection to the pipe.
func (p *pipe) open(ctx context.Context) (io.ReadWriteCloser, error) {
	// The connection outlives this context: once the node answers 101, the
	// transport hands the connection over and no longer watches it.
	dctx, cancel := context.WithTimeout(ctx, pipeDialTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(dctx, http.MethodGet, p.url+wire.PipePath, nil)
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", wire.PipeProtocol)
	resp, err := p.rt.RoundTrip(req)
	if err != nil {
		if ctx.Err() != nil || dctx.Err() != nil || isNetErr(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// The node may be down, restarting or slow: the call is retried.
			return nil, fmt.Errorf("pipe: %w: %w", err, fencelock.ErrUnavailable)
		}
		// The transport cannot carry an upgrade (an HTTP/2-only
		// transport, say): use Connect.
		p.noPipe.turnOff()
		return nil, errNoPipe
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		p.noPipe.turnOff()
		return nil, errNoPipe
	}
	return rwc, nil
}

// close closes the open connection, if any; calls out on it fail.
func (p *pipe) close() {
	p.mu.Lock()
	c := p.conn
	p.conn = nil
	p.closed = true
	p.mu.Unlock()
	if c != nil {
		c.fail(errClientClosed)
	}
}

// pipeConn is one open pipe: requests go out as frames, a reader goroutine
// hands each answer to the request with its id.
type pipeConn struct {
	rwc      io.ReadWriteCloser
	w        *wire.FrameWriter
	received atomic.Uint64 // answers read so far

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan *fencelockv1.PipeResponse // closed when the pipe breaks
	err     error                                     // why the pipe broke; then pending is nil
}

func newPipeConn(rwc io.ReadWriteCloser) *pipeConn {
	c := &pipeConn{rwc: rwc, w: wire.NewFrameWriter(bufio.NewWriter(rwc)),
		pending: make(map[uint64]chan *fencelockv1.PipeResponse)}
	go c.read()
	return c
}

func (c *pipeConn) read() {
	br := bufio.NewReader(c.rwc)
	var frame wire.Frame
	for {
		resp := new(fencelockv1.PipeResponse)
		if err := frame.Read(br, resp, maxPipeAnswer); err != nil {
			c.fail(err)
			return
		}
		c.received.Add(1)
		c.mu.Lock()
		ch := c.pending[resp.Id]
		delete(c.pending, resp.Id)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp // buffered
		}
	}
}

// broken returns why the pipe broke, or nil.
func (c *pipeConn) broken() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail breaks the pipe: the connection closes and every request out on it
// fails with ErrUnavailable (its outcome is unknown; calls are safe to
// retry).
func (c *pipeConn) fail(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = fmt.Errorf("pipe lost (%v): %w", cause, fencelock.ErrUnavailable)
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	c.rwc.Close()
	for _, ch := range pending {
		close(ch)
	}
}

// exchange sends m (with a new id) and waits for its answer or ctx's end.
// If ctx ends first: an acquire's wait is cancelled on the node if gone
// says its caller gave up; and if
// late is set, late gets the answer when it comes (or an error if none
// comes within lateWait), since the caller that left may still need to
// know what its request did. If stall > 0 and a request has been out that
// long with nothing at all coming back since it went out, the connection is
// taken to be dead (a paused node, a cut link) and closed, so that the next
// call dials afresh instead of queueing behind it.
func (c *pipeConn) exchange(ctx context.Context, m *fencelockv1.PipeRequest, stall, lateWait time.Duration, gone func() bool, late func(*fencelockv1.PipeResponse, error)) (*fencelockv1.PipeResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // the caller left: send nothing
	}
	if n := proto.Size(m); n > wire.MaxRequestBytes-8 {
		// The node would close the pipe on it, with every call out on it.
		return nil, fmt.Errorf("request of %d bytes, more than %d: %w", n, wire.MaxRequestBytes-8, fencelock.ErrTooLarge)
	}
	ch := make(chan *fencelockv1.PipeResponse, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.next++
	id := c.next
	c.pending[id] = ch
	c.mu.Unlock()
	m.Id = id
	if dl, ok := ctx.Deadline(); ok && m.Acquire != nil {
		// As a Connect call would: the node stops waiting when this
		// attempt is over, even if no cancel frame reaches it.
		m.Timeout = durationpb.New(max(time.Until(dl), time.Millisecond))
	}
	seen, sent := c.received.Load(), time.Now()
	if err := c.w.Send(m); err != nil {
		c.fail(err)
		return nil, c.broken()
	}
	select {
	case resp, ok := <-ch:
		return c.answer(resp, ok)
	case <-ctx.Done():
	}
	if m.Acquire != nil && gone != nil && gone() {
		// Best effort, and not holding up the caller: if the pipe is
		// broken, the node ends the wait itself.
		go func() { _ = c.w.Send(&fencelockv1.PipeRequest{Cancel: id}) }()
	}
	if stall > 0 && time.Since(sent) >= stall && c.received.Load() == seen {
		c.fail(fmt.Errorf("no answer for %v", time.Since(sent).Round(time.Millisecond)))
	}
	if late == nil {
		c.forget(id)
		return nil, ctx.Err()
	}
	go func() {
		t := time.NewTimer(lateWait)
		defer t.Stop()
		select {
		case resp, ok := <-ch:
			late(c.answer(resp, ok))
		case <-t.C:
			c.forget(id)
			late(nil, fmt.Errorf("no answer within %v: %w", lateWait, fencelock.ErrUnavailable))
		}
	}()
	return nil, ctx.Err()
}

// answer turns what the reader handed a request into its result.
func (c *pipeConn) answer(resp *fencelockv1.PipeResponse, ok bool) (*fencelockv1.PipeResponse, error) {
	if !ok {
		return nil, c.broken()
	}
	if resp.Error != nil {
		return nil, wire.FromBatchError(resp.Error)
	}
	return resp, nil
}

// forget stops waiting for request id's answer.
func (c *pipeConn) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}
