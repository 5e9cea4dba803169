package fsm

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// The same request id on two locks is two requests: a retry on the first
// lock still gets its grant after the id was used on a second one.
func TestFSM_RequestIDIsPerLock(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ga := h.apply(acq("a", "same", "La", false)).Grant
	if gb := h.apply(acq("b", "same", "Lb", false)).Grant; gb == nil {
		t.Fatal("the id on a second lock was not granted")
	}
	if r := h.apply(acq("a", "same", "La", false)); r.Err != nil || r.Grant == nil || r.Grant.Token != ga.Token {
		t.Errorf("retry on the first lock: got %+v, want its grant, token %d", r, ga.Token)
	}
}

// A cancel that cancels nothing (the grant had ended) fails with
// ErrNotFound and keeps the record: a late retry learns that its grant
// ended instead of being granted anew for nobody.
func TestFSM_CancelOfNothingKeepsTheRecord(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.apply(Command{Payload: Expire{Name: "a", Token: g.Token}})
	if r := h.apply(Command{Payload: CancelWait{Name: "a", RequestID: "r1"}}); !errors.Is(r.Err, fencelock.ErrNotFound) {
		// The lock has no entry any more.
		t.Fatalf("cancel of an ended grant: %+v, want ErrNotFound", r)
	}
	// With a lock entry (another holder), the cancel finds the lock but not
	// the request.
	h.apply(acq("a", "other", "Lo", false))
	if r := h.apply(Command{Payload: CancelWait{Name: "a", RequestID: "r1"}}); !errors.Is(r.Err, fencelock.ErrNotFound) {
		t.Fatalf("cancel of an ended grant: %+v, want ErrNotFound", r)
	}
	if r := h.apply(acq("a", "r1", "L1", true)); !errors.Is(r.Err, fencelock.ErrNotHolder) {
		t.Errorf("late retry: got %+v, want ErrNotHolder (its grant ended)", r)
	}
}

// A take-back (a plain cancel that ends the request's grant) forgets the
// record that the end wrote: the caller may ask again with the same id and
// gets a new grant.
func TestFSM_TakeBackForgetsTheEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(acq("a", "r1", "L1", false))
	if r := h.apply(Command{Payload: CancelWait{Name: "a", RequestID: "r1"}}); r.Err != nil {
		t.Fatalf("take-back of a grant: %v", r.Err)
	}
	if r := h.apply(acq("a", "r1", "L1b", false)); r.Grant == nil || r.Grant.LeaseID != "L1b" {
		t.Errorf("asking again after the take-back: %+v, want a new grant", r)
	}
}

// A grant is found through the lock table however long ago it was made.
func TestFSM_FindsAGrantOlderThanTheWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t) // a window of 1 minute
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.now += int64(5 * time.Minute)
	h.apply(acq("other", "x", "Lx", false)) // prunes
	if r := h.apply(acq("a", "r1", "L1", false)); r.Grant == nil || r.Grant.Token != g.Token {
		t.Errorf("retry of a grant older than the window: %+v, want its grant, token %d", r, g.Token)
	}
}

// A request whose grant ended is remembered for EndedWindow after the end,
// however long it was held: a late retry within it learns that its grant
// ended; one after it is a new request.
func TestFSM_RemembersEndedGrantsForEndedWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.f = New(10*time.Minute, nil)
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.now += int64(3 * time.Minute) // held for longer than EndedWindow
	h.apply(Command{Payload: Release{Name: "a", LeaseID: g.LeaseID, Token: g.Token}})
	h.now += int64(EndedWindow / 2)
	if r := h.apply(acq("a", "r1", "L1", false)); !errors.Is(r.Err, fencelock.ErrNotHolder) {
		t.Fatalf("retry %v after the end: %+v, want NotHolder (its grant ended)", EndedWindow/2, r)
	}
	h.now += int64(EndedWindow)
	if r := h.apply(acq("a", "r1", "L1b", false)); r.Grant == nil || r.Grant.LeaseID != "L1b" {
		t.Errorf("retry %v after the end: %+v, want a new grant", EndedWindow*3/2, r)
	}
}

// At a steady rate of grants that end at once, the window holds what
// EndedWindow of them leaves, not the whole dedupe window's.
func TestFSM_WindowHoldsOnlyRecentEnds(t *testing.T) {
	t.Parallel()
	const pairs, step = 3000, 100 * time.Millisecond // 5 minutes of grants
	want := int(EndedWindow/step) + 1
	h := newHarness(t)
	h.f = New(10*time.Minute, nil)
	for i := range pairs {
		rid := fmt.Sprintf("r%d", i)
		g := h.apply(acq("a", rid, "L"+rid, false)).Grant
		h.apply(Command{Payload: Release{Name: "a", LeaseID: g.LeaseID, Token: g.Token}})
		h.now += int64(step)
	}
	// (Each entry also moves command time on by a millisecond.)
	if got := h.f.requests.len(); got > want || got < want*9/10 {
		t.Errorf("the window holds %d request ids after %d grants over %v, want about %d", got, pairs, pairs*step, want)
	}
}

// A snapshot of another format version does not restore, and changes
// nothing.
func TestFSM_RestoreRefusesAnotherFormatVersion(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(acq("a", "r1", "L1", false))
	for _, snap := range []string{
		`{"version":2,"applied":5,"locks":[],"requests":[],"expired":[],"last_now":1}`,
		`{"applied":5,"locks":[],"requests":[],"expired":[],"last_now":1}`,
	} {
		if err := h.f.Restore(io.NopCloser(strings.NewReader(snap))); err == nil {
			t.Errorf("restored %s", snap)
		}
		if _, ok := h.f.Get("a"); !ok || h.f.AppliedIndex() != h.index {
			t.Errorf("a refused restore of %s changed the state: applied %d", snap, h.f.AppliedIndex())
		}
	}
}
