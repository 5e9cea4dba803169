package verify

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
)

// TestWatch_lostLease holds a real lock through a proxy and cuts the proxy,
// so that the lease is lost, while watching the lock and a late view of it
// (the lease checker's negative control): the lock was held by its own
// account only up to its deadline and its context was done after that; the
// late view held on for its lateness past the same deadline.
func TestWatch_lostLease(t *testing.T) {
	srv := testproc.StartServer(t)
	p := testproc.StartProxy(t, srv.Addr)
	cfg := client.DefaultConfig(p.Addr)
	cfg.AttemptTimeout, cfg.RetryTimeout = 200*time.Millisecond, 300*time.Millisecond
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(t.Context(), "watch", client.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	const by = 300 * time.Millisecond
	late := newLateLease(l, by)
	wl, wv := watchLease(l), watchLease(late)
	p.Block()
	rl, rv := wl.report(5*time.Second), wv.report(5*time.Second)
	p.Unblock()
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = late.Release(rctx) // the grant is gone; this ends the late view
	if rl == nil || rv == nil {
		t.Fatalf("got reports %+v and %+v, want both contexts ended after the cut", rl, rv)
	}
	if rl.Cause != "lease_expired" || rv.Cause != "lease_expired" {
		t.Errorf("got causes %q and %q, want lease_expired for both", rl.Cause, rv.Cause)
	}
	if rl.Alive == 0 || rl.Alive > rl.Deadline || rl.Deadline-rl.Alive > 200*time.Millisecond || rl.Done < rl.Deadline {
		t.Errorf("lock: alive %v, deadline %v, done %v; want alive up to (at most 200ms before) the deadline and done after it",
			rl.Alive, rl.Deadline, rl.Done)
	}
	if d := rv.Deadline - rl.Deadline - by; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("late view's deadline is %v, want the lock's (%v) plus %v", rv.Deadline, rl.Deadline, by)
	}
	if rv.Alive <= rl.Deadline+by-200*time.Millisecond || rv.Done < rv.Deadline {
		t.Errorf("late view: alive %v, deadline %v, done %v; want it held until shortly before its deadline, done after it",
			rv.Alive, rv.Deadline, rv.Done)
	}
}
