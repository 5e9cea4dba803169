package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/fsm"
)

// Limits on request fields, checked at the API edge.
const (
	MaxHolderLen    = fencelock.MaxHolderLen
	MaxRequestIDLen = fencelock.MaxRequestIDLen
	MaxPageSize     = 1000
	defaultPageSize = 100
)

// ErrWithdrawn, as the cause of the context of an Acquire call that ends,
// says that its caller withdrew the request (an explicit cancel, not a
// broken connection): it is taken back at once, with no grace for a retry.
var ErrWithdrawn = errors.New("the caller withdrew its request")

// AcquireRequest asks for a lock.
type AcquireRequest struct {
	Name fencelock.LockName
	TTL  time.Duration
	// Wait is how long to queue for the lock; zero is a try-lock.
	Wait time.Duration
	// RequestID makes retries safe: a retry returns the same grant, or
	// resumes the same place in the queue.
	RequestID string
	// Holder is a label for humans, shown by Describe.
	Holder string
	owner  string // the caller's identity, with an ACL
	// Queued, if set, is called when the request waits in the queue; Gone,
	// if set, reports that the caller is gone though ctx has not ended (a
	// broken stream whose calls end a few at a time), and a grant made
	// meanwhile is not handed over. They are for an adapter that runs many
	// calls of one caller, as the API's Session stream does.
	Queued func()
	Gone   func() bool
	// KeepPlace: when Wait runs out, the request stays queued for a grace
	// (callGrace), so that the caller's next Acquire of the same RequestID
	// resumes its place (a long wait split into calls). Without it, the
	// request leaves the queue when Wait runs out.
	KeepPlace bool
	// NoSequencer: the grant carries no sequencer, and the node signs none
	// (one signature costs it more than the rest of a grant).
	NoSequencer bool
}

func (s *Server) validate(req AcquireRequest) error {
	if err := req.Name.Validate(); err != nil {
		return err
	}
	if req.TTL < s.cfg.MinTTL || req.TTL > s.cfg.MaxTTL {
		return fmt.Errorf("ttl %v is outside [%v, %v]: %w", req.TTL, s.cfg.MinTTL, s.cfg.MaxTTL, fencelock.ErrInvalidTTL)
	}
	if req.Wait < 0 {
		return fmt.Errorf("wait %v is negative: %w", req.Wait, fencelock.ErrInvalidArgument)
	}
	if err := fencelock.ValidateHolder(req.Holder); err != nil {
		return err
	}
	if req.RequestID != "" {
		return fencelock.ValidateRequestID(req.RequestID)
	}
	return nil
}

