package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
)

// recorder is an Observer that remembers what it was told.
type recorder struct {
	granted []string
	ended   []fencelock.Token
}

func (r *recorder) Granted(_ fencelock.LockName, h Holder, _ time.Duration) {
	r.granted = append(r.granted, h.RequestID)
}
func (r *recorder) Ended(_ fencelock.LockName, t fencelock.Token, _ time.Duration) {
	r.ended = append(r.ended, t)
}
func (r *recorder) Restored() {}

// harness applies commands at increasing log indexes.
type harness struct {
	tb    testing.TB
	f     *FSM
	obs   *recorder
	index uint64
	now   int64
}

func newHarness(tb testing.TB) *harness {
	obs := &recorder{}
	return &harness{tb: tb, f: New(time.Minute, obs), obs: obs, index: 10, now: int64(time.Hour)}
}

func (h *harness) apply(c Command) Result {
	h.tb.Helper()
	h.index++
	h.now += int64(time.Millisecond)
	if c.Now == 0 {
		c.Now = h.now
	}
	return h.f.Apply(&raft.Log{Index: h.index, Data: c.Encode()}).(Result)
}

func acq(name, rid, lease string, wait bool) Command {
	return Command{Payload: Acquire{Name: fencelock.LockName(name), RequestID: rid, LeaseID: fencelock.LeaseID(lease), TTL: int64(time.Second), Wait: wait, Holder: "h-" + rid}}
}

func TestFSM_AcquireGrantsAndTryLockRefuses(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.apply(acq("a", "r1", "L1", false))
	if r.Err != nil || r.Grant == nil {
		t.Fatalf("first acquire: got %+v, want a grant", r)
	}
	if r.Grant.Token != fencelock.Token(h.index) {
		t.Errorf("token is %d, want the entry's index %d", r.Grant.Token, h.index)
	}
	r2 := h.apply(acq("a", "r2", "L2", false))
	var held *fencelock.LockHeldError
	if !errors.As(r2.Err, &held) || !errors.Is(r2.Err, fencelock.ErrLockHeld) {
		t.Fatalf("try-lock on a held lock: got %v, want LockHeldError", r2.Err)
	}
	if held.Token != r.Grant.Token || held.Holder != "h-r1" {
		t.Errorf("LockHeldError names token %d holder %q, want %d %q", held.Token, held.Holder, r.Grant.Token, "h-r1")
	}
	l, _ := h.f.Get("a")
	if l.Holder.LeaseID != "L1" || len(l.Waiters) != 0 {
		t.Errorf("lock table changed by a refused try-lock: %+v", l)
	}
}

func TestFSM_FIFOQueueGrantedInReleasingEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := h.apply(acq("a", "r1", "L1", false)).Grant
	for _, rid := range []string{"w1", "w2", "w3"} {
		if r := h.apply(acq("a", rid, "L"+rid, true)); !r.Queued {
			t.Fatalf("acquire %s with wait: got %+v, want queued", rid, r)
		}
	}
	prev := first.Token
	lease, tok := fencelock.LeaseID("L1"), first.Token
	for _, want := range []string{"w1", "w2", "w3"} {
		if r := h.apply(Command{Payload: Release{Name: "a", LeaseID: lease, Token: tok}}); r.Err != nil {
			t.Fatalf("release: %v", r.Err)
		}
		l, ok := h.f.Get("a")
		if !ok || l.Holder == nil {
			t.Fatalf("after release the next waiter %s holds nothing", want)
		}
		if l.Holder.RequestID != want {
			t.Errorf("granted %s, want %s (FIFO)", l.Holder.RequestID, want)
		}
		if l.Holder.Token != fencelock.Token(h.index) || l.Holder.Token <= prev {
			t.Errorf("waiter token %d: want the releasing entry's index %d, above %d", l.Holder.Token, h.index, prev)
		}
		prev, lease, tok = l.Holder.Token, l.Holder.LeaseID, l.Holder.Token
	}
	if got, want := h.obs.granted, []string{"r1", "w1", "w2", "w3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("observer saw grants %v, want %v", got, want)
	}
}

func TestFSM_ReleaseChecksLeaseAndToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		lease fencelock.LeaseID
		token func(fencelock.Token) fencelock.Token
	}{
		{"wrong lease", "OTHER", func(t fencelock.Token) fencelock.Token { return t }},
		{"wrong token", "L1", func(t fencelock.Token) fencelock.Token { return t - 1 }},
		{"both wrong", "OTHER", func(t fencelock.Token) fencelock.Token { return t + 1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			g := h.apply(acq("a", "r1", "L1", false)).Grant
			r := h.apply(Command{Payload: Release{Name: "a", LeaseID: tc.lease, Token: tc.token(g.Token)}})
			if !errors.Is(r.Err, fencelock.ErrNotHolder) {
				t.Fatalf("release with %s: got %v, want ErrNotHolder", tc.name, r.Err)
			}
			if l, ok := h.f.Get("a"); !ok || l.Holder.Token != g.Token {
				t.Errorf("release with %s changed the holder: %+v", tc.name, l)
			}
		})
	}
}

func TestFSM_ExpireOnlyCurrentToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	if r := h.apply(Command{Payload: Expire{Name: "a", Token: g.Token - 1}}); !errors.Is(r.Err, fencelock.ErrNotHolder) {
		t.Fatalf("expire of an old token: got %v, want ErrNotHolder", r.Err)
	}
	if _, ok := h.f.Get("a"); !ok {
		t.Fatal("expire of an old token removed the current grant")
	}
	if r := h.apply(Command{Payload: Expire{Name: "a", Token: g.Token}}); r.Err != nil {
		t.Fatalf("expire of the current token: %v", r.Err)
	}
	if _, ok := h.f.Get("a"); ok {
		t.Error("lock still has an entry after its only grant expired")
	}
	if !h.f.Expired("L1") {
		t.Error("Expired(L1) is false after L1's grant expired")
	}
	g2 := h.apply(acq("a", "r2", "L2", false)).Grant
	if g2 == nil || g2.Token <= g.Token {
		t.Fatalf("grant after expiry: got %+v, want a token above %d", g2, g.Token)
	}
}

func TestFSM_RequestIDDedupe(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	retry := acq("a", "r1", "L-retry", false)
	r := h.apply(retry)
	if r.Grant == nil || *r.Grant != *g {
		t.Fatalf("retry with the same request id: got %+v, want the same grant %+v", r.Grant, g)
	}
	// A queued request retried stays queued, once.
	h.apply(acq("a", "w1", "Lw", true))
	if r := h.apply(acq("a", "w1", "Lw2", true)); !r.Queued {
		t.Fatalf("retry of a queued request: got %+v, want queued", r)
	}
	l, _ := h.f.Get("a")
	if len(l.Waiters) != 1 {
		t.Errorf("queue has %d waiters after a retried wait, want 1", len(l.Waiters))
	}
	// Its grant ended: remembered for EndedWindow from the end, then
	// forgotten.
	h.apply(Command{Payload: Release{Name: "a", LeaseID: "L1", Token: g.Token}})
	if _, ok := h.f.requests.lookup(requestKey("a", "", "r1"), "a"); !ok {
		t.Fatal("request r1 is not remembered right after its grant ended")
	}
	h.now += int64(2 * EndedWindow)
	h.apply(acq("b", "x", "Lx", false)) // prunes
	if _, ok := h.f.requests.lookup(requestKey("a", "", "r1"), "a"); ok {
		t.Error("request r1 is still remembered after EndedWindow")
	}
}

func TestFSM_CancelWait(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.apply(acq("a", "w1", "Lw1", true))
	h.apply(acq("a", "w2", "Lw2", true))
	if r := h.apply(Command{Payload: CancelWait{Name: "a", RequestID: "w1"}}); r.Err != nil {
		t.Fatalf("cancel a waiter: %v", r.Err)
	}
	h.apply(Command{Payload: Release{Name: "a", LeaseID: "L1", Token: g.Token}})
	l, _ := h.f.Get("a")
	if l.Holder == nil || l.Holder.RequestID != "w2" {
		t.Fatalf("after w1 left the queue, release granted %+v, want w2", l.Holder)
	}
	// A waiter granted after it gave up: the cancel releases the grant.
	if r := h.apply(Command{Payload: CancelWait{Name: "a", RequestID: "w2"}}); r.Err != nil {
		t.Fatalf("cancel of a granted waiter: %v", r.Err)
	}
	if _, ok := h.f.Get("a"); ok {
		t.Error("the grant of a waiter that gave up was not released")
	}
}

