package server

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
)

// Grace periods of a request that no call waits for, before the leader
// takes it back.
const (
	// callGrace follows the end of the last call that waited for a
	// request: its caller went away, its connection broke, or one call of
	// a long wait ended and the next is on its way. A client that is
	// still there comes back with the same request id well within it.
	callGrace = 3 * time.Second
	// leaderGrace is given to every queued request when a node becomes
	// leader: their callers were waiting on the old leader and must find
	// this one first.
	leaderGrace = 10 * time.Second
	// maxReaps bounds the take-backs proposed at once. Thousands of
	// requests whose callers died together are taken back a few batches
	// at a time, so that Raft's queue never holds more than these ahead of
	// a live caller's operation.
	maxReaps = 64
	// maxCallsPerRequest bounds the calls that wait for one request at
	// once: its client needs one, and a few more while a retry overtakes
	// an attempt it gave up. It bounds what one client can hold on the
	// node with calls that carry a request id already queued, which the
	// limits on waiters do not count.
	maxCallsPerRequest = 16
)

// errTooManyCalls refuses a call for a request that maxCallsPerRequest
// calls wait for already.
var errTooManyCalls = fmt.Errorf("%d calls wait for this request already: %w", maxCallsPerRequest, fencelock.ErrResourceExhausted)

// claims ties each request that may wait on this leader to the Acquire
// calls waiting for it, by lock name, request id and owner. A request that no call
// waits for is taken back after a grace: taken out of its queue, or, if it
// was granted while nobody waited, its grant ends. So a caller that is gone
// (its context ended, its stream or connection closed) leaves nothing
// queued and nothing granted to nobody, whatever route its request took.
type claims struct {
	s     *Server
	slots chan struct{} // one per take-back under way (maxReaps)
	wake  chan struct{} // buffered: a claim was armed first in line
	mu    sync.Mutex
	m     map[claimKey]*claim
	due   dueHeap // armed claims by due time; reapDue skips stale entries
}

// claimKey names a request: a request id is per lock and per owner (the
// caller's identity), so another identity's call never shares a claim.
type claimKey struct {
	name  fencelock.LockName
	rid   string
	owner string
}

// claim is one request's entry. It is in claims.m from the first call for
// the request until the request is handed to a caller or taken back.
type claim struct {
	key   claimKey
	calls []*call // at most maxCallsPerRequest
	// detaching: its request was granted while no call waited, and the
	// entry that records it (OpDetach) is on its way; calls are refused
	// until it commits, so that none is handed a grant the entry then
	// marks as reaching nobody.
	detaching bool
	// unknown: a call's entry for this request may still commit (its
	// outcome was not learnt), so the take-back proposes a cancel without
	// looking first.
	unknown bool
	reaping bool      // the take-back is under way; calls are refused
	due     time.Time // when it is taken back while no call waits; zero: not armed
}

// call is one Acquire call waiting for a request.
type call struct {
	c  *claim
	ch chan waitEvent // buffered: deliveries never block
}

// waitEvent ends a wait: the grant, or why the call must stop waiting here.
type waitEvent struct {
	h   fsm.Holder
	err error // errSteppedDown or errDropped; h is then empty
}

var (
	// errSteppedDown: this node stopped being the leader; the caller
	// answers not_leader and its client asks the new leader with the same
	// request id, where the request keeps its place.
	errSteppedDown = errors.New("stopped being the leader")
	// errDropped: the request was taken out of its queue (CancelWait).
	errDropped = errors.New("the request was taken out of the queue")
	// errBeingTakenBack: a call came for a request being taken back; it
	// asks again, and then finds the request id free.
	errBeingTakenBack = errors.New("the request is being taken back")
	// errDetaching: a call came for a request whose grant is being
	// recorded as reaching nobody; it asks again, and its Acquire entry
	// then finds the grant.
	errDetaching = errors.New("the request's grant is being recorded as reaching nobody")
)

func newClaims(s *Server) *claims {
	return &claims{s: s, slots: make(chan struct{}, maxReaps), wake: make(chan struct{}, 1), m: make(map[claimKey]*claim)}
}

// attach registers a call for request rid of name. errBeingTakenBack or
// errDetaching: the request is being taken back, or its grant recorded as
// reaching nobody; errTooManyCalls: maxCallsPerRequest wait for it;
// nothing is registered.
func (cs *claims) attach(name fencelock.LockName, rid, owner string) (*call, error) {
	k := claimKey{name, rid, owner}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.m[k]
	if c == nil {
		c = &claim{key: k}
		cs.m[k] = c
	}
	switch {
	case c.reaping:
		return nil, errBeingTakenBack
	case c.detaching:
		return nil, errDetaching
	case len(c.calls) >= maxCallsPerRequest:
		return nil, errTooManyCalls
	}
	c.due = time.Time{}
	cl := &call{c: c, ch: make(chan waitEvent, 1)}
	c.calls = append(c.calls, cl)
	return cl, nil
}

