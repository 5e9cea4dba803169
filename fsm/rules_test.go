package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

func setRules(v uint64) Command { return Command{Op: OpSetRules, Token: fencelock.Token(v)} }

// A request id reused on a second lock: under RulesV1 it replaces the first
// lock's record, so a retry on the first lock is refused by its own grant;
// from the OpSetRules entry on, each lock keeps its own record.
func TestFSM_RulesV2RemembersARequestPerLock(t *testing.T) {
	for _, v := range []uint64{RulesV1, RulesV2} {
		h := newHarness(t)
		if r := h.apply(setRules(v)); r.Err != nil {
			t.Fatalf("set rules %d: %v", v, r.Err)
		}
		if got := h.f.Rules(); got != v {
			t.Fatalf("rules after setting %d: %d", v, got)
		}
		ga := h.apply(acq("a", "same", "La", false)).Grant
		if gb := h.apply(acq("b", "same", "Lb", false)).Grant; gb == nil {
			t.Fatalf("rules %d: the id on a second lock was not granted", v)
		}
		retry := h.apply(acq("a", "same", "La", false))
		switch v {
		case RulesV1:
			if !errors.Is(retry.Err, fencelock.ErrLockHeld) {
				t.Errorf("rules 1: retry on the first lock: got %+v, want LockHeld (its record was replaced)", retry)
			}
		case RulesV2:
			if retry.Err != nil || retry.Grant == nil || retry.Grant.Token != ga.Token {
				t.Errorf("rules 2: retry on the first lock: got %+v, want its grant, token %d", retry, ga.Token)
			}
		}
	}
}

// Records written before the switch are still found after it, under the id
// alone: a retry across the switch gets its grant, and a queued request
// keeps its place.
func TestFSM_RulesV2FindsRecordsFromBefore(t *testing.T) {
	h := newHarness(t)
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.apply(acq("a", "w1", "Lw", true))
	h.apply(setRules(RulesV2))
	if r := h.apply(acq("a", "r1", "L1", false)); r.Grant == nil || r.Grant.Token != g.Token {
		t.Fatalf("retry across the switch: got %+v, want token %d", r, g.Token)
	}
	if r := h.apply(acq("a", "w1", "Lw", true)); !r.Queued {
		t.Fatalf("queued retry across the switch: got %+v, want queued", r)
	}
	if l, _ := h.f.Get("a"); len(l.Waiters) != 1 {
		t.Fatalf("waiters after the retry: %+v, want one", l.Waiters)
	}
	// w1 is granted after the switch: its record moves to the new key, and
	// the old one goes.
	h.apply(Command{Op: OpRelease, Name: "a", LeaseID: g.LeaseID, Token: g.Token})
	reqs, _ := windowAt(h.f)
	var keys []string
	for _, r := range reqs {
		keys = append(keys, r.Key)
	}
	if got := strings.Join(keys, ","); got != "r1,a\x00w1" {
		t.Errorf("window keys: %q, want r1 and a\\x00w1", got)
	}
	w := h.apply(acq("a", "w1", "Lw", true))
	if w.Grant == nil || w.Grant.LeaseID != "Lw" {
		t.Errorf("retry of w1 after its grant: got %+v, want its grant", w)
	}
}

// A cancel that cancels nothing (the grant had ended): under RulesV1 it
// forgets the request, and a late retry is granted anew, for nobody; under
// RulesV2 the retry learns that its grant ended.
func TestFSM_RulesV2CancelOfNothingKeepsTheRecord(t *testing.T) {
	for _, v := range []uint64{RulesV1, RulesV2} {
		h := newHarness(t)
		h.apply(setRules(v))
		g := h.apply(acq("a", "r1", "L1", false)).Grant
		h.apply(Command{Op: OpExpire, Name: "a", Token: g.Token})
		if r := h.apply(Command{Op: OpCancelWait, Name: "a", RequestID: "r1"}); !errors.Is(r.Err, fencelock.ErrNotFound) {
			// The lock has no entry any more.
			t.Fatalf("rules %d: cancel of an ended grant: %+v, want ErrNotFound", v, r)
		}
		// With a lock entry (another holder), the cancel finds the lock
		// but not the request.
		h.apply(acq("a", "other", "Lo", false))
		if r := h.apply(Command{Op: OpCancelWait, Name: "a", RequestID: "r1"}); !errors.Is(r.Err, fencelock.ErrNotFound) {
			t.Fatalf("rules %d: cancel of an ended grant: %+v, want ErrNotFound", v, r)
		}
		retry := h.apply(acq("a", "r1", "L1", true))
		switch v {
		case RulesV1:
			if !retry.Queued {
				t.Errorf("rules 1: late retry: got %+v, want queued anew (the record was forgotten)", retry)
			}
		case RulesV2:
			if !errors.Is(retry.Err, fencelock.ErrNotHolder) {
				t.Errorf("rules 2: late retry: got %+v, want ErrNotHolder (its grant ended)", retry)
			}
		}
	}
}

