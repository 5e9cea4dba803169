package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/sequencer"
)

func TestLeaseTable_ActivationVoidAfterLostLeadership(t *testing.T) {
	t.Parallel()
	lt := newLeaseTable(func(fencelock.LockName, fencelock.Token) error { return nil })
	holders := func() map[fencelock.LockName]fsm.Holder {
		return map[fencelock.LockName]fsm.Holder{"a": {Token: 7, LeaseID: "L", TTL: int64(time.Minute)}}
	}
	epoch := lt.currentEpoch() // became leader; the barrier is under way
	lt.deactivate()            // ...and lost leadership before it ended
	if _, ok := lt.activate(epoch, holders, time.Now(), 0); ok || lt.isActive() {
		t.Fatal("an activation begun before leadership was lost armed the lease table")
	}
	if _, ok := lt.activate(lt.currentEpoch(), holders, time.Now(), 0); !ok || !lt.isActive() {
		t.Fatal("a fresh activation did not arm the lease table")
	}
	lt.deactivate()
}

func TestLeaseTable_RenewNeverShortens(t *testing.T) {
	t.Parallel()
	lt := newLeaseTable(func(fencelock.LockName, fencelock.Token) error { return nil })
	now := time.Now()
	lt.activate(lt.currentEpoch(), func() map[fencelock.LockName]fsm.Holder { return nil }, now, 0)
	defer lt.deactivate()
	lt.granted("a", fsm.Holder{Token: 3, LeaseID: "L", TTL: int64(time.Minute)}, now.Add(30*time.Second))
	if _, r := lt.renew("a", "L", 3, "", now); r != renewed {
		t.Fatalf("renew: %v", r)
	}
	if exp, _ := lt.expiry("a", 3); !exp.Equal(now.Add(90 * time.Second)) {
		t.Errorf("an earlier renewal moved the deadline to %v, want it kept at +90s", exp.Sub(now))
	}
	if _, r := lt.renew("a", "OTHER", 3, "", now); r != notArmed {
		t.Errorf("renew with a wrong lease id: %v, want notArmed", r)
	}
}

