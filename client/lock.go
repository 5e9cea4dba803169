package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
)

// waitChunk bounds one queued Acquire call; a longer wait is several calls
// with the same request id, and the request keeps its place between them.
const waitChunk = 5 * time.Minute

// minCall: a waiting call that a node ends sooner than this is followed by
// a pause of this long before the next.
const minCall = 50 * time.Millisecond

// ErrReleased is the cause of a Lock's context after Release.
var ErrReleased = errors.New("lock released")

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
// retries Acquire already did safe), or ctx's error.
func (c *Client) Acquire(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	o := acquireOptions{ttl: DefaultTTL, holder: c.cfg.Holder}
	for _, opt := range opts {
		opt(&o)
	}
	// Bad input is refused here, before it reaches the shared pipe (a
	// request that cannot be encoded would break it for every call).
	if err := fencelock.LockName(name).Validate(); err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	if err := fencelock.ValidateHolder(o.holder); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", name, err)
	}
	if o.requestID != "" {
		if err := fencelock.ValidateRequestID(o.requestID); err != nil {
			return nil, fmt.Errorf("acquire %q: %w", name, err)
		}
	}
	if o.ttl <= 0 {
		return nil, fmt.Errorf("acquire %q: ttl %v: %w", name, o.ttl, fencelock.ErrInvalidTTL)
	}
	// The lock's context ends at (last confirmed renewal + ttl - margin),
	// and the first renewal runs ttl/3 after the grant: a margin of 2/3 of
	// the ttl or more would end every lock before its first renewal.
	if o.margin <= 0 {
		if o.margin = max(o.ttl/10, 50*time.Millisecond); 3*o.margin >= 2*o.ttl {
			return nil, fmt.Errorf("acquire %q: ttl %v is too short for the default safety margin %v: %w", name, o.ttl, o.margin, fencelock.ErrInvalidTTL)
		}
	}
	if 3*o.margin >= 2*o.ttl {
		return nil, fmt.Errorf("acquire %q: safety margin %v is not below 2/3 of ttl %v (the lease would end before its first renewal): %w", name, o.margin, o.ttl, fencelock.ErrInvalidArgument)
	}
	if o.waitSet && o.wait < 0 {
		return nil, fmt.Errorf("acquire %q: wait %v is negative: %w", name, o.wait, fencelock.ErrInvalidArgument)
	}
	ownID := o.requestID != "" // the caller's: it may ask again with it
	if !ownID {
		o.requestID = string(fencelock.NewLeaseID())
	} else if err := c.awaitTakeBack(ctx, o.requestID); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", name, err)
	}
	// A grant returned for this request id may have been made at any point
	// since the first attempt (a retry, or a later wait chunk, can return a
	// grant made earlier), so the lease counts from here. With the caller's
	// own id it may be older still (an earlier Acquire, or another process,
	// used the id): its lease counts only from a renewal (below).
	first := time.Now()
	// The wait ends at end (zero: only when ctx ends). One call waits at
	// most waitChunk, and a node may end a call sooner (its --max-wait); the
	// next call follows at once with the same request id. Every waiting
	// call asks the node to keep the request's place in the queue when it
	// runs out (keep_place), so a long wait stays first in line; when the
	// wait is over, Acquire takes the request back itself.
	var end time.Time
	if o.waitSet {
		end = first.Add(o.wait)
	}
	if dl, ok := ctx.Deadline(); ok && (end.IsZero() || dl.Before(end)) {
		end = dl
	}
	// A late answer of an earlier attempt may take the request back
	// (abandoned) only if the caller has given up and Acquire has not
	// returned the grant; the two exclude each other.
	var (
		settle   sync.Mutex
		returned bool      // Acquire returns the grant
		quit     bool      // Acquire returns an error: nothing will ask for the request again
		taken    bool      // a take-back started
		found    bool      // a take-back found the request and ended it
		running  bool      // a take-back is under way
		again    bool      // another answer came during it: take back once more
		landBy   time.Time // the latest any call's request may land
	)
	// takeBack(by), when the caller has given up, takes the request back
	// with CancelWait until one finds it: at once; again whenever a late
	// answer shows something there; and once more at by, when a request
	// that may still be on its way to the node will have landed (zero:
	// none is).
	takeBack := func(by time.Time) {
		settle.Lock()
		if by.After(landBy) {
			landBy = by
		}
		if returned || found || ctx.Err() == nil && !quit {
			settle.Unlock()
			return
		}
		if running {
			again = true
			settle.Unlock()
			return
		}
		running, taken = true, true
		settle.Unlock()
		done := c.holdRequestID(o.requestID)
		defer done()
		for {
			ok := c.cancelWait(name, o.requestID)
			settle.Lock()
			if ok || !again && !time.Now().Before(landBy) {
				found = ok
				running = false
				settle.Unlock()
				return
			}
			d := time.Until(landBy)
			if again {
				again, d = false, 0
			}
			settle.Unlock()
			time.Sleep(d)
		}
	}
	// gaveUp ends Acquire with err when nothing will ask for the request
	// again (the caller's context ended, or the retries ran out with the
	// outcome unknown): whatever an attempt left on the node (a place in
	// the queue, a grant) is taken back, and a new Acquire with the
	// caller's own request id waits until the late answers that could
	// still start a take-back are in.
	gaveUp := func(err error) (*Lock, error) {
		settle.Lock()
		quit = true
		settle.Unlock()
		if ownID {
			time.AfterFunc(c.cfg.AttemptTimeout+landGrace, c.holdRequestID(o.requestID))
		}
		go takeBack(time.Time{})
		return nil, err
	}
	for {
		wait := waitChunk
		if !end.IsZero() {
			wait = max(min(time.Until(end), waitChunk), 0)
		}
		req := &fencelockv1.AcquireRequest{Name: name, Ttl: durationpb.New(o.ttl), Wait: durationpb.New(wait),
			RequestId: o.requestID, Holder: o.holder, KeepPlace: wait > 0}
		start := first
		var g *fencelockv1.Grant
		called := time.Now()
		// abandoned: a batched attempt ended before its answer, which says
		// the request queued or got the lock. If the caller has given up,
		// take it back (out of the queue, or the grant ends) instead of
		// leaving a waiter or a grant nobody uses until its TTL. If not, the
		// next attempt with the same request id finds it.
		gone := func() bool { return ctx.Err() != nil }
		err := c.callAt(ctx, wait, func(actx context.Context, ep *endpoint) error {
			var err error
			g, err = ep.acquire(actx, req, gone, takeBack)
			return err
		})
		if err == nil {
			settle.Lock()
			returned = !taken
			settle.Unlock()
			if !returned {
				return gaveUp(fmt.Errorf("acquire %q: %w", name, context.Cause(ctx)))
			}
			if g == nil || g.Token == 0 {
				return nil, fmt.Errorf("acquire %q: service returned no grant: %w", name, fencelock.ErrUnavailable)
			}
			if ownID || time.Since(start) > o.margin {
				// Queued or retried: the lease began at some unknown point
				// after start (with the caller's own id, at any point
				// before). Renew at once so the lease context counts from
				// a known point.
				now := time.Now()
				_, err := c.Renew(ctx, name, fencelock.LeaseID(g.LeaseId), fencelock.Token(g.Token))
				switch {
				case err == nil:
					start = now
				case errors.Is(err, fencelock.ErrNotHolder) || errors.Is(err, fencelock.ErrLeaseExpired):
					return nil, fmt.Errorf("acquire %q: grant lost before use: %w", name, err)
				case ownID:
					// The grant may be older than this call: without a
					// renewal its lease has no known start, so Acquire
					// fails and, as for any call it gives up, takes the
					// grant back.
					settle.Lock()
					returned = false
					settle.Unlock()
					return gaveUp(fmt.Errorf("acquire %q: token %d granted, but its renewal failed: %w", name, g.Token, err))
				}
			}
			return c.newLock(g, start, o.margin), nil
		}
		if ctx.Err() != nil {
			return gaveUp(fmt.Errorf("acquire %q: %w", name, err))
		}
		if !errors.Is(err, fencelock.ErrLockHeld) || wait <= 0 {
			err = fmt.Errorf("acquire %q: %w", name, err)
			if retryable(err) {
				// The retries ran out and the last attempts' outcome is
				// unknown: the request may wait in the queue, or hold a
				// grant, for nobody.
				return gaveUp(err)
			}
			return nil, err
		}
		if ctx.Err() == nil && (end.IsZero() || time.Until(end) > 0) {
			// The call ran out before the wait did: ask again (after a
			// pause if the node ended it at once, so as not to spin).
			if time.Since(called) < minCall {
				select {
				case <-time.After(minCall):
				case <-ctx.Done():
				}
			}
			if ctx.Err() == nil {
				continue
			}
		}
		// The wait is over, or the caller gave up, as a call ran out: the
		// node keeps the request's place for a next call that will not
		// come. Take it back (at once if the caller is still here, so that
		// it may ask again with the same request id).
		if ctx.Err() != nil {
			return gaveUp(fmt.Errorf("acquire %q: %w (last answer: %w)", name, context.Cause(ctx), err))
		}
		c.cancelWait(name, o.requestID)
		return nil, fmt.Errorf("acquire %q: %w", name, err)
	}
}