// TestFSM_RequestsBelongToTheirOwner: another owner's retry of a request
// id gets neither its grant, nor its place, nor the token of its ended
// grant, and cannot cancel it.
func TestFSM_RequestsBelongToTheirOwner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	as := func(c Command, owner string) Command {
		switch p := c.Payload.(type) {
		case Acquire:
			p.Owner = owner
			c.Payload = p
		case CancelWait:
			p.Owner = owner
			c.Payload = p
		}
		return c
	}
	g := h.apply(as(acq("a", "r1", "L1", false), "billing")).Grant
	for _, owner := range []string{"hr", ""} {
		if r := h.apply(as(acq("a", "r1", "L2", false), owner)); !errors.Is(r.Err, fencelock.ErrPermissionDenied) {
			t.Errorf("owner %q retried billing's r1: %+v, want ErrPermissionDenied", owner, r)
		}
		if r := h.apply(as(Command{Payload: CancelWait{Name: "a", RequestID: "r1"}}, owner)); !errors.Is(r.Err, fencelock.ErrPermissionDenied) {
			t.Errorf("owner %q cancelled billing's r1: %+v, want ErrPermissionDenied", owner, r)
		}
	}
	if r := h.apply(Command{Payload: Release{Name: "a", LeaseID: "L1", Token: g.Token, Owner: "hr"}}); !errors.Is(r.Err, fencelock.ErrPermissionDenied) {
		t.Errorf("hr released billing's grant with its lease id: %+v, want ErrPermissionDenied", r)
	}
	h.apply(Command{Payload: Release{Name: "a", LeaseID: "L1", Token: g.Token, Owner: "billing"}})
	if r := h.apply(as(acq("a", "r1", "L3", false), "hr")); r.Err != nil && strings.Contains(r.Err.Error(), fmt.Sprint(g.Token)) {
		t.Errorf("hr retried billing's ended r1 and learned its token: %v", r.Err)
	}
	h.apply(as(acq("b", "w", "Lb", false), "billing"))
	h.apply(as(acq("b", "w2", "Lw", true), "billing"))
	if r := h.apply(Command{Payload: CancelWait{Name: "b", RequestID: "w2", Owner: "billing"}}); r.Err != nil {
		t.Errorf("a take-back of billing's waiter as billing: %v", r.Err)
	}
	h.apply(Command{Payload: Detach{Name: "b", RequestID: "w", Owner: "hr"}})
	if l, _ := h.f.Get("b"); l.Holder.Detached {
		t.Error("a Detach as another owner marked billing's grant")
	}
}

// TestFSM_DetachedGrant: Detach marks a grant as reaching nobody, the
// request's next Acquire clears the mark, and a snapshot keeps it.
func TestFSM_DetachedGrant(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(acq("a", "r1", "L1", false))
	if r := h.apply(Command{Payload: Detach{Name: "a", RequestID: "other"}}); !errors.Is(r.Err, fencelock.ErrNotFound) {
		t.Errorf("Detach of a request that holds nothing: %v, want ErrNotFound", r.Err)
	}
	h.apply(Command{Payload: Detach{Name: "a", RequestID: "r1"}})
	if l, _ := h.f.Get("a"); !l.Holder.Detached {
		t.Fatal("Detach left no mark")
	}
	var buf bytes.Buffer
	snap, _ := h.f.Snapshot()
	if err := snap.Persist(&sink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	restored := New(time.Minute, nil)
	if err := restored.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if l, _ := restored.Get("a"); l.Holder == nil || !l.Holder.Detached {
		t.Fatal("a snapshot lost the mark")
	}
	if r := h.apply(acq("a", "r1", "L2", false)); r.Grant == nil || r.Grant.Detached {
		t.Fatalf("the request's retry: %+v; want its grant, no longer detached", r)
	}
	if l, _ := h.f.Get("a"); l.Holder.Detached {
		t.Fatal("the request's retry left the mark")
	}
}

func TestFSM_TokensNeverReused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var last fencelock.Token
	for i := 0; i < 50; i++ {
		g := h.apply(acq("a", "", "L", false)).Grant
		if g == nil || g.Token <= last {
			t.Fatalf("grant %d: token %v, want above %d", i, g, last)
		}
		last = g.Token
		h.apply(Command{Payload: Release{Name: "a", LeaseID: "L", Token: g.Token}})
	}
}

