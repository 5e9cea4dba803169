package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/sequencer"
)

// After a pause of the process, the lease's deadline has passed but the
// timer that ends the lock's context has not run yet: Err must already say
// the lease may be lost, and Release must not count the lock as held.
func TestLock_ErrReadsTheDeadline(t *testing.T) {
	t.Parallel()
	c, err := New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := &fencelockv1.Grant{Name: "l", Token: 7, LeaseId: string(fencelock.NewLeaseID()), Ttl: durationpb.New(time.Hour)}
	l := c.newLock(g, time.Now(), time.Now(), time.Minute, false)
	defer func() {
		l.mu.Lock()
		l.timer.Stop()
		l.renewal.Stop()
		l.mu.Unlock()
	}()
	if err := l.Err(); err != nil {
		t.Fatalf("Err of a fresh lock = %v", err)
	}
	l.mu.Lock()
	l.deadline = time.Now().Add(-time.Millisecond) // passed; the timer is still an hour away
	l.mu.Unlock()
	if err := l.Err(); !errors.Is(err, fencelock.ErrLeaseExpired) {
		t.Fatalf("Err past the deadline, before the timer ran = %v; want ErrLeaseExpired", err)
	}
	if l.Context().Err() == nil {
		t.Fatal("the lock's context still looks alive after Err reported the loss")
	}
}

// A safety margin that would end every lock before its first renewal (at
// TTL/3) is refused before anything is sent; so is a TTL too short for the
// default margin, as a TTL.
func TestAcquire_MarginLeavesRoomForARenewal(t *testing.T) {
	t.Parallel()
	c, err := New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	if _, err := c.Acquire(ctx, "l", WithTTL(3*time.Second), WithSafetyMargin(2*time.Second)); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("margin 2s of ttl 3s = %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Acquire(ctx, "l", WithTTL(60*time.Millisecond)); !errors.Is(err, fencelock.ErrInvalidTTL) {
		t.Errorf("ttl 60ms with the default margin = %v, want ErrInvalidTTL", err)
	}
}

// TestOnRenewGrid: a renewal is put off to the next step of its client's
// grid, by more than nothing and at most renewGrid, so that renewals due
// within one step fire together; clients made at other times have grids of
// their own.
func TestOnRenewGrid(t *testing.T) {
	t.Parallel()
	born := time.Now()
	for _, off := range []time.Duration{0, time.Millisecond, renewGrid - time.Nanosecond, renewGrid, 3*renewGrid + 7*time.Millisecond} {
		now := born.Add(off)
		for _, d := range []time.Duration{time.Second / 3, 10 * time.Second / 3} {
			got := onRenewGrid(born, now, d)
			at := now.Add(got).Sub(born)
			if got <= d || got > d+renewGrid || at%renewGrid != 0 {
				t.Errorf("onRenewGrid(+%v, %v) = %v: fires at +%v, want after %v, within %v, on the grid", off, d, got, at, d, renewGrid)
			}
		}
	}
	a, b := born.Add(time.Millisecond), born.Add(renewGrid-time.Millisecond)
	if a.Add(onRenewGrid(born, a, time.Second)) != b.Add(onRenewGrid(born, b, time.Second)) {
		t.Error("two renewals due within one grid step fire apart")
	}
	other := born.Add(renewGrid / 2)
	if at := a.Add(onRenewGrid(other, a, time.Second)).Sub(born); at%renewGrid == 0 {
		t.Errorf("a client made %v later renews on the first client's grid (+%v)", renewGrid/2, at)
	}
}

// TestLock_SignsOnlyOnceSequencerIsRead: a grant without WithSequencer
// carries no sequencer, and its renewals bring none while Sequencer is not
// called; the first call gets one that covers the lease, and from then on
// each renewal brings a new one.
func TestLock_SignsOnlyOnceSequencerIsRead(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	c := quietTestClient(t, srv.Addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Acquire(ctx, "seq", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if held := heldSequencer(l); held != "" {
		t.Fatalf("a grant without WithSequencer carried sequencer %q", held)
	}
	time.Sleep(1500 * time.Millisecond) // four renewals
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	if held := heldSequencer(l); held != "" {
		t.Fatal("renewals of a lock whose Sequencer was never read brought sequencers")
	}
	// Callers that ask together share one renewal (the renewal timer
	// may add one).
	before := testproc.Metric(t, srv.Addr, "fencelock_renewals_total")
	var wg sync.WaitGroup
	seqs := make([]string, 8)
	for i := range seqs {
		wg.Go(func() { seqs[i] = l.Sequencer() })
	}
	wg.Wait()
	if n := testproc.Metric(t, srv.Addr, "fencelock_renewals_total") - before; n < 1 || n > 2 {
		t.Errorf("%d callers asking for a sequencer together made %v renewals; want 1 (2 with the timer's)", len(seqs), n)
	}
	got := seqs[0]
	for _, seq := range seqs {
		if end := leaseEnd(t, seq); !end.After(time.Now()) {
			t.Fatalf("Sequencer() = one whose lease ended at %v, want one covering the lease", end)
		}
	}
	time.Sleep(1200 * time.Millisecond)
	if now := heldSequencer(l); now == got || !leaseEnd(t, now).After(time.Now()) {
		t.Fatal("after Sequencer was read, renewals did not bring sequencers that cover the lease")
	}
}

// TestLock_WithSequencer: the grant brings its sequencer, for this lock
// and token, and renewals bring new ones before Sequencer is called.
func TestLock_WithSequencer(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	c := quietTestClient(t, srv.Addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Acquire(ctx, "seq", WithTTL(time.Second), WithSequencer())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	first := heldSequencer(l)
	if s, _, _, err := sequencer.Parse(first); err != nil || s.Lock != "seq" || s.Token != l.Token() {
		t.Fatalf("the grant's sequencer %q: %+v, %v; want one for lock seq, token %d", first, s, err, l.Token())
	}
	time.Sleep(1200 * time.Millisecond) // three renewals
	if now := heldSequencer(l); now == first || !leaseEnd(t, now).After(time.Now()) {
		t.Fatal("renewals of a lock acquired WithSequencer did not bring sequencers that cover the lease")
	}
}

// heldSequencer is l's latest sequencer, without asking for one.
func heldSequencer(l *Lock) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sequencer
}

// leaseEnd is the lease end that sequencer text states.
func leaseEnd(t *testing.T, text string) time.Time {
	t.Helper()
	s, _, _, err := sequencer.Parse(text)
	if err != nil {
		t.Fatalf("sequencer %q: %v", text, err)
	}
	return s.LeaseEnd
}