// Acquire grants the named lock, or queues for it up to req.Wait (FIFO) and
// returns the grant the moment it is made. The request is tied to this
// call: when the call ends without handing its grant over (ctx ended, the
// wait ran out), the request is taken back after a grace unless another
// call with the same request id comes for it (see claims); at once, before
// Acquire returns, when ctx ended with cause ErrWithdrawn. Errors:
// *fencelock.LockHeldError (try-lock, or the wait ran out), ErrInvalidName,
// ErrInvalidTTL, ErrInvalidArgument, ErrNotLeader, ErrUnavailable (outcome
// unknown: retry with the same RequestID), or ctx's error.
func (s *Server) Acquire(ctx context.Context, req AcquireRequest) (fencelock.Grant, error) {
	if err := s.validate(req); err != nil {
		return fencelock.Grant{}, err
	}
	if err := s.allow(ctx, acl.Lock, req.Name); err != nil {
		return fencelock.Grant{}, fmt.Errorf("acquire: %w", err)
	}
	req.owner = s.owner(ctx)
	if err := s.checkWaiters(req); err != nil {
		return fencelock.Grant{}, err
	}
	if req.Wait > s.cfg.MaxWait {
		// A longer wait ends as LockHeld; the client asks again, in place.
		req.Wait, req.KeepPlace = s.cfg.MaxWait, true
	}
	if req.RequestID == "" {
		req.RequestID = string(fencelock.NewLeaseID()) // a request must be addressable
	}
	if !s.Ready() {
		return fencelock.Grant{}, fmt.Errorf("acquire %q: %w", req.Name, s.notLeader())
	}
	cl, err := s.claims.attach(req.Name, req.RequestID, req.owner)
	switch {
	case errors.Is(err, errTooManyCalls):
		return fencelock.Grant{}, fmt.Errorf("acquire %q: %w", req.Name, err)
	case err != nil:
		return fencelock.Grant{}, fmt.Errorf("acquire %q: %v; ask again: %w", req.Name, err, fencelock.ErrUnavailable)
	}
	a := acquisition{s: s, req: req, call: cl, grace: callGrace}
	g, err := a.run(ctx)
	if err == nil && (ctx.Err() != nil || req.Gone != nil && req.Gone()) {
		// Nobody to hand the grant to: it is taken back with the request.
		g, err = fencelock.Grant{}, fmt.Errorf("acquire %q: %w", req.Name, ctx.Err())
	}
	if err == nil {
		s.claims.handed(cl)
		if req.NoSequencer {
			g.ClusterID = s.ClusterID()
		} else {
			g.Sequencer, g.ClusterID = s.Sequence(g.Name, g.Token, g.LeaseID, g.TTL)
		}
	}
	if errors.Is(context.Cause(ctx), ErrWithdrawn) {
		a.grace = 0
	}
	s.claims.detach(cl, a.grace, a.unknown)
	return g, err
}

// acquisition is one Acquire call on the node.
type acquisition struct {
	s    *Server
	req  AcquireRequest
	call *call
	// grace is how long the request keeps its place once the call ends
	// without its grant; unknown, whether the call's entry may still
	// commit (it was not seen to).
	grace   time.Duration
	unknown bool
}

// run proposes the request (unless it already waits in the queue) and
// waits for its grant.
func (a *acquisition) run(ctx context.Context) (fencelock.Grant, error) {
	s, req := a.s, a.req
	select {
	case ev := <-a.call.ch: // granted while no call waited
		return s.waitEnded(req.Name, ev)
	default:
	}
	if req.Wait == 0 || !s.fsm.Queued(req.Name, req.RequestID) {
		// The call was attached before the check: a grant made since
		// cannot be missed.
		res, err := s.applyKnown(acquireCommand(req))
		if err != nil {
			a.unknown = errors.Is(err, fencelock.ErrUnavailable)
			return fencelock.Grant{}, err
		}
		switch {
		case res.Err != nil:
			return fencelock.Grant{}, s.withExpiry(res.Err)
		case res.Grant != nil:
			return grantOf(req.Name, *res.Grant), nil
		case !res.Queued:
			return fencelock.Grant{}, fmt.Errorf("acquire %q: empty result: %w", req.Name, fencelock.ErrUnavailable)
		}
	}
	return a.wait(ctx)
}

// wait waits for the queued request's grant, the end of req.Wait, or ctx.
func (a *acquisition) wait(ctx context.Context) (fencelock.Grant, error) {
	s, req := a.s, a.req
	if req.Queued != nil {
		req.Queued()
	}
	timer := time.NewTimer(req.Wait)
	defer timer.Stop()
	select {
	case ev := <-a.call.ch:
		return s.waitEnded(req.Name, ev)
	case <-timer.C:
		select {
		case ev := <-a.call.ch: // granted just now
			return s.waitEnded(req.Name, ev)
		default:
		}
		if !req.KeepPlace {
			a.grace = 0
		}
		return fencelock.Grant{}, s.heldError(req.Name)
	case <-ctx.Done():
		// A grant that arrived meanwhile is taken back with the request:
		// nobody is there to receive it.
		return fencelock.Grant{}, fmt.Errorf("acquire %q: %w", req.Name, ctx.Err())
	}
}

