package server

import (
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
)

// retryExpire is how soon a failed expire proposal is tried again while this
// node is still leader.
const retryExpire = 100 * time.Millisecond

// leaseTable is the leader's in-memory renewal bookkeeping. Renewals only
// move a deadline here; when a deadline passes, the table proposes
// expire(name, token) through Raft. It is active only on a ready leader.
type leaseTable struct {
	expire func(fencelock.LockName, fencelock.Token) error

	mu     sync.Mutex
	active bool
	epoch  uint64 // bumped by deactivate: an activation begun before it is void
	leases map[fencelock.LockName]*lease
}

type lease struct {
	token    fencelock.Token
	leaseID  fencelock.LeaseID
	owner    string // the identity that made the grant (fsm.Holder.Owner)
	ttl      time.Duration
	deadline time.Time // monotonic
	timer    *time.Timer
	expiring bool // the deadline passed; an expire is proposed
}

func newLeaseTable(expire func(fencelock.LockName, fencelock.Token) error) *leaseTable {
	return &leaseTable{expire: expire, leases: make(map[fencelock.LockName]*lease)}
}

// currentEpoch returns the epoch to pass to activate.
func (t *leaseTable) currentEpoch() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch
}

// isActive reports whether the table is armed: this node is a ready leader.
func (t *leaseTable) isActive() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}

// activate arms every current grant with its full TTL and extra from now
// and starts tracking new grants, unless leadership was lost since epoch
// was read. It returns the number of leases armed and whether it
// activated.
func (t *leaseTable) activate(epoch uint64, holders func() map[fencelock.LockName]fsm.Holder, now time.Time, extra time.Duration) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.epoch != epoch {
		return 0, false
	}
	t.active = true
	hs := holders()
	for name, h := range hs {
		t.armLocked(name, h, now, extra)
	}
	return len(hs), true
}

// deactivate stops every timer and forgets every lease.
func (t *leaseTable) deactivate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active = false
	t.epoch++
	for name, l := range t.leases {
		l.timer.Stop()
		delete(t.leases, name)
	}
}

// granted arms a new grant's lease, when active.
func (t *leaseTable) granted(name fencelock.LockName, h fsm.Holder, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active {
		t.armLocked(name, h, now, 0)
	}
}

func (t *leaseTable) armLocked(name fencelock.LockName, h fsm.Holder, now time.Time, extra time.Duration) {
	ttl := time.Duration(h.TTL)
	deadline := now.Add(ttl + extra)
	if l := t.leases[name]; l != nil {
		if l.token == h.Token && !deadline.After(l.deadline) {
			return // already armed at least this long: never shorten
		}
		l.timer.Stop()
	}
	l := &lease{token: h.Token, leaseID: h.LeaseID, owner: h.Owner, ttl: ttl, deadline: deadline}
	l.timer = time.AfterFunc(ttl+extra, func() { t.fire(name, l) })
	t.leases[name] = l
}

// ended forgets the lease of a grant that was released or expired.
func (t *leaseTable) ended(name fencelock.LockName, token fencelock.Token) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.leases[name]; l != nil && l.token == token {
		l.timer.Stop()
		delete(t.leases, name)
	}
}

// renewResult says what renew found.
type renewResult int

const (
	renewed   renewResult = iota
	notArmed              // no such lease here: ask the FSM why
	expiring              // the deadline passed; the expiry is under way
	notActive             // this node is not a ready leader
	notOwner              // another identity made the grant
)

// renew extends owner's named lease to now+TTL, never shortening it.
func (t *leaseTable) renew(name fencelock.LockName, id fencelock.LeaseID, token fencelock.Token, owner string, now time.Time) (time.Duration, renewResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return 0, notActive
	}
	l := t.leases[name]
	if l == nil || l.token != token || l.leaseID != id {
		return 0, notArmed
	}
	if l.owner != owner {
		return 0, notOwner
	}
	if l.expiring || !now.Before(l.deadline) {
		return 0, expiring
	}
	if d := now.Add(l.ttl); d.After(l.deadline) {
		l.deadline = d
	}
	return l.ttl, renewed
}

// expiry returns when the named grant expires unless renewed.
func (t *leaseTable) expiry(name fencelock.LockName, token fencelock.Token) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.leases[name]
	if l == nil || l.token != token {
		return time.Time{}, false
	}
	return l.deadline, true
}

// fire runs when a lease's timer goes off: it re-arms if the lease was
// renewed meanwhile, and otherwise proposes the expiry.
func (t *leaseTable) fire(name fencelock.LockName, l *lease) {
	t.mu.Lock()
	if !t.active || t.leases[name] != l {
		t.mu.Unlock()
		return
	}
	if left := time.Until(l.deadline); left > 0 && !l.expiring {
		l.timer.Reset(left)
		t.mu.Unlock()
		return
	}
	l.expiring = true
	t.mu.Unlock()
	if err := t.expire(name, l.token); err != nil {
		t.mu.Lock()
		if t.active && t.leases[name] == l {
			l.timer.Reset(retryExpire)
		}
		t.mu.Unlock()
	}
}
