package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
)

// TestApply_givesUpAfterApplyTimeoutWithoutADeadline: a proposal whose
// entry does not finish applying (here the FSM's goroutine is held up
// handing the grant to its calls) fails with ErrUnavailable after
// ApplyTimeout when the caller's context has no deadline.
func TestApply_givesUpAfterApplyTimeoutWithoutADeadline(t *testing.T) {
	t.Parallel()
	const applyTimeout = 100 * time.Millisecond
	s := openInProcessWith(t, func(cfg *Config) { cfg.ApplyTimeout = applyTimeout })
	acquire := fsm.Acquire{Name: "x", RequestID: "r1", LeaseID: fencelock.NewLeaseID(), TTL: int64(10 * time.Second)}

	s.claims.mu.Lock() // the grant's delivery to its calls waits for it
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), acquire)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		s.claims.mu.Unlock()
		t.Fatalf("Apply without a deadline still waits, 10 s after its ApplyTimeout (%v)", applyTimeout)
	}
	took := time.Since(start)
	s.claims.mu.Unlock()
	if !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply of an entry held up = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if took < applyTimeout {
		t.Fatalf("Apply gave up after %v, before ApplyTimeout (%v)", took, applyTimeout)
	}
	res, err := s.Apply(context.Background(), acquire) // the same request: it was granted meanwhile
	if err != nil || res.Grant == nil {
		t.Fatalf("Apply once the entry applied = %+v, %v; want the request's grant", res, err)
	}
}

// TestApply_waitsForASlot: with maxProposals proposals under way, a
// proposal waits for one of them to end, as long as its caller does, and
// proposes nothing if the caller gives up first; each proposal gives its
// slot back.
func TestApply_waitsForASlot(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	for range maxProposals {
		s.slots <- struct{}{} // proposals under way, as a stalled disk leaves them
	}
	acquire := fsm.Acquire{Name: "x", RequestID: "r1", LeaseID: fencelock.NewLeaseID(), TTL: int64(10 * time.Second)}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := s.Apply(ctx, acquire)
	cancel()
	if !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply with every slot taken = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if s.fsm.Holds("x", "r1", "") {
		t.Fatal("a proposal that found no slot was applied")
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), acquire)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // it waits for a slot
	<-s.slots                         // a proposal under way ends
	if err := <-done; err != nil {
		t.Fatalf("Apply once a slot was free = %v", err)
	}
	if !s.fsm.Holds("x", "r1", "") {
		t.Fatal("the proposal that got a slot was not applied")
	}
	for range maxProposals - 1 {
		<-s.slots
	}
	for i := range 20 {
		if _, err := s.Apply(context.Background(), fsm.Release{Name: "x", LeaseID: acquire.LeaseID, Token: fencelock.Token(i)}); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	if n := len(s.slots); n != 0 {
		t.Fatalf("%d slots still taken after every proposal ended", n)
	}
}

// TestDeadlines: the callers of one quarter of d share a channel, which
// closes no sooner than d after each of them asked; a later caller gets a
// channel of its own.
func TestDeadlines(t *testing.T) {
	t.Parallel()
	const d = 200 * time.Millisecond
	dl := deadlines{d: d}
	t0 := time.Now()
	a := dl.after(t0)
	if b := dl.after(time.Now()); b != a {
		t.Fatal("callers of the same moment got channels of their own")
	}
	time.Sleep(d / 2)
	t1 := time.Now()
	c := dl.after(t1)
	if c == a {
		t.Fatal("a caller half of d later shares the first channel, which closes before d after it asked")
	}
	<-a
	if took := time.Since(t0); took < d {
		t.Fatalf("the first channel closed %v after it was asked for, before d (%v)", took, d)
	}
	select {
	case <-c:
		t.Fatal("the later channel closed with the first")
	default:
	}
	<-c
	if took := time.Since(t1); took < d {
		t.Fatalf("the later channel closed %v after it was asked for, before d (%v)", took, d)
	}
}