// handed records that cl's caller got the request's grant: the request is
// the caller's now, and nothing is taken back.
func (cs *claims) handed(cl *call) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m[cl.c.key] == cl.c {
		delete(cs.m, cl.c.key)
	}
}

// detach ends cl's wait. unknown: cl's entry may still commit. When no
// call waits any more, the request is taken back after grace (at once, before
// detach returns, if grace is 0), unless a call comes for it first; a
// request that is neither queued nor held (a refused try-lock) is simply
// forgotten.
func (cs *claims) detach(cl *call, grace time.Duration, unknown bool) {
	cs.mu.Lock()
	c := cl.c
	if i := slices.Index(c.calls, cl); i >= 0 {
		c.calls = slices.Delete(c.calls, i, i+1)
	}
	c.unknown = c.unknown || unknown
	if cs.m[c.key] != c || len(c.calls) > 0 || c.reaping {
		cs.mu.Unlock()
		return
	}
	if !c.unknown && !cs.s.fsm.Holds(c.key.name, c.key.rid, c.key.owner) {
		delete(cs.m, c.key) // nothing of it on the node
		cs.mu.Unlock()
		return
	}
	if grace > 0 {
		cs.armLocked(c, grace)
		if cs.s.fsm.HeldBy(c.key.name, c.key.rid, c.key.owner) {
			cs.detachLocked(c) // granted, and its caller went away
		}
		cs.mu.Unlock()
		return
	}
	cs.mu.Unlock()
	cs.reap(c)
}

// orphan gives owner's request rid of name, which no call waits for, a
// grace before it is taken back (a new leader's queued requests).
func (cs *claims) orphan(name fencelock.LockName, rid, owner string, grace time.Duration) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	k := claimKey{name, rid, owner}
	if cs.m[k] != nil {
		return
	}
	c := &claim{key: k}
	cs.m[k] = c
	cs.armLocked(c, grace)
}

// armLocked has reapDue take c back after grace.
func (cs *claims) armLocked(c *claim, grace time.Duration) {
	c.due = time.Now().Add(grace)
	heap.Push(&cs.due, armed{c: c, at: c.due})
	if cs.due[0].c == c {
		select {
		case cs.wake <- struct{}{}:
		default:
		}
	}
}

// reapDue takes back each armed claim when it is due, in due order, at
// most maxReaps at once, until the node closes. One goroutine for every
// claim: thousands that fall due together start no more take-backs than
// the slots allow. It is one of the server's goroutines (wg).
func (cs *claims) reapDue() {
	defer cs.s.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		c, wait := cs.nextDue(time.Now())
		if c == nil {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-cs.wake:
			case <-cs.s.ctx.Done():
				return
			}
			continue
		}
		select {
		case cs.slots <- struct{}{}:
		case <-cs.s.ctx.Done():
			return
		}
		go func() {
			defer func() { <-cs.slots }()
			cs.takeBack(c)
		}()
	}
}

// nextDue pops the first armed claim that is due at now, or returns how
// long until one is. An entry whose claim was armed again or disarmed
// since is dropped.
func (cs *claims) nextDue(now time.Time) (*claim, time.Duration) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for len(cs.due) > 0 {
		a := cs.due[0]
		if !a.c.due.Equal(a.at) {
			heap.Pop(&cs.due)
			continue
		}
		if d := a.at.Sub(now); d > 0 {
			return nil, d
		}
		heap.Pop(&cs.due)
		a.c.due = time.Time{}
		return a.c, 0
	}
	return nil, time.Hour
}

// reap takes c's request back (takeBack) in one of maxReaps slots.
func (cs *claims) reap(c *claim) {
	select {
	case cs.slots <- struct{}{}:
	case <-cs.s.ctx.Done():
		return
	}
	defer func() { <-cs.slots }()
	cs.takeBack(c)
}

// takeBack takes c's request back if still no call waits for it: a cancel
// entry, proposed until it commits or this node stops leading (the next
// leader gives the request a grace of its own). Calls that come meanwhile
// are refused, so none is handed a grant the cancel then ends; a call that
// came before keeps the request, and one that came and went arms it anew
// (its own grace then runs).
func (cs *claims) takeBack(c *claim) {
	cs.mu.Lock()
	if cs.m[c.key] != c || len(c.calls) > 0 || c.reaping || !c.due.IsZero() {
		cs.mu.Unlock()
		return
	}
	c.reaping, c.due = true, time.Time{}
	cs.mu.Unlock()
	defer func() {
		cs.mu.Lock()
		if cs.m[c.key] == c {
			delete(cs.m, c.key)
		}
		cs.mu.Unlock()
	}()
	s := cs.s
	res, ok := cs.proposeUntilDone(fsm.CancelWait{Name: c.key.name, RequestID: c.key.rid, Owner: c.key.owner}, s.metrics.takeBackRetries.Inc)
	if ok && res.Err == nil {
		s.metrics.takenBack.Inc()
		s.record(Event{Kind: "take-back", Lock: string(c.key.name)})
		s.log.Debug("took back a request nobody waits for", "lock", c.key.name)
	}
}

