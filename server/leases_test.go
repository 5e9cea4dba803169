package server

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
)

func TestLeaseTable_ActivationVoidAfterLostLeadership(t *testing.T) {
	lt := newLeaseTable(func(fencelock.LockName, fencelock.Token) error { return nil })
	holders := func() map[fencelock.LockName]fsm.Holder {
		return map[fencelock.LockName]fsm.Holder{"a": {Token: 7, LeaseID: "L", TTL: int64(time.Minute)}}
	}
	epoch := lt.currentEpoch() // became leader; the barrier is under way
	lt.deactivate()            // ...and lost leadership before it ended
	if _, ok := lt.activate(epoch, holders, time.Now()); ok || lt.isActive() {
		t.Fatal("an activation begun before leadership was lost armed the lease table")
	}
	if _, ok := lt.activate(lt.currentEpoch(), holders, time.Now()); !ok || !lt.isActive() {
		t.Fatal("a fresh activation did not arm the lease table")
	}
	lt.deactivate()
}

func TestLeaseTable_RenewNeverShortens(t *testing.T) {
	lt := newLeaseTable(func(fencelock.LockName, fencelock.Token) error { return nil })
	now := time.Now()
	lt.activate(lt.currentEpoch(), func() map[fencelock.LockName]fsm.Holder { return nil }, now)
	defer lt.deactivate()
	lt.granted("a", fsm.Holder{Token: 3, LeaseID: "L", TTL: int64(time.Minute)}, now.Add(30*time.Second))
	if _, r := lt.renew("a", "L", 3, now); r != renewed {
		t.Fatalf("renew: %v", r)
	}
	if exp, _ := lt.expiry("a", 3); !exp.Equal(now.Add(90 * time.Second)) {
		t.Errorf("an earlier renewal moved the deadline to %v, want it kept at +90s", exp.Sub(now))
	}
	if _, r := lt.renew("a", "OTHER", 3, now); r != notArmed {
		t.Errorf("renew with a wrong lease id: %v, want notArmed", r)
	}
}