// heldError is the LockHeldError of name as it is now.
func (s *Server) heldError(name fencelock.LockName) error {
	held := &fencelock.LockHeldError{Name: name}
	if l, ok := s.fsm.Get(name); ok && l.Holder != nil {
		held.Holder, held.Token = l.Holder.Holder, l.Holder.Token
	}
	return s.withExpiry(held)
}

// checkWaiters refuses a new request that would wait beyond the limits:
// MaxWaitersPerLock on its lock, and, with an ACL, MaxWaitersPerCaller
// for its owner. A request already queued or granted passes (a retry).
func (s *Server) checkWaiters(req AcquireRequest) error {
	if req.Wait <= 0 {
		return nil
	}
	queued, known, byOwner := s.fsm.Waits(req.Name, req.RequestID, req.owner)
	switch {
	case known:
		return nil
	case queued >= s.cfg.MaxWaitersPerLock:
		return fmt.Errorf("acquire %q: %d requests wait for it already, the limit: %w", req.Name, queued, fencelock.ErrResourceExhausted)
	case s.acl.Active() && byOwner >= s.cfg.MaxWaitersPerCaller:
		return fmt.Errorf("acquire %q: %s has %d requests waiting, the limit: %w", req.Name, req.owner, byOwner, fencelock.ErrResourceExhausted)
	}
	return nil
}

func acquireCommand(req AcquireRequest) fsm.Acquire {
	return fsm.Acquire{Name: req.Name, RequestID: req.RequestID, Holder: req.Holder, LeaseID: fencelock.NewLeaseID(), TTL: int64(req.TTL), Wait: req.Wait > 0, Owner: req.owner}
}

// waitEnded turns the event that ended a wait into Acquire's answer.
func (s *Server) waitEnded(name fencelock.LockName, ev waitEvent) (fencelock.Grant, error) {
	switch {
	case errors.Is(ev.err, errSteppedDown):
		return fencelock.Grant{}, fmt.Errorf("acquire %q: stopped waiting: %w", name, s.notLeader())
	case ev.err != nil:
		return fencelock.Grant{}, fmt.Errorf("acquire %q: %v; ask again: %w", name, ev.err, fencelock.ErrUnavailable)
	}
	return grantOf(name, ev.h), nil
}

func grantOf(name fencelock.LockName, h fsm.Holder) fencelock.Grant {
	return fencelock.Grant{Name: name, Token: h.Token, LeaseID: h.LeaseID, TTL: time.Duration(h.TTL)}
}

// withExpiry fills a LockHeldError's expiry from the lease table.
func (s *Server) withExpiry(err error) error {
	var held *fencelock.LockHeldError
	if errors.As(err, &held) && held.Expires.IsZero() {
		if t, ok := s.leases.expiry(held.Name, held.Token); ok {
			held.Expires = t
		}
	}
	return err
}

func validateGrantRef(name fencelock.LockName, id fencelock.LeaseID, token fencelock.Token) error {
	if err := name.Validate(); err != nil {
		return err
	}
	if err := id.Validate(); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("token 0: %w", fencelock.ErrMissingToken)
	}
	return nil
}

// Renewal is one grant to renew and, once Renew returns, its outcome: the
// TTL its lease was extended by and, if Sign, a new sequencer; or Err.
type Renewal struct {
	Name    fencelock.LockName
	LeaseID fencelock.LeaseID
	Token   fencelock.Token
	Sign    bool // a new sequencer is wanted

	TTL       time.Duration
	Sequencer string // "" before the cluster has a key
	Err       error
}