// TryAcquire takes the named lock if it is free and fails at once with a
// *fencelock.LockHeldError otherwise.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.Acquire(ctx, name, append(opts, WithWait(0))...)
}

// Lock is a held grant: its fencing token, its lease, and a context that
// ends when the lease may be lost. Its methods are safe for concurrent use.
type Lock struct {
	c       *Client
	name    string
	token   fencelock.Token
	leaseID fencelock.LeaseID
	ttl     time.Duration
	margin  time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time   // monotonic: last confirmed renewal start + TTL - margin
	timer    *time.Timer // fires at deadline
	renewal  *time.Timer // fires when the next renewal is due; runs renew
	// renewing is held while a renewal runs, so that Release can wait
	// for one under way.
	renewing sync.Mutex
}

func (c *Client) newLock(g *fencelockv1.Grant, start time.Time, margin time.Duration) *Lock {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lock{c: c, name: g.Name, token: fencelock.Token(g.Token), leaseID: fencelock.LeaseID(g.LeaseId),
		ttl: g.Ttl.AsDuration(), margin: margin, ctx: ctx, cancel: cancel}
	l.mu.Lock()
	l.deadline = start.Add(l.ttl - margin)
	l.timer = time.AfterFunc(time.Until(l.deadline), l.deadlinePassed)
	// Renewals run on a timer, not in a goroutine of their own: a lock
	// released before its first renewal (most of them) costs no goroutine,
	// and Release does not wait for one to stop.
	l.renewal = time.AfterFunc(l.renewInterval(), l.renew)
	l.mu.Unlock()
	return l
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Token returns the fencing token: attach it to every write to the resource.
func (l *Lock) Token() fencelock.Token { return l.token }

// LeaseID returns the grant's ownership token.
func (l *Lock) LeaseID() fencelock.LeaseID { return l.leaseID }

// TTL returns the lease's TTL.
func (l *Lock) TTL() time.Duration { return l.ttl }

// Context returns a context that is cancelled the moment the holder can no
// longer be sure it holds the lease, or on Release. context.Cause tells why.
func (l *Lock) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease is believed held, and otherwise why not:
// an error wrapping fencelock.ErrLeaseExpired or fencelock.ErrNotHolder, or
// ErrReleased. It reads the deadline itself rather than waiting for the
// timer that ends the context: after a pause of the process (GC, SIGSTOP, a
// descheduled VM) the timer runs only some time after the deadline passed,
// and until then the context still looks alive.
func (l *Lock) Err() error {
	if l.ctx.Err() == nil {
		l.mu.Lock()
		passed := !time.Now().Before(l.deadline)
		l.mu.Unlock()
		if !passed {
			return nil
		}
		l.deadlinePassed()
	}
	return context.Cause(l.ctx)
}

// Deadline returns the monotonic instant at which the lock's context ends
// unless a renewal is confirmed first.
func (l *Lock) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *Lock) deadlinePassed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if left := time.Until(l.deadline); left > 0 {
		l.timer.Reset(left) // extended while this timer was firing
		return
	}
	l.lose(fmt.Errorf("lock %q token %d: no renewal confirmed within the lease: %w", l.name, l.token, fencelock.ErrLeaseExpired))
}

