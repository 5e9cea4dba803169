package server

import (
	"errors"
	"testing"
)

// TestWaiters_ACallThatCameOwnsTheRequest: a waiting call that gives up
// may take its request out of the queue only if no other call came for it
// since (a retry owns it then), and while it does, calls that come for the
// request are told to ask again instead of waiting for (or being handed) a
// grant the cancel ends.
func TestWaiters_ACallThatCameOwnsTheRequest(t *testing.T) {
	w := newWaiters()
	ch, seq, err := w.add("l", "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.arrived("l", "r"); err != nil { // a batched retry
		t.Fatal(err)
	}
	if w.beginCancel("l", "r", seq) {
		t.Fatal("the call that gave up may cancel although a retry came for its request since")
	}
	ch2, seq2, err := w.add("l", "r") // a waiting retry
	if err != nil {
		t.Fatal(err)
	}
	w.remove("l", "r", ch)
	if !w.beginCancel("l", "r", seq2) {
		t.Fatal("the latest call for the request, giving up, may not cancel it")
	}
	if _, _, err := w.add("l", "r"); !errors.Is(err, errBeingCancelled) {
		t.Fatalf("a call that waits while the request is being cancelled: %v, want errBeingCancelled", err)
	}
	if err := w.arrived("l", "r"); !errors.Is(err, errBeingCancelled) {
		t.Fatalf("a batched call while the request is being cancelled: %v, want errBeingCancelled", err)
	}
	w.endCancel("l", "r")
	w.remove("l", "r", ch2)
	if _, _, err := w.add("l", "r"); err != nil {
		t.Fatalf("after the cancel, a call for the request id: %v, want it to wait", err)
	}
	if err := w.arrived("other", "r"); err != nil {
		t.Fatalf("another lock's request with the same id: %v", err)
	}
}

// TestWaiters_ForgetRequestsNobodyWaitsFor: the counts of calls per request
// do not outlive the calls.
func TestWaiters_ForgetRequestsNobodyWaitsFor(t *testing.T) {
	w := newWaiters()
	for i := 0; i < 3; i++ {
		ch, seq, err := w.add("l", "r")
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			w.beginCancel("l", "r", seq)
			w.remove("l", "r", ch)
			w.endCancel("l", "r")
			continue
		}
		_ = w.arrived("l", "unwaited") // a batched call nobody waits for
		w.remove("l", "r", ch)
	}
	if len(w.came) != 0 || len(w.cancelling) != 0 || len(w.m) != 0 {
		t.Fatalf("left behind: came %v, cancelling %v, waiting %v", w.came, w.cancelling, w.m)
	}
}

// TestWaiters_UnclaimedCancelLooksAndMarksAtOnce: the node's drop of a
// queued request nobody claimed starts only if no call waits for it, and
// from then until it ends, calls that come for the request (waiting or
// batched) are told to ask again, so none is handed a grant the drop then
// ends.
func TestWaiters_UnclaimedCancelLooksAndMarksAtOnce(t *testing.T) {
	w := newWaiters()
	ch, _, err := w.add("l", "r")
	if err != nil {
		t.Fatal(err)
	}
	if w.beginUnclaimedCancel("l", "r") {
		t.Fatal("a drop began although a call waits for the request")
	}
	w.remove("l", "r", ch)
	if !w.beginUnclaimedCancel("l", "r") {
		t.Fatal("no call waits, yet the drop may not begin")
	}
	if _, _, err := w.add("l", "r"); !errors.Is(err, errBeingCancelled) {
		t.Fatalf("a call that waits during the drop: %v, want errBeingCancelled", err)
	}
	if err := w.arrived("l", "r"); !errors.Is(err, errBeingCancelled) {
		t.Fatalf("a batched call during the drop: %v, want errBeingCancelled", err)
	}
	w.endCancel("l", "r")
	if _, _, err := w.add("l", "r"); err != nil {
		t.Fatalf("a call after the drop: %v", err)
	}
}
