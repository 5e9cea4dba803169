package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// TestClaims_FallDueInOrderAsLastArmed: armed requests fall due earliest
// first, one armed again falls due only at its new time, and one a call
// waits for does not fall due.
func TestClaims_FallDueInOrderAsLastArmed(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	cs := newClaims(s) // no reapDue runs for it: the test pops
	cs.orphan("a", "r1", "", 3*time.Second)
	cs.orphan("b", "r2", "", time.Second)
	cs.orphan("c", "r3", "", 2*time.Second)
	cl, err := cs.attach("a", "r1", "") // a call comes for r1 and goes
	if err != nil {
		t.Fatal(err)
	}
	cs.detach(cl, 10*time.Second, true)
	held, err := cs.attach("c", "r3", "") // a call waits for r3
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if c, wait := cs.nextDue(t0); c != nil || wait <= 0 || wait > time.Second {
		t.Fatalf("at the start: %v due, next in %v; want none, next within 1 s", c, wait)
	}
	if c, _ := cs.nextDue(t0.Add(1500 * time.Millisecond)); c == nil || c.key.name != "b" {
		t.Fatalf("after 1.5 s: %+v due, want b", c)
	}
	if c, wait := cs.nextDue(t0.Add(5 * time.Second)); c != nil || wait < 4*time.Second {
		t.Fatalf("after 5 s: %+v due, next in %v; want none (a was armed again, c has a call) until 10 s", c, wait)
	}
	if c, _ := cs.nextDue(t0.Add(11 * time.Second)); c == nil || c.key.name != "a" {
		t.Fatalf("after 11 s: %+v due, want a", c)
	}
	if c, wait := cs.nextDue(t0.Add(time.Hour)); c != nil || wait != time.Hour {
		t.Fatalf("once all fell due: %+v due, next in %v", c, wait)
	}
	cs.detach(held, time.Second, true)
	if c, _ := cs.nextDue(time.Now().Add(2 * time.Second)); c == nil || c.key.name != "c" {
		t.Fatalf("after its call left: %+v due, want c", c)
	}
}

// TestAcquire_GrantToACallerGoneIsHandedBack: a call whose stream broke
// but whose context has not ended yet (the API's Session stream ends its calls a
// few at a time) is not handed a grant: the grant is taken back with the
// request, and the lock does not stay held by nobody.
func TestAcquire_GrantToACallerGoneIsHandedBack(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	req := AcquireRequest{Name: "l", TTL: time.Minute, RequestID: "r", Gone: func() bool { return true }}
	if g, err := s.Acquire(context.Background(), req); err == nil {
		t.Fatalf("a caller that is gone was handed grant %+v", g)
	}
	deadline := time.Now().Add(callGrace + 5*time.Second)
	for s.fsm.Holds("l", "r", "") {
		if time.Now().After(deadline) {
			t.Fatal("the grant made for a caller that is gone is still held after the grace")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClaims_BoundCallsPerRequest: at most maxCallsPerRequest calls wait
// for one request; one more is refused as resource_exhausted until one
// leaves. The limits on waiters count requests, not calls, so without it
// a client could hold the node's goroutines with calls for one request.
func TestClaims_BoundCallsPerRequest(t *testing.T) {
	t.Parallel()
	cs := newClaims(openInProcess(t))
	var calls []*call
	for range maxCallsPerRequest {
		cl, err := cs.attach("a", "r", "")
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, cl)
	}
	if _, err := cs.attach("a", "r", ""); !errors.Is(err, fencelock.ErrResourceExhausted) {
		t.Fatalf("call %d for one request: %v, want resource_exhausted", maxCallsPerRequest+1, err)
	}
	if _, err := cs.attach("a", "r2", ""); err != nil {
		t.Fatalf("another request: %v", err)
	}
	cs.detach(calls[0], time.Second, false)
	if _, err := cs.attach("a", "r", ""); err != nil {
		t.Fatalf("after one left: %v", err)
	}
}
