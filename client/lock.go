package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// ErrReleased is the cause of a Lock's context after Release.
var ErrReleased = errors.New("lock released")

// Lock is a held grant: its fencing token, its lease, and a context that
// ends when the lease may be lost. Its methods are safe for concurrent use.
type Lock struct {
	c       *Client
	name    string
	token   fencelock.Token
	leaseID fencelock.LeaseID
	ttl     time.Duration
	margin  time.Duration
	cluster string

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	deadline  time.Time   // monotonic: last confirmed renewal start + TTL - margin
	sequencer string      // the latest: from the grant, then from renewals
	seqUntil  time.Time   // the deadline as of the call that brought sequencer; zero if none
	unsigned  bool        // the node signed none when asked: the cluster has no key
	seqWanted atomic.Bool // WithSequencer, or Sequencer was called: renewals bring new ones
	timer     *time.Timer // fires at deadline
	renewal   *time.Timer // fires when the next renewal is due; runs renew
	// renewing is held while a renewal runs, so that Release can wait
	// for one under way.
	renewing sync.Mutex
}

// newLock returns the Lock of grant g whose lease counts from start; its
// sequencer, if any, covers the lease at least until seqStart + TTL.
// seqAsked says that the grant was asked for one.
func (c *Client) newLock(g *fencelockv1.Grant, start, seqStart time.Time, margin time.Duration, seqAsked bool) *Lock {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lock{c: c, name: g.Name, token: fencelock.Token(g.Token), leaseID: fencelock.LeaseID(g.LeaseId),
		ttl: g.Ttl.AsDuration(), margin: margin, cluster: g.ClusterId, ctx: ctx, cancel: cancel}
	l.seqWanted.Store(seqAsked)
	l.mu.Lock()
	l.deadline = start.Add(l.ttl - margin)
	if l.sequencer = g.Sequencer; l.sequencer != "" {
		l.seqUntil = seqStart.Add(l.ttl - margin)
	}
	l.unsigned = seqAsked && l.sequencer == ""
	l.timer = time.AfterFunc(time.Until(l.deadline), l.deadlinePassed)
	// Renewals run on a timer, not in a goroutine of their own: a lock
	// released before its first renewal (most of them) costs no goroutine,
	// and Release does not wait for one to stop.
	l.renewal = time.AfterFunc(l.nextRenewal(start), l.renew)
	l.mu.Unlock()
	return l
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Token returns the fencing token: attach it to every write to the resource.
func (l *Lock) Token() fencelock.Token { return l.token }

// Sequencer returns the grant's latest signed proof (package sequencer)
// for resources that verify one, valid until the lease it came with ends:
// the grant's, then each renewal's. The node signs them only for holders
// that ask (one signature costs it more than the rest of a grant): the
// grant brings one with WithSequencer, renewals once Sequencer has been
// called. So the first call without a proof covering the lease renews the
// lease to get one: a round trip, after a renewal under way (calls made
// meanwhile share it). "" if the cluster signs none, or no proof covering
// the lease could be had.
func (l *Lock) Sequencer() string {
	l.seqWanted.Store(true)
	if seq, ok := l.currentSequencer(); ok {
		return seq
	}
	l.renewing.Lock()
	if _, ok := l.currentSequencer(); !ok { // none came with a renewal we waited for
		l.renewOnce()
	}
	l.renewing.Unlock()
	seq, _ := l.currentSequencer()
	return seq
}

// currentSequencer returns the latest sequencer if it covers the lease,
// and whether no other is to be had now: it covers the lease, or the node
// signs none.
func (l *Lock) currentSequencer() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Before(l.seqUntil) {
		return l.sequencer, true
	}
	return "", l.unsigned
}

// ClusterID returns the id of the cluster that made the grant.
func (l *Lock) ClusterID() string { return l.cluster }

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

// nextRenewal returns how long from now the renewal after the lease
// counted from start is due: at start + TTL/3, on the grid, at once if
// that has passed. Counted from start, not from now: a grant answered
// late (up to the margin after start, see granted) would otherwise be
// renewed after its deadline, with a margin over TTL/3.
func (l *Lock) nextRenewal(start time.Time) time.Duration {
	now := time.Now()
	return onRenewGrid(l.c.born, now, max(start.Add(l.renewInterval()).Sub(now), 0))
}

// renewGrid aligns the renewals of a client's locks: those due within the
// same 20 ms go out together, in one message, and the node signs their
// sequencers under one signature. Each client's grid starts when the
// client was made, so that clients do not renew in step with each other.
const renewGrid = 20 * time.Millisecond

// onRenewGrid returns d from now, lengthened to end on the next step of
// the grid that starts at born (by at most renewGrid).
func onRenewGrid(born, now time.Time, d time.Duration) time.Duration {
	steps := (now.Sub(born)+d)/renewGrid + 1
	return born.Add(steps * renewGrid).Sub(now)
}

// renew renews the lease once (on the renewal timer) and schedules the
// next renewal, until Release or loss.
func (l *Lock) renew() {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	l.renewOnce()
}

// renewOnce is renew, with renewing held.
func (l *Lock) renewOnce() {
	if l.ctx.Err() != nil {
		return
	}
	interval := l.renewInterval()
	start := time.Now()
	rctx, cancel := context.WithTimeout(l.ctx, interval)
	wanted := l.seqWanted.Load()
	resp, err := l.c.renew(rctx, l.name, l.leaseID, l.token, wanted)
	cancel()
	switch {
	case err == nil:
		l.extend(start.Add(l.ttl - l.margin))
		if wanted {
			l.mu.Lock()
			if seq := resp.GetSequencer(); seq != "" {
				l.sequencer, l.seqUntil = seq, start.Add(l.ttl-l.margin)
			}
			l.unsigned = resp.GetSequencer() == ""
			l.mu.Unlock()
		}
		l.scheduleRenewal(l.nextRenewal(start))
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
	l.renewal.Stop()
	held := l.ctx.Err() == nil && time.Now().Before(l.deadline) // not lost before this call (see Err)
	l.cancel(ErrReleased)                                       // no renewal starts after this
	l.mu.Unlock()
	// A renewal may be under way (its call ends with the context): wait for
	// it, so that no renewal follows the release.
	l.renewing.Lock()
	l.renewing.Unlock()
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
