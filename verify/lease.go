package verify

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
)

// lookEvery is how often a worker looks at the lock it holds, to bound
// when its lease ended (LeaseEnd).
const lookEvery = 5 * time.Millisecond

// lease is a holder's view of its grant: *client.Lock, or lateLease in
// the negative control.
type lease interface {
	Token() fencelock.Token
	LeaseID() fencelock.LeaseID
	Context() context.Context
	Deadline() time.Time
	Release(ctx context.Context) error
}

var (
	_ lease = (*client.Lock)(nil)
	_ lease = (*lateLease)(nil)
)

// lateLease is the view of a holder that trusts its lease by a fixed time
// past the client's deadline: a negative safety margin, as a client
// running on a clock slower than the service's, or one that counts the TTL
// from when the grant's answer arrived, would have. Its context ends by
// past the lock's deadline after any loss (a refused renewal too), and at
// once on Release. The negative control's lease checker must catch it.
type lateLease struct {
	*client.Lock
	by     time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newLateLease(l *client.Lock, by time.Duration) *lateLease {
	ctx, cancel := context.WithCancelCause(context.Background())
	v := &lateLease{Lock: l, by: by, ctx: ctx, cancel: cancel}
	context.AfterFunc(l.Context(), func() {
		cause := context.Cause(l.Context())
		if errors.Is(cause, client.ErrReleased) {
			cancel(cause)
			return
		}
		time.AfterFunc(time.Until(v.Deadline()), func() { cancel(cause) })
	})
	return v
}

// Context ends by past the lock's deadline once the lease is lost.
func (v *lateLease) Context() context.Context { return v.ctx }

// Deadline is the lock's deadline plus by.
func (v *lateLease) Deadline() time.Time { return v.Lock.Deadline().Add(v.by) }

// Release releases the lock and ends the view's context.
func (v *lateLease) Release(ctx context.Context) error {
	err := v.Lock.Release(ctx)
	v.cancel(client.ErrReleased)
	return err
}

// leaseReport is LeaseEnd as a worker sends it: CLOCK_MONOTONIC readings.
type leaseReport struct {
	Alive    time.Duration `json:"alive,omitempty"`
	CtxAlive time.Duration `json:"ctx_alive,omitempty"`
	Done     time.Duration `json:"done"`
	Deadline time.Duration `json:"deadline"`
	Cause    string        `json:"cause"`
}

// on converts r to the times of history h.
func (r *leaseReport) on(h *History) *LeaseEnd {
	if r == nil {
		return nil
	}
	return &LeaseEnd{Alive: h.Since(r.Alive), CtxAlive: h.Since(r.CtxAlive), Done: h.Since(r.Done),
		Deadline: h.Since(r.Deadline), Cause: r.Cause}
}

// watch looks at a held lease until its context ends, and records the
// bounds of that end.
type watch struct {
	v    lease
	mu   sync.Mutex
	r    leaseReport
	done chan struct{} // closed once r is complete
}

// watchLease starts watching v.
func watchLease(v lease) *watch {
	w := &watch{v: v, done: make(chan struct{})}
	go w.run()
	return w
}

func (w *watch) run() {
	defer close(w.done)
	t := time.NewTicker(lookEvery)
	defer t.Stop()
	ctx := w.v.Context()
	for w.look() {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	done := monoNow()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.r.Done, w.r.Deadline = done, monoAt(w.v.Deadline())
	w.r.Cause = "released"
	if cause := context.Cause(ctx); !errors.Is(cause, client.ErrReleased) {
		w.r.Cause = fencelock.Code(cause)
		if w.r.Cause == "" {
			w.r.Cause = "lost"
		}
	}
}

// look reads the clock, then the lease: it reports whether the context is
// still live.
func (w *watch) look() bool {
	now := monoNow()
	if w.v.Context().Err() != nil {
		return false
	}
	held := time.Until(w.v.Deadline()) > 0
	w.mu.Lock()
	defer w.mu.Unlock()
	w.r.CtxAlive = now
	if held {
		w.r.Alive = now
	}
	return true
}

// report waits up to timeout for the context's end and returns the
// record; nil if the context has not ended by then.
func (w *watch) report(timeout time.Duration) *leaseReport {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.r
	return &r
}