// Renew extends each grant's lease by its TTL, setting its TTL (and
// Sequencer) or Err. It writes nothing to disk; one check that this node
// still leads serves them all, and one signature up to
// sequencer.MaxBatch sequencers. Errors: ErrNotHolder (not the current
// grant), ErrLeaseExpired (the lease ran out first), ErrPermissionDenied
// (another identity's grant), ErrNotLeader, ErrUnavailable (ctx ended
// during the check), ctx's error (it had ended before), invalid input. A
// renewal whose lease ends before it is signed gets no Sequencer.
func (s *Server) Renew(ctx context.Context, rs []Renewal) {
	checked := false
	for i := range rs {
		r := &rs[i]
		r.TTL, r.Sequencer, r.Err = 0, "", validateGrantRef(r.Name, r.LeaseID, r.Token)
		if r.Err == nil {
			if err := s.allow(ctx, acl.Lock, r.Name); err != nil {
				r.Err = fmt.Errorf("renew: %w", err)
			}
		}
		checked = checked || r.Err == nil
	}
	if !checked {
		return
	}
	err := s.checkLeader(ctx)
	owner, now := s.owner(ctx), time.Now()
	for i := range rs {
		r := &rs[i]
		switch {
		case r.Err != nil:
		case err != nil:
			r.Err = fmt.Errorf("renew %q: %w", r.Name, err)
		default:
			r.TTL, r.Err = s.renew(r.Name, r.LeaseID, r.Token, owner, now)
		}
	}
	s.signRenewals(rs)
}

// checkLeader confirms that this node still leads with a heartbeat round
// that starts after the call. Errors: ctx's (it had ended), ErrNotLeader,
// ErrUnavailable (ctx ended during the check).
func (s *Server) checkLeader(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // the caller is gone: nothing was asked of the cluster
	}
	if err := s.leaderCheck.check(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", fencelock.ErrUnavailable, ctx.Err())
		}
		return s.notLeader()
	}
	return nil
}

// renew extends one grant's lease, on a node known to lead.
func (s *Server) renew(name fencelock.LockName, id fencelock.LeaseID, token fencelock.Token, owner string, now time.Time) (time.Duration, error) {
	ttl, r := s.leases.renew(name, id, token, owner, now)
	switch r {
	case renewed:
		s.metrics.renewals.Inc()
		return ttl, nil
	case notOwner:
		return 0, fmt.Errorf("renew %q token %d: the grant belongs to another caller: %w", name, token, fencelock.ErrPermissionDenied)
	case expiring:
		return 0, fmt.Errorf("renew %q token %d: %w", name, token, fencelock.ErrLeaseExpired)
	case notActive:
		return 0, fmt.Errorf("renew %q: %w", name, s.notLeader())
	}
	if s.fsm.Expired(id) {
		return 0, fmt.Errorf("renew %q token %d: %w", name, token, fencelock.ErrLeaseExpired)
	}
	return 0, fmt.Errorf("renew %q token %d: %w", name, token, fencelock.ErrNotHolder)
}

// Release ends the grant; the next waiter, if any, is granted in the same
// entry. Errors: ErrNotHolder, ErrPermissionDenied (another identity's
// grant), ErrNotLeader, ErrUnavailable, invalid input.
func (s *Server) Release(ctx context.Context, name fencelock.LockName, id fencelock.LeaseID, token fencelock.Token) error {
	if err := validateGrantRef(name, id, token); err != nil {
		return err
	}
	if err := s.allow(ctx, acl.Lock, name); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	res, err := s.Apply(ctx, fsm.Release{Name: name, LeaseID: id, Token: token, Owner: s.owner(ctx)})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	s.metrics.releases.Inc()
	s.record(Event{Kind: "release", Lock: string(name), Token: token, Identity: s.owner(ctx)})
	return nil
}

// CancelWait takes request rid out of name's wait queue; if it was granted
// meanwhile, the grant ends and the next waiter is granted. Errors:
// ErrNotFound (nothing waits or holds under rid), ErrNotLeader,
// ErrUnavailable, invalid input.
func (s *Server) CancelWait(ctx context.Context, name fencelock.LockName, rid string) error {
	if err := name.Validate(); err != nil {
		return err
	}
	if err := s.allow(ctx, acl.Lock, name); err != nil {
		return fmt.Errorf("cancel wait: %w", err)
	}
	if err := fencelock.ValidateRequestID(rid); err != nil {
		return err
	}
	owner := s.owner(ctx)
	res, err := s.Apply(ctx, fsm.CancelWait{Name: name, RequestID: rid, Owner: owner})
	if err != nil {
		return err
	}
	if res.Err == nil {
		s.claims.drop(name, rid, owner) // calls still waiting for it (an earlier attempt's) stop
	}
	return res.Err
}

