package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// waitChunk bounds one queued Acquire call; a longer wait is several calls
// with the same request id, and the request keeps its place between them.
const waitChunk = 5 * time.Minute

// minCall: a waiting call that a node ends sooner than this is followed by
// a pause of this long before the next.
const minCall = 50 * time.Millisecond

// acquireState is where an acquisition stands.
type acquireState int

const (
	stateSent      acquireState = iota // a call is out; nothing is known yet
	stateQueued                        // the request waits in the lock's queue
	stateGranted                       // the grant went to the caller
	stateRefused                       // the service refused; nothing is left on it
	stateAbandoned                     // the caller gave up, or what the request left is unknown; it is taken back
)

// acquisition is one Acquire: a request id, and calls with it until the
// grant comes, the wait is over, or the caller gives up.
type acquisition struct {
	c     *Client
	name  string
	o     acquireOptions
	ownID bool      // the caller's request id: it may ask again with it
	first time.Time // before the first call: no grant of it is older (unless ownID)
	end   time.Time // when the wait is over; zero: when ctx ends
	byCtx bool      // end is ctx's deadline: the caller gives up at end
	state acquireState
}

// Acquire takes the named lock, waiting in FIFO order while it is held:
// until ctx ends, or for at most WithWait. It returns a Lock whose lease is
// kept alive until Release or until the lease is lost. Errors:
// *fencelock.LockHeldError (try-lock or the wait ran out), fencelock.ErrInvalidName,
// fencelock.ErrInvalidTTL, fencelock.ErrInvalidArgument (a holder label,
// request id or safety margin the service would refuse; checked before
// anything is sent), fencelock.ErrNotHolder (the request's grant ended
// before its answer reached this call: an answer lost on the way, or a
// WithRequestID of an ended grant; acquire again for a new grant),
// fencelock.ErrUnavailable (service unreachable; the request id makes the
// retries Acquire already did safe), or ctx's error. An Acquire that gives
// up leaves nothing behind: what its request left on the service (a place
// in the queue, a grant) is taken back.
func (c *Client) Acquire(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	a, err := c.newAcquisition(ctx, name, opts)
	if err != nil {
		return nil, fmt.Errorf("acquire %q: %w", name, err)
	}
	if a.ownID {
		if err := c.takeBacks.await(ctx, a.o.requestID); err != nil {
			return nil, fmt.Errorf("acquire %q: %w", name, err)
		}
	}
	l, err := a.run(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire %q: %w", name, err)
	}
	return l, nil
}

// TryAcquire takes the named lock if it is free and fails at once with a
// *fencelock.LockHeldError otherwise.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.Acquire(ctx, name, append(opts, WithWait(0))...)
}

// newAcquisition checks the options; bad input is refused before anything
// is sent.
func (c *Client) newAcquisition(ctx context.Context, name string, opts []Option) (*acquisition, error) {
	o := acquireOptions{ttl: DefaultTTL, holder: c.cfg.Holder}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(name); err != nil {
		return nil, err
	}
	a := &acquisition{c: c, name: name, o: o, ownID: o.requestID != "", first: time.Now()}
	if a.ownID {
		a.o.requestID = c.ownRequestID(o.requestID)
	} else {
		a.o.requestID = string(fencelock.NewLeaseID())
	}
	if o.waitSet {
		a.end = a.first.Add(o.wait)
	}
	if dl, ok := ctx.Deadline(); ok && (a.end.IsZero() || !dl.After(a.end)) {
		a.end, a.byCtx = dl, true
	}
	return a, nil
}

// run sends calls until the acquisition ends. Once the caller has given
// up, whatever the timing of the last answer, the acquisition is abandoned.
func (a *acquisition) run(ctx context.Context) (*Lock, error) {
	var err error // the last answer
	for {
		if a.gaveUp(ctx) {
			return nil, a.abandon(a.gaveUpError(ctx, err))
		}
		wait, last := a.nextWait()
		keep := !last && wait > 0 // the last call's place goes when it ends
		called := time.Now()
		var g *fencelockv1.Grant
		g, err = a.send(ctx, wait, keep)
		switch {
		case err == nil:
			return a.granted(ctx, g)
		case a.gaveUp(ctx):
			return nil, a.abandon(a.gaveUpError(ctx, err))
		case errors.Is(err, fencelock.ErrLockHeld) && a.waitLeft():
			// This call ran out before the wait did (a node ends a call at
			// its max wait, keeping the request's place): the next call
			// resumes it.
			a.state = stateQueued
			a.pause(ctx, called)
		case errors.Is(err, fencelock.ErrLockHeld) && keep:
			// The wait is over (the call outlasted it, retried), and the
			// place this call kept waits for a call that will not come.
			return nil, a.abandon(err)
		case retryable(err):
			// The retries ran out with the outcome unknown.
			return nil, a.abandon(err)
		default:
			a.state = stateRefused
			return nil, err
		}
	}
}

// waitLeft reports whether the wait is not over yet.
func (a *acquisition) waitLeft() bool { return a.end.IsZero() || time.Until(a.end) > 0 }

// gaveUp reports whether the caller gave up: ctx ended, or its deadline
// passed (a context ends a moment after its deadline, and an answer that
// comes in between finds ctx still live).
func (a *acquisition) gaveUp(ctx context.Context) bool {
	return ctx.Err() != nil || a.byCtx && !a.waitLeft()
}

// gaveUpError is the error of an acquisition whose caller gave up, after
// last (the last answer; nil if none).
func (a *acquisition) gaveUpError(ctx context.Context, last error) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	if last == nil {
		return cause
	}
	return fmt.Errorf("%w (last answer: %w)", cause, last)
}