// TestServer_NewLeaderArmsLeasesWithTheRPCTimeout: a leader arms the
// leases it finds with their TTL and rpcTimeout on top, as the old leader
// may confirm renewals with replies up to rpcTimeout late (leaderCheck).
func TestServer_NewLeaderArmsLeasesWithTheRPCTimeout(t *testing.T) {
	t.Parallel()
	dir, addr := t.TempDir(), testproc.FreeAddr(t)
	tweak := func(c *Config) { c.DataDir, c.RaftAddr = dir, addr }
	s := openInProcessWith(t, tweak)
	g, err := s.Acquire(t.Context(), AcquireRequest{Name: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	before := time.Now()
	again := openInProcessWith(t, tweak)
	exp, ok := again.leases.expiry("a", g.Token)
	if want := before.Add(time.Minute + rpcTimeout(again.cfg)); !ok || exp.Before(want) {
		t.Fatalf("the lease is armed until %v after the restart began (%v); want at least TTL + rpcTimeout = %v",
			exp.Sub(before), ok, want.Sub(before))
	}
}

// TestRenew_EachGrantItsOwnOutcome: a batch of renewals is served by one
// leader check, and each grant gets its own outcome: the held ones their
// TTL, a released one ErrNotHolder, a malformed one its input error.
func TestRenew_EachGrantItsOwnOutcome(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	ctx := t.Context()
	a, err := s.Acquire(ctx, AcquireRequest{Name: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, AcquireRequest{Name: "b", TTL: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := s.Acquire(ctx, AcquireRequest{Name: "c", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, gone.Name, gone.LeaseID, gone.Token); err != nil {
		t.Fatal(err)
	}
	checks := 0
	verify := s.leaderCheck.verify
	s.leaderCheck.verify = func() error { checks++; return verify() }
	rs := []Renewal{
		{Name: a.Name, LeaseID: a.LeaseID, Token: a.Token},
		{Name: gone.Name, LeaseID: gone.LeaseID, Token: gone.Token},
		{Name: b.Name, LeaseID: b.LeaseID, Token: 0},
		{Name: b.Name, LeaseID: b.LeaseID, Token: b.Token, Sign: true},
	}
	s.Renew(ctx, rs)
	if rs[0].Err != nil || rs[0].TTL != time.Minute {
		t.Errorf("held grant a: ttl %v, %v; want 1m, no error", rs[0].TTL, rs[0].Err)
	}
	if !errors.Is(rs[1].Err, fencelock.ErrNotHolder) {
		t.Errorf("released grant c: %v, want ErrNotHolder", rs[1].Err)
	}
	if !errors.Is(rs[2].Err, fencelock.ErrMissingToken) {
		t.Errorf("grant b without its token: %v, want ErrMissingToken", rs[2].Err)
	}
	if rs[3].Err != nil || rs[3].TTL != 2*time.Minute {
		t.Errorf("held grant b: ttl %v, %v; want 2m, no error", rs[3].TTL, rs[3].Err)
	}
	end, _ := s.leases.expiry(b.Name, b.Token)
	if seq, err := s.Verifier().VerifyWrite(rs[3].Sequencer, b.Name, b.Token); err != nil || !seq.LeaseEnd.After(time.Now().Add(time.Minute)) || seq.LeaseEnd.After(end) {
		t.Errorf("grant b's new sequencer: %+v, %v; want one that verifies, for its renewed lease, ending by %v", seq, err, end)
	}
	if rs[0].Sequencer != "" {
		t.Errorf("grant a, renewed without Sign, got a sequencer")
	}
	if checks != 1 {
		t.Errorf("%d leader checks for one batch, want 1", checks)
	}
}

// TestRenew_SignsEveryRenewalThatAsks: more renewals than one signature
// covers each get a sequencer that verifies.
func TestRenew_SignsEveryRenewalThatAsks(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	var rs []Renewal
	for i := range sequencer.MaxBatch + 2 {
		g, err := s.Acquire(t.Context(), AcquireRequest{Name: fencelock.LockName(fmt.Sprintf("s/%d", i)), TTL: time.Minute, NoSequencer: true})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, Renewal{Name: g.Name, LeaseID: g.LeaseID, Token: g.Token, Sign: true})
	}
	s.Renew(t.Context(), rs)
	v := s.Verifier()
	for _, r := range rs {
		seq, err := v.VerifyWrite(r.Sequencer, r.Name, r.Token)
		if r.Err != nil || err != nil {
			t.Fatalf("renewal of %s: %v; its sequencer: %v", r.Name, r.Err, err)
		}
		if end, _ := s.leases.expiry(r.Name, r.Token); seq.LeaseEnd.After(end) {
			t.Fatalf("renewal of %s: its sequencer ends at %v, after its lease (%v)", r.Name, seq.LeaseEnd, end)
		}
	}
}

// TestRenew_NoSequencerOnceTheLeaseEnded: a renewal whose lease ended
// between its renewal and its signature gets no sequencer, rather than one
// whose lease end is later than the lease's.
func TestRenew_NoSequencerOnceTheLeaseEnded(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	g, err := s.Acquire(t.Context(), AcquireRequest{Name: "gone", TTL: time.Minute, NoSequencer: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(t.Context(), g.Name, g.LeaseID, g.Token); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2} { // one alone, and a batch
		rs := make([]Renewal, n)
		for i := range rs {
			rs[i] = Renewal{Name: g.Name, LeaseID: g.LeaseID, Token: g.Token, Sign: true, TTL: time.Minute}
		}
		s.signRenewals(rs) // as if renewed just before the release
		for _, r := range rs {
			if r.Sequencer != "" {
				t.Fatalf("a renewal of an ended lease (batch of %d) got a sequencer", n)
			}
		}
	}
}