func (s *Server) info(l fsm.Lock) fencelock.LockInfo {
	li := fencelock.LockInfo{Name: l.Name, WaiterCount: l.QueueLen}
	if h := l.Holder; h != nil {
		li.Holder, li.Token, li.TTL = h.Holder, h.Token, time.Duration(h.TTL)
		if h.GrantedAt != 0 {
			li.Acquired = time.Unix(0, h.GrantedAt)
		}
		li.Expires, _ = s.leases.expiry(l.Name, h.Token)
	}
	for _, w := range l.Waiters {
		li.Waiters = append(li.Waiters, fencelock.WaiterInfo{Holder: w.Holder, TTL: time.Duration(w.TTL)})
	}
	return li
}

// linearize waits until every entry committed before the call is applied
// here and this node is still the leader, so a read reflects them. It
// waits as long as ctx lasts, and as a proposal's wait (Apply) lasts.
func (s *Server) linearize(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.barrier(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fencelock.ErrUnavailable):
		return fmt.Errorf("read barrier: %w", err)
	default:
		return fmt.Errorf("read barrier: %v: %w", err, s.notLeader())
	}
}

// Describe returns the named lock. Errors: ErrNotFound if nobody holds or
// waits for it, ErrInvalidName, ErrNotLeader.
func (s *Server) Describe(ctx context.Context, name fencelock.LockName) (fencelock.LockInfo, error) {
	if err := name.Validate(); err != nil {
		return fencelock.LockInfo{}, err
	}
	if err := s.allow(ctx, acl.Read, name); err != nil {
		return fencelock.LockInfo{}, fmt.Errorf("describe: %w", err)
	}
	if err := s.linearize(ctx); err != nil {
		return fencelock.LockInfo{}, err
	}
	l, ok := s.fsm.Get(name)
	if !ok {
		return fencelock.LockInfo{}, fmt.Errorf("describe %q: %w", name, fencelock.ErrNotFound)
	}
	return s.info(l), nil
}

// List returns up to size locks whose names start with prefix and sort after
// pageToken (the last name of the previous page), and the next page token
// ("" on the last page).
func (s *Server) List(ctx context.Context, prefix, pageToken string, size int) ([]fencelock.LockInfo, string, error) {
	if size < 0 || size > MaxPageSize {
		return nil, "", fmt.Errorf("page size %d is outside [0, %d]: %w", size, MaxPageSize, fencelock.ErrInvalidArgument)
	}
	if size == 0 {
		size = defaultPageSize
	}
	if len(prefix) > fencelock.MaxNameLen || len(pageToken) > fencelock.MaxNameLen {
		return nil, "", fmt.Errorf("prefix or page token longer than %d bytes: %w", fencelock.MaxNameLen, fencelock.ErrInvalidArgument)
	}
	if err := s.allow(ctx, acl.Read, fencelock.LockName(prefix)); err != nil {
		return nil, "", fmt.Errorf("list (read on the whole prefix is needed): %w", err)
	}
	if err := s.linearize(ctx); err != nil {
		return nil, "", err
	}
	locks, more := s.fsm.List(prefix, pageToken, size)
	out := make([]fencelock.LockInfo, len(locks))
	for i, l := range locks {
		out[i] = s.info(l)
	}
	next := ""
	if more && len(locks) > 0 {
		next = string(locks[len(locks)-1].Name)
	}
	return out, next, nil
}

// notLeader returns ErrNotLeader with the leader's API address as a hint,
// when this node knows it.
func (s *Server) notLeader() error {
	_, id := s.raft.LeaderWithID()
	api, _ := s.fsm.MemberAPI(string(id))
	return &fencelock.NotLeaderError{Node: s.cfg.NodeID, LeaderID: string(id), LeaderAPI: api}
}