// nextWait returns how long the next call waits, and whether it is the
// last (the wait is over when it ends).
func (a *acquisition) nextWait() (time.Duration, bool) {
	if a.end.IsZero() {
		return waitChunk, false
	}
	left := max(time.Until(a.end), 0)
	return min(left, waitChunk), left <= waitChunk
}

// pause waits minCall after a call that a node ended at once, so as not to
// spin.
func (a *acquisition) pause(ctx context.Context, called time.Time) {
	if d := minCall - time.Since(called); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
}

// send makes one call (retried across nodes) that waits up to wait.
func (a *acquisition) send(ctx context.Context, wait time.Duration, keepPlace bool) (*fencelockv1.Grant, error) {
	a.state = stateSent
	req := &fencelockv1.AcquireRequest{Name: a.name, Ttl: durationpb.New(a.o.ttl), Wait: durationpb.New(wait),
		RequestId: a.o.requestID, Holder: a.o.holder, KeepPlace: keepPlace && wait > 0, NoSequencer: !a.o.sequencer}
	var g *fencelockv1.Grant
	err := a.c.call(ctx, wait, func(ctx context.Context, ep *endpoint) error {
		var err error
		g, err = ep.node.acquire(ctx, req)
		return err
	})
	if err == nil && (g == nil || g.Token == 0) {
		return nil, fmt.Errorf("service returned no grant: %w", fencelock.ErrUnavailable)
	}
	return g, err
}

// granted turns grant g into a Lock. A grant that may be older than the
// lease's count from a.first (it came after a wait or a retry, or with the
// caller's own request id) is renewed first, so that the lease counts
// from a known point. A grant of a request made by this acquisition came
// after a.first, so its sequencer covers the lease until a.first + TTL;
// one found by the caller's own request id may be older, and takes the
// renewal's sequencer.
func (a *acquisition) granted(ctx context.Context, g *fencelockv1.Grant) (*Lock, error) {
	start, seqStart := a.first, a.first
	if a.ownID || time.Since(start) > a.o.margin {
		now := time.Now()
		resp, err := a.c.renew(ctx, a.name, fencelock.LeaseID(g.LeaseId), fencelock.Token(g.Token), a.ownID && a.o.sequencer)
		switch {
		case err == nil:
			start = now
			if seq := resp.GetSequencer(); seq != "" {
				g.Sequencer, seqStart = seq, now
			}
		case errors.Is(err, fencelock.ErrNotHolder) || errors.Is(err, fencelock.ErrLeaseExpired):
			a.state = stateRefused
			return nil, fmt.Errorf("grant lost before use: %w", err)
		case a.ownID:
			// Without a renewal the grant's lease has no known start: fail,
			// and take the grant back as for any call given up.
			return nil, a.abandon(fmt.Errorf("token %d granted, but its renewal failed: %w", g.Token, err))
		}
	}
	a.state = stateGranted
	return a.c.newLock(g, start, seqStart, a.o.margin, a.o.sequencer), nil
}

// abandon ends with err an acquisition that may have left something on
// the service (a place in the queue, a grant): it sends CancelWait at
// once, in the background. The node takes a request back by itself too:
// at once when the call was cancelled on its stream, 3 s after a call
// that ended otherwise. This covers what the node cannot see: a grant
// already on its way when the cancel arrived, an earlier attempt whose
// outcome was unknown, a place kept between calls.
func (a *acquisition) abandon(err error) error {
	a.state = stateAbandoned
	done := a.c.takeBacks.hold(a.o.requestID)
	go func() {
		defer done()
		a.c.cancelWait(a.name, a.o.requestID)
	}()
	return err
}

// cancelWait takes request rid out of name's queue, or ends the grant it
// got. An attempt whose outcome is unknown may still land later, so it
// is retried, as any call, until a node answers (up to RetryTimeout of
// retries, or Close): until then a new Acquire with the same request id
// waits (takeBacks), or the late one could end its grant. Nothing to
// cancel is not an error.
func (c *Client) cancelWait(name, rid string) {
	err := c.call(c.closed, 0, func(ctx context.Context, ep *endpoint) error {
		return ep.node.cancelWait(ctx, name, rid)
	})
	if err != nil && !errors.Is(err, fencelock.ErrNotFound) {
		c.cfg.Logger.Warn("could not take back an abandoned acquire; the service does within seconds", "lock", name, "err", err)
	}
}

// takeBacks counts, per request id, the take-backs under way. A new
// Acquire with the same request id (WithRequestID) waits until none is
// left, or a take-back could end the grant it gets.
type takeBacks struct {
	mu sync.Mutex
	m  map[string]*takeBack
}

type takeBack struct {
	n    int
	free chan struct{} // closed when n drops to 0
}

// hold marks rid as being taken back until done is called.
func (t *takeBacks) hold(rid string) (done func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.m[rid]
	if h == nil {
		h = &takeBack{free: make(chan struct{})}
		if t.m == nil {
			t.m = make(map[string]*takeBack)
		}
		t.m[rid] = h
	}
	h.n++
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if h.n--; h.n == 0 {
			delete(t.m, rid)
			close(h.free)
		}
	}
}

// await waits until rid has no take-back under way, or ctx ends.
func (t *takeBacks) await(ctx context.Context, rid string) error {
	for {
		t.mu.Lock()
		h := t.m[rid]
		t.mu.Unlock()
		if h == nil {
			return nil
		}
		select {
		case <-h.free:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