// proposeUntilDone proposes p until it commits (ok) or this node stops
// leading or closes, calling retried (if set) before each retry.
func (cs *claims) proposeUntilDone(p fsm.Payload, retried func()) (fsm.Result, bool) {
	s := cs.s
	for backoff := 50 * time.Millisecond; s.ctx.Err() == nil; backoff = min(2*backoff, time.Second) {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
		res, err := s.Apply(ctx, p)
		cancel()
		switch {
		case err == nil:
			return res, true
		case errors.Is(err, fencelock.ErrNotLeader):
			return fsm.Result{}, false
		}
		if retried != nil {
			retried()
		}
		s.log.Warn("proposing a node's entry failed; retrying", "entry", opName(p), "err", err)
		select {
		case <-s.ctx.Done():
		case <-time.After(backoff):
		}
	}
	return fsm.Result{}, false
}

// deliver hands grant h to the calls waiting for its request. On a ready
// leader, a grant that no call waits for is recorded as reaching nobody
// (detachGrant), so that whichever node leads takes it back after the
// grace unless a call for it comes first; so is one whose calls all end
// without handing it over (detach). It never blocks.
func (cs *claims) deliver(name fencelock.LockName, h fsm.Holder) {
	if h.RequestID == "" {
		return
	}
	k := claimKey{name, h.RequestID, h.Owner}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.m[k]
	if c != nil && len(c.calls) > 0 {
		for _, cl := range c.calls {
			send(cl.ch, waitEvent{h: h})
		}
		return
	}
	if !cs.s.leases.isActive() || c != nil && (c.reaping || c.detaching) {
		return
	}
	if c == nil {
		c = &claim{key: k}
		cs.m[k] = c
	}
	if c.due.IsZero() {
		cs.armLocked(c, callGrace)
	}
	cs.detachLocked(c)
}

// detachLocked records c's grant as reaching nobody (detachGrant), unless
// that is under way.
func (cs *claims) detachLocked(c *claim) {
	if c.detaching || c.reaping {
		return
	}
	c.detaching = true
	cs.s.wg.Add(1)
	go cs.detachGrant(c)
}

// detachGrant proposes OpDetach for c's grant, in one of maxReaps slots,
// until it commits or this node stops leading; then calls may come for c.
func (cs *claims) detachGrant(c *claim) {
	s := cs.s
	defer s.wg.Done()
	defer func() {
		cs.mu.Lock()
		c.detaching = false
		cs.mu.Unlock()
	}()
	select {
	case cs.slots <- struct{}{}:
	case <-s.ctx.Done():
		return
	}
	defer func() { <-cs.slots }()
	cs.proposeUntilDone(fsm.Detach{Name: c.key.name, RequestID: c.key.rid, Owner: c.key.owner}, nil)
}

// drop ends the calls waiting for owner's request rid with errDropped, after a
// cancel of it committed. The claim stays while calls are attached: an
// entry of one of them may still queue the request anew, and their detach
// then takes it back.
func (cs *claims) drop(name fencelock.LockName, rid, owner string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	k := claimKey{name, rid, owner}
	c := cs.m[k]
	if c == nil || c.reaping {
		return
	}
	for _, cl := range c.calls {
		send(cl.ch, waitEvent{err: errDropped})
	}
	if len(c.calls) == 0 {
		c.due = time.Time{}
		delete(cs.m, k)
	}
}

// failAll ends every wait with errSteppedDown and forgets every claim: the
// next leader gives the queued requests a grace of its own.
func (cs *claims) failAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for k, c := range cs.m {
		for _, cl := range c.calls {
			send(cl.ch, waitEvent{err: errSteppedDown})
		}
		c.due = time.Time{}
		delete(cs.m, k)
	}
	cs.due = nil
}

// len returns the number of requests with a claim.
func (cs *claims) len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.m)
}

// send puts ev in ch unless an earlier event (a grant) is there; it wins.
func send(ch chan waitEvent, ev waitEvent) {
	select {
	case ch <- ev:
	default:
	}
}

// armed is one entry of dueHeap: claim c is due at at, if c.due is still at.
type armed struct {
	c  *claim
	at time.Time
}

// dueHeap is a container/heap of armed claims, earliest first.
type dueHeap []armed

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(armed)) }
func (h *dueHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = armed{}
	*h = old[:len(old)-1]
	return a
}