func TestFSM_SnapshotRestoreReplaces(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.apply(acq("a", "w1", "Lw1", true))
	h.apply(acq("b", "r2", "L2", false))
	gc := h.apply(acq("c", "r3", "L3", false)).Grant
	h.apply(Command{Payload: Expire{Name: "c", Token: gc.Token}})
	h.apply(Command{Payload: SetMember{NodeID: "n1", APIAddr: "127.0.0.1:7070"}})

	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&sink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}

	other := newHarness(t)
	other.apply(acq("zzz", "x", "LX", false)) // must vanish: restore replaces
	if err := other.f.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
		t.Fatal(err)
	}
	want, _ := h.f.List("", "", 100)
	got, _ := other.f.List("", "", 100)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("restored locks\n got %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(contents(other.f.requests), contents(h.f.requests)) || !other.f.Expired("L3") {
		t.Error("restored request ids or expired leases differ from the snapshot's")
	}
	if got, _ := other.f.MemberAPI("n1"); got != "127.0.0.1:7070" {
		t.Errorf("restored member n1 API %q, want 127.0.0.1:7070", got)
	}
	if other.f.AppliedIndex() != h.f.AppliedIndex() {
		t.Errorf("restored applied index %d, want %d", other.f.AppliedIndex(), h.f.AppliedIndex())
	}
	if r := other.apply(acq("a", "r1", "", false)); r.Grant == nil || r.Grant.Token != g.Token {
		t.Errorf("after restore, a retry of r1 got %+v, want the original grant", r)
	}
}

func TestFSM_BadEntryIsRefusedNotPanicking(t *testing.T) {
	t.Parallel()
	f := New(0, nil)
	for _, data := range [][]byte{nil, []byte("{"), {formatVersion, 99, 0}, Command{}.Encode()} {
		r := f.Apply(&raft.Log{Index: 1, Data: data}).(Result)
		if !errors.Is(r.Err, fencelock.ErrInvalidArgument) {
			t.Errorf("apply %q: got %v, want ErrInvalidArgument", data, r.Err)
		}
	}
}

type sink struct{ *bytes.Buffer }

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { return nil }
func (s *sink) Close() error  { return nil }

func TestFSM_QueuedRequestOutlivesTheDedupeWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.apply(acq("a", "w1", "Lw1", true))
	h.now += int64(5 * time.Minute) // window is 1 minute
	h.apply(acq("other", "x", "Lx", false))
	if r := h.apply(acq("a", "w1", "Lw1b", true)); !r.Queued {
		t.Fatalf("retry of a request still queued after the window: got %+v, want queued", r)
	}
	if l, _ := h.f.Get("a"); len(l.Waiters) != 1 {
		t.Fatalf("queue has %d waiters after the retry, want 1 (no second waiter)", len(l.Waiters))
	}
	h.now += int64(5 * time.Minute)
	h.apply(Command{Payload: Release{Name: "a", LeaseID: "L1", Token: g.Token}})
	granted, _ := h.f.Get("a")
	// A retry after the waiter's grant gets the same grant, not a second one.
	if r := h.apply(acq("a", "w1", "Lw1c", true)); r.Grant == nil || r.Grant.Token != granted.Holder.Token {
		t.Errorf("retry just after the waiter's grant: got %+v, want its grant (token %d)", r, granted.Holder.Token)
	}
}

func TestFSM_CommandTimeNeverGoesBack(t *testing.T) {
	t.Parallel()
	// A replica restored from a snapshot and one that applied the whole log
	// must prune the same requests, even when a new leader's clock is
	// behind: the snapshot keeps the command time.
	live := newHarness(t)
	g := live.apply(acq("a", "r1", "L1", false)).Grant // at T
	snap, err := live.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&sink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	restored := newHarness(t)
	if err := restored.f.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	restored.index = live.index
	both := func(c Command) Result {
		t.Helper()
		want := live.apply(c)
		if got := restored.apply(c); resultString(got) != resultString(want) {
			t.Fatalf("%+v: the restored replica answered %s, the live one %s", c, resultString(got), resultString(want))
		}
		return want
	}
	behind := live.now - int64(30*time.Minute) // the next leader's clock
	both(Command{Now: behind, Payload: Release{Name: "a", LeaseID: g.LeaseID, Token: g.Token}})
	r2 := acq("b", "r2", "L2", false)
	r2.Now = behind + 1
	g2 := both(r2).Grant
	both(Command{Now: behind + 2, Payload: Release{Name: "b", LeaseID: g2.LeaseID, Token: g2.Token}})
	// Past the window for "behind", within it for T.
	c := acq("c", "r3", "L3", false)
	c.Now = live.f.LastNow() + int64(30*time.Second)
	both(c)
	if got, want := keys(restored.f.requests), keys(live.f.requests); !reflect.DeepEqual(got, want) || len(got) != 2 {
		t.Errorf("request ids differ between replicas: restored %q, live %q; want both ended grants", got, want)
	}
}