// lose cancels the lock's context with cause; the first cause wins.
func (l *Lock) lose(cause error) {
	if l.ctx.Err() == nil {
		l.c.cfg.Logger.Warn("lease lost", "lock", l.name, "token", l.token, "cause", cause)
	}
	l.cancel(cause)
}

func (l *Lock) extend(d time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil || !d.After(l.deadline) {
		return
	}
	l.deadline = d
	l.timer.Reset(time.Until(d))
}

// renewInterval is how often the lease is renewed: about TTL/3.
func (l *Lock) renewInterval() time.Duration { return l.ttl / 3 }

// renew renews the lease once (on the renewal timer) and schedules the
// next renewal, until Release or loss.
func (l *Lock) renew() {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	if l.ctx.Err() != nil {
		return
	}
	interval := l.renewInterval()
	start := time.Now()
	rctx, cancel := context.WithTimeout(l.ctx, interval)
	_, err := l.c.Renew(rctx, l.name, l.leaseID, l.token)
	cancel()
	switch {
	case err == nil:
		l.extend(start.Add(l.ttl - l.margin))
		l.scheduleRenewal(interval)
	case errors.Is(err, fencelock.ErrNotHolder), errors.Is(err, fencelock.ErrLeaseExpired):
		l.mu.Lock()
		l.lose(err)
		l.mu.Unlock()
	default:
		if l.ctx.Err() != nil {
			return
		}
		l.c.cfg.Logger.Warn("renew failed; retrying", "lock", l.name, "token", l.token, "err", err)
		l.scheduleRenewal(max(interval/4, 10*time.Millisecond))
	}
}

