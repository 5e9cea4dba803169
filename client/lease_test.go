package client

import (
	"context"
	"errors"
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
	c, err := New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := &fencelockv1.Grant{Name: "l", Token: 7, LeaseId: string(fencelock.NewLeaseID()), Ttl: durationpb.New(time.Hour)}
	l := c.newLock(g, time.Now(), time.Now(), time.Minute)
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

// TestLock_RenewalsSignOnlyOnceSequencerIsRead: a lock whose Sequencer was
// never called renews without new sequencers; the first call, once the
// grant's sequencer no longer covers the lease, gets one that does, and
// from then on each renewal brings a new one.
func TestLock_RenewalsSignOnlyOnceSequencerIsRead(t *testing.T) {
	srv := testproc.StartServer(t)
	c := quietTestClient(t, srv.Addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Acquire(ctx, "seq", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	held := func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.sequencer
	}
	leaseEnd := func(text string) time.Time {
		t.Helper()
		s, _, _, err := sequencer.Parse(text)
		if err != nil {
			t.Fatalf("sequencer %q: %v", text, err)
		}
		return s.LeaseEnd
	}
	first := held()
	time.Sleep(1500 * time.Millisecond) // four renewals
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	if held() != first {
		t.Fatal("renewals of a lock whose Sequencer was never read brought new sequencers")
	}
	if end := leaseEnd(first); end.After(time.Now()) {
		t.Fatalf("the grant's sequencer covers the lease until %v, past its first TTL", end)
	}
	got := l.Sequencer()
	if end := leaseEnd(got); !end.After(time.Now()) {
		t.Fatalf("Sequencer() = one whose lease ended at %v, want one covering the lease", end)
	}
	time.Sleep(1200 * time.Millisecond)
	if now := held(); now == got || !leaseEnd(now).After(time.Now()) {
		t.Fatal("after Sequencer was read, renewals did not bring sequencers that cover the lease")
	}
}