// contents returns what w holds now, in order (an empty window as an empty
// slice, as a snapshot writes it: [], not null).
func contents(w *window) []record {
	out := []record{}
	w.view().each(func(key, name []byte, token uint64, now int64) bool {
		out = append(out, record{Key: string(key), Name: fencelock.LockName(name), Token: fencelock.Token(token), Now: now})
		return true
	})
	return out
}

// keys returns the keys w holds, sorted.
func keys(w *window) []string {
	var out []string
	for _, rec := range contents(w) {
		out = append(out, rec.Key)
	}
	sort.Strings(out)
	return out
}

// TestFSM_SnapshotIsTheStateWhenTaken: Persist runs while later entries
// apply; what it writes is the state when Snapshot was called, not later.
func TestFSM_SnapshotIsTheStateWhenTaken(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(acq("a", "r1", "L1", false))
	h.apply(acq("a", "w1", "Lw1", true))
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := h.f.List("", "", 100)
	wantApplied := h.f.AppliedIndex()
	h.apply(acq("b", "r2", "L2", false)) // a new lock
	h.apply(acq("a", "w2", "Lw2", true)) // a second waiter on a
	var buf bytes.Buffer
	if err := snap.Persist(&sink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	other := newHarness(t)
	if err := other.f.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if got, _ := other.f.List("", "", 100); !reflect.DeepEqual(got, want) {
		t.Errorf("persisted after later entries:\n got %+v\nwant %+v (the state at Snapshot)", got, want)
	}
	if other.f.AppliedIndex() != wantApplied || other.f.Queued("a", "w2") {
		t.Errorf("restored applied index %d (want %d), w2 queued %v (want false)", other.f.AppliedIndex(), wantApplied, other.f.Queued("a", "w2"))
	}
}

// windowAt is the dedupe window as a snapshot must hold it: the records
// that are in it now, in order.
func windowAt(f *FSM) (reqs, exps []record) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return contents(f.requests), contents(f.expired)
}

