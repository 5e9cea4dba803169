package fsm

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fencelock/fencelock"
)

// TestQueue_AgainstASlice runs random pushes, pops and removals on a queue
// and on a plain slice, in rounds that grow the queue and then shrink it,
// and checks after each step that both hold the same waiters in the same
// order, and that gaps never take more than half of the slots (so that no
// operation costs more than O(1), amortised).
func TestQueue_AgainstASlice(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	var q queue
	var model []Waiter
	next := 0
	for step := range 12000 {
		op := rng.IntN(10)
		switch grow := step/1000%2 == 0; {
		case grow && rng.IntN(2) == 0:
			op = 0 // a growing round: pushes more than half the time
		case !grow:
			op = 4 + rng.IntN(6) // a shrinking round: no pushes
		}
		switch {
		case op < 4:
			w := Waiter{RequestID: fmt.Sprintf("r%d", next), QueuedAt: int64(next)}
			next++
			if !q.push(w) {
				t.Fatalf("step %d: push of new request %s refused", step, w.RequestID)
			}
			model = append(model, w)
		case op < 5:
			w, ok := q.pop()
			if ok != (len(model) > 0) || ok && w != model[0] {
				t.Fatalf("step %d: pop = %+v, %v; want the first of %d", step, w, ok, len(model))
			}
			if ok {
				model = model[1:]
			}
		case op < 9:
			rid := fmt.Sprintf("r%d", rng.IntN(next+1)) // gone, or never pushed
			if len(model) > 0 && rng.IntN(4) != 0 {
				rid = model[rng.IntN(len(model))].RequestID
			}
			i := index(model, rid)
			if got := q.remove(rid); got != (i >= 0) {
				t.Fatalf("step %d: remove(%s) = %v, want %v", step, rid, got, i >= 0)
			}
			if i >= 0 {
				model = append(model[:i:i], model[i+1:]...)
			}
		default:
			if len(model) > 0 {
				w := model[rng.IntN(len(model))]
				if q.push(w) {
					t.Fatalf("step %d: push of queued request %s accepted", step, w.RequestID)
				}
			}
		}
		if got := q.waiters(-1); !reflect.DeepEqual(got, model) && (len(got) != 0 || len(model) != 0) {
			t.Fatalf("step %d: queue holds %d waiters %v, want %d", step, len(got), got, len(model))
		}
		if q.len() != len(model) || q.gaps*2 > len(q.slots) {
			t.Fatalf("step %d: len %d (want %d), %d gaps in %d slots", step, q.len(), len(model), q.gaps, len(q.slots))
		}
		if n := len(q.slots); n > 0 && (q.slots[0].gap || q.slots[n-1].gap) {
			t.Fatalf("step %d: the slots end in a gap", step)
		}
		for _, w := range model {
			if !q.has(w.RequestID) {
				t.Fatalf("step %d: has(%s) is false for a queued request", step, w.RequestID)
			}
		}
	}
}

func index(ws []Waiter, rid string) int {
	for i, w := range ws {
		if w.RequestID == rid {
			return i
		}
	}
	return -1
}

// TestFSM_CancelWaitDeepQueue queues 40,000 waiters on one lock and cancels
// all but every thousandth, one by one, in random order. A queue scanned
// or shifted on each cancel costs 40,000² steps here (minutes under -race);
// the indexed queue costs O(1) per cancel. The waiters left are granted in
// FIFO order.
func TestFSM_CancelWaitDeepQueue(t *testing.T) {
	t.Parallel()
	const n = 40_000
	h := newHarness(t)
	g := h.apply(acq("a", "r", "L", false)).Grant
	rids := make([]string, n)
	for i := range rids {
		rids[i] = fmt.Sprintf("w%d", i)
		if r := h.apply(acq("a", rids[i], "L"+rids[i], true)); !r.Queued {
			t.Fatalf("acquire %s: %+v, want queued", rids[i], r)
		}
	}
	var kept []string
	var cancel []string
	for i, rid := range rids {
		if i%1000 == 0 {
			kept = append(kept, rid)
		} else {
			cancel = append(cancel, rid)
		}
	}
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(cancel), func(i, j int) { cancel[i], cancel[j] = cancel[j], cancel[i] })
	for i, rid := range cancel {
		if r := h.apply(Command{Payload: CancelWait{Name: "a", RequestID: rid}}); r.Err != nil {
			t.Fatalf("cancel %d, of %s: %v", i, rid, r.Err)
		}
		if h.f.Queued("a", rid) {
			t.Fatalf("%s still queued after its cancel", rid)
		}
	}
	l, _ := h.f.Get("a")
	var got []string
	for _, w := range l.Waiters {
		got = append(got, w.RequestID)
	}
	if !reflect.DeepEqual(got, kept) {
		t.Fatalf("waiters left: %d %v..., want %d %v...", len(got), got[:min(3, len(got))], len(kept), kept[:3])
	}
	lease, tok := fencelock.LeaseID("L"), g.Token
	for _, want := range kept {
		h.apply(Command{Payload: Release{Name: "a", LeaseID: lease, Token: tok}})
		l, _ := h.f.Get("a")
		if l.Holder == nil || l.Holder.RequestID != want {
			t.Fatalf("granted %+v, want %s (FIFO)", l.Holder, want)
		}
		lease, tok = l.Holder.LeaseID, l.Holder.Token
	}
}

// BenchmarkFSM_CancelWaitDeepQueue measures one cancel of a waiter at a
// random place in the queue of one lock, and one acquire that queues a new
// waiter (the queue stays as deep), through Apply. The time per operation
// should not grow with the depth.
//
//	go test -run '^$' -bench CancelWaitDeepQueue ./fsm/
func BenchmarkFSM_CancelWaitDeepQueue(b *testing.B) {
	for _, depth := range []int{100, 40_000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			h := &harness{tb: b, f: New(0, nil), index: 10, now: 1}
			h.apply(acq("a", "r", "L", false))
			queued := make([]string, depth)
			for i := range queued {
				queued[i] = fmt.Sprintf("w%d", i)
				h.apply(acq("a", queued[i], "L", true))
			}
			rng := rand.New(rand.NewPCG(7, 8))
			next := depth
			for b.Loop() {
				i := rng.IntN(len(queued))
				if r := h.apply(Command{Payload: CancelWait{Name: "a", RequestID: queued[i]}}); r.Err != nil {
					b.Fatal(r.Err)
				}
				queued[i] = fmt.Sprintf("w%d", next)
				next++
				if r := h.apply(acq("a", queued[i], "L", true)); !r.Queued {
					b.Fatalf("acquire: %+v, want queued", r)
				}
			}
		})
	}
}