// The cancel of an unclaimed request (Wait set): under RulesV2 it takes the
// request out of the queue only; a grant made meanwhile stands.
func TestFSM_RulesV2UnclaimedCancelNeverEndsAGrant(t *testing.T) {
	for _, v := range []uint64{RulesV1, RulesV2} {
		h := newHarness(t)
		h.apply(setRules(v))
		g := h.apply(acq("a", "r1", "L1", false)).Grant
		h.apply(acq("a", "w1", "Lw", true))
		h.apply(acq("a", "w2", "Lw2", true))
		// Queued: the cancel takes it out in either rules.
		if r := h.apply(Command{Op: OpCancelWait, Name: "a", RequestID: "w2", Wait: true}); r.Err != nil || h.f.Queued("a", "w2") {
			t.Fatalf("rules %d: unclaimed cancel of a queued request: %+v, still queued %v", v, r, h.f.Queued("a", "w2"))
		}
		h.apply(Command{Op: OpRelease, Name: "a", LeaseID: g.LeaseID, Token: g.Token}) // w1 granted
		r := h.apply(Command{Op: OpCancelWait, Name: "a", RequestID: "w1", Wait: true})
		l, _ := h.f.Get("a")
		switch v {
		case RulesV1:
			if r.Err != nil || l.Holder != nil {
				t.Errorf("rules 1: unclaimed cancel of a granted request: %+v, holder %+v; want the grant ended", r, l.Holder)
			}
		case RulesV2:
			if !errors.Is(r.Err, fencelock.ErrNotFound) || l.Holder == nil || l.Holder.RequestID != "w1" {
				t.Errorf("rules 2: unclaimed cancel of a granted request: %+v, holder %+v; want ErrNotFound and w1 still holding", r, l.Holder)
			}
		}
	}
}

// The rules survive a snapshot; a snapshot without them (every snapshot of
// earlier releases) restores as RulesV1; they never go down; and rules newer
// than this build are refused.
func TestFSM_RulesInSnapshotsAndNeverLowered(t *testing.T) {
	h := newHarness(t)
	if r := h.apply(setRules(MaxRules + 1)); r.Err == nil || h.f.Rules() != RulesV1 {
		t.Fatalf("rules newer than the build: %+v, rules %d; want an error and rules 1", r, h.f.Rules())
	}
	v1 := bytes.NewBuffer(snapshotBytes(t, h.f))
	if strings.Contains(v1.String(), `"rules"`) {
		t.Errorf("a rules 1 snapshot names its rules (earlier releases write none): %s", v1.String())
	}
	h.apply(setRules(RulesV2))
	h.apply(setRules(RulesV1))
	if got := h.f.Rules(); got != RulesV2 {
		t.Fatalf("rules after setting 2 then 1: %d, want 2", got)
	}
	v2 := bytes.NewBuffer(snapshotBytes(t, h.f))
	for _, c := range []struct {
		snap string
		want uint64
	}{{v2.String(), RulesV2}, {v1.String(), RulesV1}} {
		f := New(0, nil)
		f.rules.Store(RulesV2) // Restore replaces, never merges
		if err := f.Restore(io.NopCloser(strings.NewReader(c.snap))); err != nil {
			t.Fatal(err)
		}
		if got := f.Rules(); got != c.want {
			t.Errorf("rules restored from %s: %d, want %d", c.snap, got, c.want)
		}
	}
}

// A cancel after the switch of a request recorded before it forgets that
// record: the grant it ended is not held against a retry, which is a new
// request, as it would be under either rules alone.
func TestFSM_RulesV2CancelForgetsARecordFromBefore(t *testing.T) {
	h := newHarness(t)
	h.apply(acq("a", "r1", "L1", false))
	h.apply(setRules(RulesV2))
	if r := h.apply(Command{Op: OpCancelWait, Name: "a", RequestID: "r1"}); r.Err != nil {
		t.Fatalf("cancel of a grant from before the switch: %v", r.Err)
	}
	if r := h.apply(acq("a", "r1", "L1b", false)); r.Grant == nil || r.Grant.LeaseID != "L1b" {
		t.Errorf("retry after the cancel: %+v, want a new grant", r)
	}
}