// Snapshot does not copy the dedupe window; Persist, running while later
// entries apply, must still write it as it was at Snapshot, whatever those
// entries forget, replace or add: a grant ended (added), a grant taken back
// (added and forgotten), an expiry of a lease id that expired before
// (replaced), and the window passing (everything older forgotten).
func TestFSM_SnapshotKeepsTheDedupeWindowAsItWas(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// Before Snapshot, the same kinds of change: what left the window then
	// must not be in the snapshot.
	o := h.apply(acq("o", "ro", "Lo", false)).Grant
	h.apply(Command{Payload: Expire{Name: "o", Token: o.Token}})
	h.now += int64(2 * time.Minute) // ro and o's expiry forgotten
	b := h.apply(acq("b", "rb", "Lb", false)).Grant
	h.apply(acq("b", "wb", "Lwb", true))
	h.apply(Command{Payload: Release{Name: "b", LeaseID: b.LeaseID, Token: b.Token}}) // rb recorded; wb granted
	h.apply(acq("t", "rt", "Lt", false))
	h.apply(Command{Payload: CancelWait{Name: "t", RequestID: "rt"}}) // taken back: recorded and forgotten
	// The same lease expires twice: the first record replaced.
	for _, rid := range []string{"rl1", "rl2"} {
		l := h.apply(acq("l", rid, "Ll", false)).Grant
		h.apply(Command{Payload: Expire{Name: "l", Token: l.Token}})
	}
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.apply(acq("a", "w1", "Lw1", true))
	h.apply(acq("a", "w2", "Lw2", true))
	h.apply(acq("a", "w3", "Lw3", true))
	e := h.apply(acq("e", "re", "Le", false)).Grant
	h.apply(Command{Payload: Expire{Name: "e", Token: e.Token}})
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	wantReqs, wantExps := windowAt(h.f)
	if len(wantReqs) != 4 || len(wantExps) != 2 {
		t.Fatalf("window at Snapshot: %d requests, %d expired; want 4 (rb, rl1, rl2, re) and 2 (Ll, Le)", len(wantReqs), len(wantExps))
	}

	h.apply(Command{Payload: Release{Name: "a", LeaseID: g.LeaseID, Token: g.Token}}) // r1 recorded; w1 granted
	h.apply(Command{Payload: CancelWait{Name: "a", RequestID: "w2"}})                 // w2 leaves the queue
	h.apply(Command{Payload: CancelWait{Name: "a", RequestID: "w1"}})                 // w1 taken back; w3 granted
	l := h.apply(acq("l", "rl3", "Ll", false)).Grant
	h.apply(Command{Payload: Expire{Name: "l", Token: l.Token}}) // Ll's record replaced
	h.now += int64(2 * time.Minute)                              // the window (1 minute) passes:
	h.apply(acq("y", "ry", "Ly", false))                         // every record forgotten
	if l, _ := h.f.Get("a"); l.Holder == nil || l.Holder.RequestID != "w3" {
		t.Fatalf("a is held by %+v, want w3", l.Holder)
	}
	if r, _ := windowAt(h.f); reflect.DeepEqual(r, wantReqs) {
		t.Fatal("the later entries changed nothing in the window: the test checks nothing")
	}

	var buf bytes.Buffer
	if err := snap.Persist(&sink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	var st state
	if err := json.Unmarshal(buf.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Requests, wantReqs) {
		t.Errorf("persisted request ids:\n got %+v\nwant %+v (the window at Snapshot)", st.Requests, wantReqs)
	}
	if !reflect.DeepEqual(st.Expired, wantExps) {
		t.Errorf("persisted expired leases:\n got %+v\nwant %+v (the window at Snapshot)", st.Expired, wantExps)
	}
}

// Persist writes the dedupe window by hand; the snapshot must still be what
// encoding/json writes for the state, byte for byte (Restore decodes it with
// encoding/json), also for strings that JSON escapes.
func TestFSM_SnapshotIsEncodingJSONsOutput(t *testing.T) {
	t.Parallel()
	t.Run("empty", func(t *testing.T) {
		f := New(time.Minute, nil)
		snap, err := f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := snap.Persist(&sink{Buffer: &got}); err != nil {
			t.Fatal(err)
		}
		want := `{"version":1,"applied":0,"locks":[],"requests":[],"expired":[],"last_now":0}` + "\n"
		if got.String() != want {
			t.Errorf("empty snapshot:\n got %s\nwant %s", got.String(), want)
		}
	})
	h := newHarness(t)
	odd := "q\"u\\o<t>e&\u00e9\x01"
	h.apply(Command{Payload: SetMember{NodeID: "n1", APIAddr: "127.0.0.1:7171"}})
	h.apply(Command{Payload: SetIdentity{ClusterID: "c-" + odd, KeyID: "k1", Seed: []byte(fencelock.LeaseID(bytes.Repeat([]byte{7}, 32)))}})
	h.f.identity.Epoch = 3
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	h.apply(acq("a", odd, "L"+odd, true))
	g2 := h.apply(acq(odd, "r2", "L2", false)).Grant
	h.apply(acq(odd, "r4", "L4", true))
	h.apply(Command{Payload: Expire{Name: "a", Token: g.Token}})                                      // r1 recorded, L1 expired; odd granted
	h.apply(Command{Payload: Release{Name: fencelock.LockName(odd), LeaseID: "L2", Token: g2.Token}}) // r2 recorded; r4 granted
	ga, _ := h.f.Get("a")
	h.apply(Command{Payload: Expire{Name: "a", Token: ga.Holder.Token}}) // odd recorded, L+odd expired
	h.apply(acq("b", "r3", "L3", false))
	h.apply(acq("b", odd, "L"+odd+"b", true))
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	reqs, exps := windowAt(h.f)
	if len(reqs) != 3 || len(exps) != 2 {
		t.Fatalf("window: %d requests, %d expired; want 3 and 2", len(reqs), len(exps))
	}
	s := snap.(*snapshot)
	want := s.st
	want.Requests, want.Expired = reqs, exps
	// Locks in name order: two snapshots of one state are the same bytes.
	want.Locks = slices.Clone(want.Locks)
	sort.Slice(want.Locks, func(i, j int) bool { return want.Locks[i].Name < want.Locks[j].Name })
	var wantBuf, got bytes.Buffer
	if err := json.NewEncoder(&wantBuf).Encode(want); err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(&sink{Buffer: &got}); err != nil {
		t.Fatal(err)
	}
	if got.String() != wantBuf.String() {
		t.Errorf("snapshot:\n got %s\nwant %s (encoding/json)", got.String(), wantBuf.String())
	}
}

// Persist runs on Raft's snapshot goroutine while later entries apply and
// change the windows it reads (records it must write replaced or
// forgotten, new ids, pruning, the slices outgrowing their arrays): under
// -race, this checks that they share nothing unsynchronised, and every
// persisted snapshot must decode to the window at its Snapshot.
func TestFSM_PersistWhileEntriesApply(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.f = New(50*time.Millisecond, nil) // a short window, so that applies prune
	for round := range 10 {
		type held struct {
			name fencelock.LockName
			g    *Holder
		}
		var holders []held
		for j := range 40 {
			name := fencelock.LockName(fmt.Sprintf("h%d-%d", round, j))
			g := h.apply(acq(string(name), fmt.Sprintf("g%d-%d", round, j), fmt.Sprintf("Lg%d-%d", round, j), false)).Grant
			holders = append(holders, held{name, g})
			for k := range 3 {
				rid := fmt.Sprintf("q%d-%d-%d", round, j, k)
				h.apply(acq(string(name), rid, "L"+rid, true))
			}
		}
		snap, err := h.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		wantReqs, wantExps := windowAt(h.f)
		done := make(chan error, 1)
		var buf bytes.Buffer
		go func() { done <- snap.Persist(&sink{Buffer: &buf}) }()
		// Meanwhile: each holder releases (its first waiter is granted: that
		// waiter's record is replaced) or expires, the second waiter gives
		// up (its record forgotten), new ids arrive and time passes.
		for j, hd := range holders {
			if j%2 == 0 {
				h.apply(Command{Payload: Release{Name: hd.name, LeaseID: hd.g.LeaseID, Token: hd.g.Token}})
			} else {
				h.apply(Command{Payload: Expire{Name: hd.name, Token: hd.g.Token}})
			}
			h.apply(Command{Payload: CancelWait{Name: hd.name, RequestID: fmt.Sprintf("q%d-%d-1", round, j)}})
			rid := fmt.Sprintf("x%d-%d", round, j)
			h.apply(acq(rid, rid, "L"+rid, false))
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		snap.Release()
		var st state
		if err := json.Unmarshal(buf.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(st.Requests, wantReqs) || !reflect.DeepEqual(st.Expired, wantExps) {
			t.Fatalf("round %d: persisted window differs from the one at Snapshot (%d/%d requests, %d/%d expired)",
				round, len(st.Requests), len(wantReqs), len(st.Expired), len(wantExps))
		}
		h.now += int64(100 * time.Millisecond) // the next round's applies prune this one's window
	}
}

// An entry that does not decode is refused alike on every replica, and
// counts as applied: AppliedIndex (and so snapshots) move past it.
func TestFSM_UndecodableEntryIsRefusedAndApplied(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(acq("a", "r1", "L1", false))
	h.index++
	r := h.f.Apply(&raft.Log{Index: h.index, Data: []byte{0x7f, 1, 2}}).(Result)
	if !errors.Is(r.Err, fencelock.ErrInvalidArgument) {
		t.Fatalf("undecodable entry: %+v, want ErrInvalidArgument", r)
	}
	if got := h.f.AppliedIndex(); got != h.index {
		t.Errorf("applied index after the undecodable entry %d: %d", h.index, got)
	}
}

// TestFSM_Epochs: tokens are epoch × 2^40 + index, so a restored state
// whose epoch is one more grants tokens above any of the epoch before, and
// past the last index nobody is granted, and no waiter is lost.
func TestFSM_Epochs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	g := h.apply(acq("a", "r1", "L1", false)).Grant
	if g.Token != fencelock.Token(h.index) {
		t.Fatalf("epoch 0 token %d, want the log index %d", g.Token, h.index)
	}
	h.f.identity.Epoch = 1
	h.index = 5 // a restored cluster's log starts low again
	h.apply(Command{Payload: Release{Name: "a", LeaseID: "L1", Token: g.Token}})
	g2 := h.apply(acq("a", "r2", "L2", false)).Grant
	if want := fencelock.Token(1<<40 + h.index); g2.Token != want || g2.Token <= g.Token || g2.Token.Epoch() != 1 {
		t.Fatalf("epoch 1 token %d, want %d, above %d", g2.Token, want, g.Token)
	}
	h.apply(acq("a", "w", "Lw", true))
	h.f.identity.Epoch = fencelock.MaxTokenEpoch
	h.index = fencelock.MaxTokenIndex - 1
	h.apply(Command{Payload: Release{Name: "a", LeaseID: "L2", Token: g2.Token}}) // index MaxTokenIndex: w granted
	l, _ := h.f.Get("a")
	if l.Holder == nil || l.Holder.Token != fencelock.MaxToken {
		t.Fatalf("the last index granted %+v, want token %d", l.Holder, fencelock.MaxToken)
	}
	h.apply(acq("a", "w2", "Lw2", true))
	h.apply(Command{Payload: Release{Name: "a", LeaseID: "Lw", Token: fencelock.MaxToken}}) // beyond the last index
	l, _ = h.f.Get("a")
	if l.Holder != nil || len(l.Waiters) != 1 || l.Waiters[0].RequestID != "w2" {
		t.Fatalf("past the last token: %+v, want no holder and w2 still queued", l)
	}
	if r := h.apply(acq("b", "r3", "L3", false)); !errors.Is(r.Err, fencelock.ErrTokensExhausted) {
		t.Fatalf("acquire past the last token: %+v, want ErrTokensExhausted", r)
	}
}

func TestFSM_Identity(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	seed := func(b byte) fencelock.LeaseID { return fencelock.LeaseID(bytes.Repeat([]byte{b}, 32)) }
	signer := func() string { _, k, _ := h.f.Signer(); return k.ID }
	if r := h.apply(Command{Payload: RotateKey{KeyID: "k0", Seed: []byte(seed(9))}}); r.Err == nil {
		t.Fatal("a rotation before the first key was applied")
	}
	h.apply(Command{Payload: SetIdentity{ClusterID: "c1", KeyID: "k1", Seed: []byte(seed(1))}})
	h.apply(Command{Payload: SetIdentity{ClusterID: "c2", KeyID: "kx", Seed: []byte(seed(9))}}) // ignored: the first wins
	if r := h.apply(Command{Payload: RotateKey{KeyID: "bad", Seed: []byte("short")}}); r.Err == nil {
		t.Fatal("a key with a short seed was applied")
	}
	h.apply(Command{Payload: RotateKey{KeyID: "k2", Seed: []byte(seed(2))}}) // k2 pending
	if id := h.f.Identity(); id.ClusterID != "c1" || len(id.Keys) != 2 || !id.Keys[1].Pending || signer() != "k1" {
		t.Fatalf("after a first step: %+v, signer %s; want k1 signing and k2 pending", id, signer())
	}
	h.apply(Command{Payload: RotateKey{KeyID: "k3", Seed: []byte(seed(3))}}) // k2 signs; k3 is not added
	if id := h.f.Identity(); len(id.Keys) != 2 || id.Keys[1].Pending || signer() != "k2" {
		t.Fatalf("after the second step: %+v, signer %s; want k1, k2 with k2 signing", id.Keys, signer())
	}
	h.apply(Command{Payload: RotateKey{KeyID: "k3", Seed: []byte(seed(3))}})
	h.apply(Command{Payload: RotateKey{KeyID: "k4", Seed: []byte(seed(4))}})
	if id := h.f.Identity(); len(id.Keys) != 2 || id.Keys[0].ID != "k2" || signer() != "k3" {
		t.Fatalf("after a second rotation: keys %+v, signer %s; want k2, k3 with k3 signing", id.Keys, signer())
	}
	snap, _ := h.f.Snapshot()
	var buf bytes.Buffer
	if err := snap.Persist(&sink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	other := newHarness(t)
	if err := other.f.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if got := other.f.Identity(); !reflect.DeepEqual(got, h.f.Identity()) {
		t.Fatalf("restored identity %+v, want %+v", got, h.f.Identity())
	}
}