// scheduleRenewal runs the next renewal in d, unless the lock has ended.
func (l *Lock) scheduleRenewal(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() == nil {
		l.renewal.Reset(d)
	}
}

// Release stops the renewals, cancels the lock's context and releases the
// grant; the next waiter is granted at once. It returns an error wrapping
// fencelock.ErrNotHolder if the grant had already ended (the lease was lost).
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	l.timer.Stop()
	pending := l.renewal.Stop()
	held := l.ctx.Err() == nil && time.Now().Before(l.deadline) // not lost before this call (see Err)
	l.cancel(ErrReleased)                                       // no renewal is scheduled after this
	l.mu.Unlock()
	if !pending {
		// A renewal may be under way (its call ends with the context):
		// wait for it, so that no renewal follows the release.
		l.renewing.Lock()
		l.renewing.Unlock() // renew has returned
	}
	return l.c.release(ctx, l.name, l.leaseID, l.token, held)
}

// Do runs fn while holding the named lock: it acquires (with opts), calls fn
// with a context that ends when ctx does or the lease may be lost, and with
// the fencing token to attach to every write, then releases. It returns fn's
// error, or the error of Acquire. A lease lost while fn ran is not an error
// of Do when fn returned nil: fn's context ended at the loss, and the
// resource judged each fenced write by its token; a release that finds the
// grant gone is only logged.
func Do(ctx context.Context, c *Client, name string, fn func(ctx context.Context, token fencelock.Token) error, opts ...Option) error {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl)
		defer cancel()
		if rerr := l.Release(rctx); rerr != nil {
			c.cfg.Logger.Warn("release after Do failed", "lock", name, "err", rerr)
		}
	}()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	defer stop()
	return fn(fctx, l.token)
}

// holdRequestID marks request rid of a caller that gave up as possibly
// being taken back, until done is called. A new Acquire with the same
// request id (a caller asking again with WithRequestID) waits until no mark
// is left, or a take-back could end the grant it gets.
func (c *Client) holdRequestID(rid string) (done func()) {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	h := c.heldIDs[rid]
	if h == nil {
		h = &heldID{free: make(chan struct{})}
		if c.heldIDs == nil {
			c.heldIDs = make(map[string]*heldID)
		}
		c.heldIDs[rid] = h
	}
	h.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.heldMu.Lock()
			defer c.heldMu.Unlock()
			if h.n--; h.n == 0 {
				delete(c.heldIDs, rid)
				close(h.free)
			}
		})
	}
}

// heldID counts the marks on one request id.
type heldID struct {
	n    int
	free chan struct{} // closed when n drops to 0
}

// awaitTakeBack waits until request rid has no mark.
func (c *Client) awaitTakeBack(ctx context.Context, rid string) error {
	for {
		c.heldMu.Lock()
		h := c.heldIDs[rid]
		c.heldMu.Unlock()
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

// cancelWait takes request rid out of name's queue, or ends the grant it
// got, after its caller gave up, and reports whether it found it. Nothing
// to cancel is not an error.
func (c *Client) cancelWait(name, rid string) (found bool) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.AttemptTimeout)
	defer cancel()
	err := c.call(ctx, func(ctx context.Context, rpc fencelockv1connect.LockServiceClient) error {
		_, err := rpc.CancelWait(ctx, connect.NewRequest(&fencelockv1.CancelWaitRequest{Name: name, RequestId: rid}))
		return err
	})
	if err != nil && !errors.Is(err, fencelock.ErrNotFound) {
		c.cfg.Logger.Warn("could not take an abandoned acquire out of the queue; a grant it gets ends with its TTL",
			"lock", name, "err", err)
	}
	return err == nil
}