// A request id with a zero byte, which releases before rules 2 accepted,
// reads as a rules 2 key: "a\x00r" on lock a would pass for request r. The
// switch forgets such records.
func TestFSM_RulesV2ForgetsAmbiguousRecords(t *testing.T) {
	h := newHarness(t)
	g := h.apply(acq("a", "a\x00r", "L1", false)).Grant
	h.apply(setRules(RulesV2))
	r := h.apply(acq("a", "r", "L2", false))
	if r.Grant != nil {
		t.Fatalf("request r on a got the grant of request \"a\\x00r\" (token %d): %+v", g.Token, r.Grant)
	}
	if !errors.Is(r.Err, fencelock.ErrLockHeld) {
		t.Errorf("request r on a held lock: %v, want LockHeld", r.Err)
	}
}

// A snapshot of rules newer than this build does not restore.
func TestFSM_RestoreRefusesNewerRules(t *testing.T) {
	f := New(0, nil)
	snap := `{"applied":5,"locks":[],"requests":[],"expired":[],"last_now":1,"rules":99}`
	if err := f.Restore(io.NopCloser(strings.NewReader(snap))); err == nil {
		t.Fatal("restored a snapshot of rules 99")
	}
	if f.AppliedIndex() != 0 || f.Rules() != RulesV1 {
		t.Errorf("a refused restore changed the state: applied %d, rules %d", f.AppliedIndex(), f.Rules())
	}
}

// Under RulesV3 a grant is found through the lock table however long ago it
// was made; under RulesV2 its record left the window after the window.
func TestFSM_RulesV3FindsAGrantOlderThanTheWindow(t *testing.T) {
	for _, v := range []uint64{RulesV2, RulesV3} {
		h := newHarness(t) // a window of 1 minute
		h.apply(setRules(v))
		g := h.apply(acq("a", "r1", "L1", false)).Grant
		h.now += int64(5 * time.Minute)
		h.apply(acq("other", "x", "Lx", false)) // prunes
		r := h.apply(acq("a", "r1", "L1", false))
		switch v {
		case RulesV2:
			if !errors.Is(r.Err, fencelock.ErrLockHeld) {
				t.Errorf("rules 2: retry of a grant older than the window: %+v, want LockHeld", r)
			}
		case RulesV3:
			if r.Grant == nil || r.Grant.Token != g.Token {
				t.Errorf("rules 3: retry of a grant older than the window: %+v, want its grant, token %d", r, g.Token)
			}
		}
	}
}

// Under RulesV3 a request whose grant ended is remembered for EndedWindow
// after the end, not for the window after the grant: a late retry within it
// learns that its grant ended; one after it is a new request.
func TestFSM_RulesV3RemembersEndedGrantsForEndedWindow(t *testing.T) {
	for _, v := range []uint64{RulesV2, RulesV3} {
		h := newHarness(t)
		h.f = New(10*time.Minute, nil)
		h.apply(setRules(v))
		g := h.apply(acq("a", "r1", "L1", false)).Grant
		h.now += int64(3 * time.Minute) // held for longer than EndedWindow
		h.apply(Command{Op: OpRelease, Name: "a", LeaseID: g.LeaseID, Token: g.Token})
		h.now += int64(EndedWindow / 2)
		if r := h.apply(acq("a", "r1", "L1", false)); !errors.Is(r.Err, fencelock.ErrNotHolder) {
			t.Fatalf("rules %d: retry %v after the end: %+v, want NotHolder (its grant ended)", v, EndedWindow/2, r)
		}
		h.now += int64(EndedWindow)
		r := h.apply(acq("a", "r1", "L1b", false))
		switch v {
		case RulesV2: // 4.5 minutes after the grant: still in the window
			if !errors.Is(r.Err, fencelock.ErrNotHolder) {
				t.Errorf("rules 2: retry within the window: %+v, want NotHolder", r)
			}
		case RulesV3:
			if r.Grant == nil || r.Grant.LeaseID != "L1b" {
				t.Errorf("rules 3: retry %v after the end: %+v, want a new grant", EndedWindow*3/2, r)
			}
		}
	}
}

