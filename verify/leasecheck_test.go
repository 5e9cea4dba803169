package verify

import (
	"strings"
	"testing"
	"time"
)

// granted adds an acquire of lock by p that returned token tok, its
// Acquire having returned at the given time.
func (b *hb) granted(p int, lock string, tok uint64, at time.Duration) *hb {
	b.call(p, FAcquire, lock, 0, "")
	return b.add(Op{Process: p, Type: OK, F: FAcquire, Lock: lock, Token: tok, Granted: at})
}

// released adds p's release of tok with the lease end it reported.
func (b *hb) released(p int, lock string, tok uint64, end LeaseEnd) *hb {
	b.call(p, FRelease, lock, tok, "")
	return b.add(Op{Process: p, Type: OK, F: FRelease, Lock: lock, End: &end})
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestCheckLeases(t *testing.T) {
	t.Parallel()
	released := LeaseEnd{Alive: ms(10), CtxAlive: ms(10), Done: ms(11), Deadline: ms(900), Cause: "released"}
	expired := LeaseEnd{Alive: ms(895), CtxAlive: ms(898), Done: ms(901), Deadline: ms(900), Cause: "lease_expired"}
	tests := []struct {
		name string
		h    *hb
		opts LeaseOptions
		want string // "" = valid; else a substring of a problem
	}{
		{"released before the next grant", new(hb).
			granted(1, "a", 4, ms(1)).released(1, "a", 4, released).
			granted(2, "a", 6, ms(12)).released(2, "a", 6, released), LeaseOptions{Context: true}, ""},
		{"expired before the next grant", new(hb).
			granted(1, "a", 4, ms(1)).granted(2, "a", 6, ms(1000)).released(1, "a", 4, expired), LeaseOptions{Context: true}, ""},
		{"granted while the holder still held the lease", new(hb).
			granted(1, "a", 4, ms(1)).granted(2, "a", 6, ms(800)).released(1, "a", 4, expired), LeaseOptions{}, "still held its lease"},
		{"the earliest later grant counts, not the next token", new(hb).
			granted(1, "a", 4, ms(1)).granted(3, "a", 9, ms(700)).granted(2, "a", 6, ms(1000)).released(1, "a", 4, expired),
			LeaseOptions{}, "token 9"},
		{"context late after the deadline", new(hb).
			granted(1, "a", 4, ms(1)).granted(2, "a", 6, ms(950)).
			released(1, "a", 4, LeaseEnd{Alive: ms(899), CtxAlive: ms(960), Done: ms(961), Deadline: ms(900), Cause: "lease_expired"}),
			LeaseOptions{Context: true}, "the context of token 4"},
		{"context late is allowed where clients are frozen", new(hb).
			granted(1, "a", 4, ms(1)).granted(2, "a", 6, ms(950)).
			released(1, "a", 4, LeaseEnd{Alive: ms(899), CtxAlive: ms(960), Done: ms(961), Deadline: ms(900), Cause: "lease_expired"}),
			LeaseOptions{}, ""},
		{"a hand-over across a restore is not checked", new(hb).
			granted(1, "a", 4, ms(1)).granted(2, "a", 1<<32, ms(800)).released(1, "a", 4, expired),
			LeaseOptions{Rewinds: []time.Duration{ms(500)}}, ""},
		{"a token issued again after a restore is not compared across it", new(hb).
			granted(1, "a", 4, ms(1)).released(1, "a", 4, released).
			granted(2, "a", 6, ms(12)).released(2, "a", 6, LeaseEnd{Alive: ms(20), Done: ms(21), Cause: "released"}).
			granted(1, "a", 4, ms(600)).released(1, "a", 4, LeaseEnd{Alive: ms(610), Done: ms(611), Cause: "released"}),
			LeaseOptions{Context: true, Rewinds: []time.Duration{ms(500)}}, ""},
		{"other locks are independent", new(hb).
			granted(1, "a", 4, ms(1)).granted(2, "b", 6, ms(800)).released(1, "a", 4, expired), LeaseOptions{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertCheck(t, CheckLeases(tt.h.ops, tt.opts), tt.want)
		})
	}
}

// TestCheckLeases_counts: the check counts the hand-overs it checked, those
// after a lost lease, and the ones it could not check.
func TestCheckLeases_counts(t *testing.T) {
	t.Parallel()
	expired := LeaseEnd{Alive: ms(895), CtxAlive: ms(895), Done: ms(901), Deadline: ms(900), Cause: "lease_expired"}
	h := new(hb).
		granted(1, "a", 4, ms(1)).
		granted(2, "a", 6, ms(1000)).released(1, "a", 4, expired).
		released(2, "a", 6, LeaseEnd{Alive: ms(1005), Done: ms(1006), Cause: "released"}).
		granted(3, "a", 8, ms(1010)).                          // its holder never reports: the last grant, no hand-over
		granted(1, "b", 2, ms(1)).granted(2, "b", 3, ms(2000)) // b's first holder died: unreported
	c, st := checkLeases(h.ops, LeaseOptions{Context: true})
	if !c.Valid {
		t.Fatalf("checker flagged a valid history: %v", c.Problems)
	}
	if st.checked != 2 || st.lost != 1 || st.unreported != 1 || c.Checked != 2 {
		t.Errorf("got %d checked (Check says %d), %d after a loss, %d unreported; want 2, 1, 1", st.checked, c.Checked, st.lost, st.unreported)
	}
	if st.closest != ms(105) || st.doneLag != ms(1) {
		t.Errorf("got closest call %v and context lag %v, want 105ms and 1ms", st.closest, st.doneLag)
	}
	if !strings.Contains(c.Note, "2 hand-overs checked, 1 after a lost lease") {
		t.Errorf("note %q does not give the counts", c.Note)
	}
}

// TestScenario_Bit_handovers: a run that checked too few lease hand-overs
// did not test the lease claim, and its faults-bit says so.
func TestScenario_Bit_handovers(t *testing.T) {
	t.Parallel()
	sc, _ := Lookup("kill")
	if c := sc.Bit(Result{Faults: 3, Grants: 300, LeaderChanges: 2, Handovers: minHandovers}); !c.Valid {
		t.Errorf("faults-bit with %d hand-overs: %v, want valid", minHandovers, c.Problems)
	}
	c := sc.Bit(Result{Faults: 3, Grants: 300, LeaderChanges: 2, Handovers: minHandovers - 1})
	if c.Valid || !strings.Contains(strings.Join(c.Problems, "\n"), "hand-overs checked") {
		t.Errorf("faults-bit with %d hand-overs: valid %v, problems %q; want a problem about the hand-overs", minHandovers-1, c.Valid, c.Problems)
	}
}