// The point of RulesV3: at a steady rate of grants that end at once, the
// window holds what EndedWindow of them leaves, not the whole window's.
func TestFSM_RulesV3WindowHoldsOnlyRecentEnds(t *testing.T) {
	const pairs, step = 3000, 100 * time.Millisecond // 5 minutes of grants
	want := map[uint64]int{RulesV2: pairs, RulesV3: int(EndedWindow/step) + 1}
	for _, v := range []uint64{RulesV2, RulesV3} {
		h := newHarness(t)
		h.f = New(10*time.Minute, nil)
		h.apply(setRules(v))
		for i := range pairs {
			rid := fmt.Sprintf("r%d", i)
			g := h.apply(acq("a", rid, "L"+rid, false)).Grant
			h.apply(Command{Op: OpRelease, Name: "a", LeaseID: g.LeaseID, Token: g.Token})
			h.now += int64(step)
		}
		// (Each entry also moves command time on by a millisecond.)
		if got := h.f.requests.len(); got > want[v] || got < want[v]*9/10 {
			t.Errorf("rules %d: the window holds %d request ids after %d grants over %v, want about %d",
				v, got, pairs, pairs*step, want[v])
		}
	}
}

// Across the switch to RulesV3: a request queued before it keeps its place
// once its record has left the window, and one granted before it keeps its
// grant; a request whose grant ended before it is still known.
func TestFSM_RulesV3KeepsWhatCameBefore(t *testing.T) {
	h := newHarness(t)
	h.apply(setRules(RulesV2))
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.apply(acq("a", "w1", "Lw1", true))
	e := h.apply(acq("b", "e1", "Le1", false)).Grant
	h.apply(Command{Op: OpRelease, Name: "b", LeaseID: e.LeaseID, Token: e.Token})
	h.apply(setRules(RulesV3))
	if r := h.apply(acq("b", "e1", "Le1", false)); !errors.Is(r.Err, fencelock.ErrNotHolder) {
		t.Errorf("retry of a grant that ended before the switch: %+v, want NotHolder", r)
	}
	h.now += int64(5 * time.Minute)
	h.apply(acq("other", "x", "Lx", false)) // prunes every record from before
	if r := h.apply(acq("a", "w1", "Lw1", true)); !r.Queued {
		t.Errorf("retry of a request queued before the switch: %+v, want queued", r)
	}
	if l, _ := h.f.Get("a"); len(l.Waiters) != 1 {
		t.Errorf("waiters: %+v, want w1 alone", l.Waiters)
	}
	if r := h.apply(acq("a", "r1", "L1", false)); r.Grant == nil || r.Grant.Token != g.Token {
		t.Errorf("retry of a grant made before the switch: %+v, want token %d", r, g.Token)
	}
}

// Under RulesV3 a take-back (a cancel that ends the request's grant)
// forgets the record that the end wrote: the caller may ask again with the
// same id and gets a new grant, as under the earlier rules.
func TestFSM_RulesV3TakeBackForgetsTheEnd(t *testing.T) {
	for _, from := range []uint64{RulesV1, RulesV2, RulesV3} {
		h := newHarness(t)
		h.apply(setRules(from))
		h.apply(acq("a", "r1", "L1", false))
		h.apply(setRules(RulesV3))
		if r := h.apply(Command{Op: OpCancelWait, Name: "a", RequestID: "r1"}); r.Err != nil {
			t.Fatalf("from rules %d: take-back of a grant: %v", from, r.Err)
		}
		if r := h.apply(acq("a", "r1", "L1b", false)); r.Grant == nil || r.Grant.LeaseID != "L1b" {
			t.Errorf("from rules %d: asking again after the take-back: %+v, want a new grant", from, r)
		}
	}
}

// The switch to RulesV3 keeps a grant that ended shortly before it, however
// long ago it was made: the end counts, not the grant.
func TestFSM_RulesV3SwitchKeepsRecentEnds(t *testing.T) {
	h := newHarness(t)
	h.f = New(10*time.Minute, nil)
	h.apply(setRules(RulesV2))
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.now += int64(3 * time.Minute)
	h.apply(Command{Op: OpRelease, Name: "a", LeaseID: g.LeaseID, Token: g.Token})
	h.apply(setRules(RulesV3))
	if r := h.apply(acq("a", "r1", "L1", false)); !errors.Is(r.Err, fencelock.ErrNotHolder) {
		t.Errorf("retry right after the switch of a grant that ended just before it: %+v, want NotHolder", r)
	}
	h.now += int64(2 * EndedWindow)
	if r := h.apply(acq("a", "r1", "L1b", false)); r.Grant == nil {
		t.Errorf("retry %v after the switch: %+v, want a new grant", 2*EndedWindow, r)
	}
}
