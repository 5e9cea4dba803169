package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/wire"
)

// Limits on request fields, checked at the API edge.
const (
	MaxHolderLen    = fencelock.MaxHolderLen
	MaxRequestIDLen = fencelock.MaxRequestIDLen
	MaxPageSize     = 1000
	defaultPageSize = 100
)

// AcquireRequest asks for a lock.
type AcquireRequest struct {
	Name fencelock.LockName
	TTL  time.Duration
	// Wait is how long to queue for the lock; zero is a try-lock.
	Wait time.Duration
	// RequestID makes retries safe: a retry returns the same grant.
	RequestID string
	// Holder is a label for humans, shown by Describe.
	Holder string
	// ReturnQueued makes an Acquire that joins the wait queue return
	// errQueued at once instead of waiting; the caller waits later with an
	// Acquire of the same RequestID (Batch does this).
	ReturnQueued bool
	// KeepPlace: when Wait runs out, the request stays queued for
	// claimWindow instead of leaving the queue, so that the caller's next
	// Acquire of the same RequestID resumes its place (a long wait split
	// into calls). The answer is still a LockHeldError; a caller whose
	// wait is over then takes the request back with CancelWait.
	KeepPlace bool
}

// errQueued: the request waits in the lock's queue (ReturnQueued).
var errQueued = errors.New("queued")

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
// returns the grant the moment it is made. Errors: *fencelock.LockHeldError
// (try-lock, or the wait ran out), ErrInvalidName, ErrInvalidTTL,
// ErrInvalidArgument, ErrNotLeader, ErrUnavailable (outcome unknown: retry
// with the same RequestID), or ctx's error.
func (s *Server) Acquire(ctx context.Context, req AcquireRequest) (fencelock.Grant, error) {
	if err := s.validate(req); err != nil {
		return fencelock.Grant{}, err
	}
	req.Wait = min(req.Wait, s.cfg.MaxWait) // a longer wait ends as LockHeld; the client asks again
	if req.Wait > 0 && req.RequestID == "" {
		req.RequestID = string(fencelock.NewLeaseID()) // a waiter must be addressable
	}
	var ch chan waitEvent
	var seq uint64
	if req.Wait > 0 && !req.ReturnQueued {
		var err error
		if ch, seq, err = s.waiters.add(req.Name, req.RequestID); err != nil {
			return fencelock.Grant{}, askAgain(req.Name, err)
		}
		defer s.waiters.remove(req.Name, req.RequestID, ch)
	} else if req.RequestID != "" {
		if err := s.waiters.arrived(req.Name, req.RequestID); err != nil {
			return fencelock.Grant{}, askAgain(req.Name, err)
		}
	}
	var res fsm.Result
	if ch != nil && s.Ready() && s.fsm.Queued(req.Name, req.RequestID) {
		// Already in the queue (a Batch queued it, or this is a retry): wait
		// without another entry. The waiter was registered before the check,
		// so a grant made since cannot be missed.
		res.Queued = true
	} else {
		var err error
		if res, err = s.Apply(ctx, acquireCommand(req)); err != nil {
			if req.Wait > 0 && errors.Is(err, fencelock.ErrUnavailable) {
				// The entry may still commit, queued with nobody waiting
				// (the caller went away during the sync): a live client
				// comes back for it within the claim window, as for a
				// request a Batch queued; otherwise it is dropped.
				s.expectClaim(req.Name, req.RequestID)
			}
			return fencelock.Grant{}, err
		}
	}
	if g, err := s.acquireOutcome(req, res); !errors.Is(err, errQueued) || req.ReturnQueued {
		return g, err
	}
	timer := time.NewTimer(req.Wait)
	defer timer.Stop()
	select {
	case ev := <-ch:
		return s.waitEnded(req.Name, ev)
	case <-timer.C:
		if req.KeepPlace {
			select {
			case ev := <-ch: // granted just now
				return s.waitEnded(req.Name, ev)
			default:
			}
			return fencelock.Grant{}, s.keepPlace(req.Name, req.RequestID)
		}
	case <-ctx.Done():
		if req.KeepPlace && errors.Is(context.Cause(ctx), errPipeClosed) {
			// The pipe broke, not the caller: keep the place (and a grant
			// made just now) for the client's retry with the same request
			// id, as when a call's time runs out.
			return fencelock.Grant{}, s.keepPlace(req.Name, req.RequestID)
		}
	}
	// Gave up. A grant that arrived meanwhile is still ours if the caller is.
	select {
	case ev := <-ch:
		if ev.err != nil || ctx.Err() == nil {
			return s.waitEnded(req.Name, ev)
		}
	default:
	}
	if !s.waiters.beginCancel(req.Name, req.RequestID, seq) {
		// Another call came for the same request since this one began
		// (its retry, on a new connection): the request is its now, place
		// and grant.
		if err := ctx.Err(); err != nil {
			return fencelock.Grant{}, fmt.Errorf("acquire %q: %w", req.Name, err)
		}
		return fencelock.Grant{}, s.withExpiry(&fencelock.LockHeldError{Name: req.Name})
	}
	// Calls that come for the request until the cancel commits are told
	// to ask again: one that waited could be handed a grant the cancel
	// then ends.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ApplyTimeout)
	defer cancel()
	_, err := s.Apply(cctx, fsm.Command{Op: fsm.OpCancelWait, Name: req.Name, RequestID: req.RequestID})
	if err == nil && s.waiters.count(req.Name, req.RequestID) > 1 {
		// An older call still waits for the request (this one was its
		// retry): it must ask again, or it waits for a request that is
		// gone.
		s.waiters.drop(req.Name, req.RequestID)
	}
	s.waiters.endCancel(req.Name, req.RequestID)
	if err != nil {
		if ctx.Err() == nil {
			// Still queued, as far as we know: the client asks again with the
			// same request id and keeps its place (or gets its grant).
			return fencelock.Grant{}, fmt.Errorf("acquire %q: the wait ran out, and leaving the queue did not commit: %w", req.Name, err)
		}
		s.log.Warn("leave wait queue failed; a grant it gets ends with its TTL", "lock", req.Name, "err", err)
	}
	if err := ctx.Err(); err != nil {
		return fencelock.Grant{}, fmt.Errorf("acquire %q: %w", req.Name, err)
	}
	held := &fencelock.LockHeldError{Name: req.Name}
	if l, ok := s.fsm.Get(req.Name); ok && l.Holder != nil {
		held.Holder, held.Token = l.Holder.Holder, l.Holder.Token
	}
	return fencelock.Grant{}, s.withExpiry(held)
}

// askAgain answers a call that came for a request being taken out of the
// queue: unavailable, so the client asks again, and then finds the request
// id free.
func askAgain(name fencelock.LockName, err error) error {
	return fmt.Errorf("acquire %q: %v; ask again: %w", name, err, fencelock.ErrUnavailable)
}

func acquireCommand(req AcquireRequest) fsm.Command {
	return fsm.Command{Op: fsm.OpAcquire, Name: req.Name, RequestID: req.RequestID,
		Holder: req.Holder, LeaseID: fencelock.NewLeaseID(), TTL: int64(req.TTL), Wait: req.Wait > 0}
}

// acquireOutcome turns an applied acquire into the grant, the refusal, or
// errQueued.
func (s *Server) acquireOutcome(req AcquireRequest, res fsm.Result) (fencelock.Grant, error) {
	switch {
	case res.Err != nil:
		return fencelock.Grant{}, s.withExpiry(res.Err)
	case res.Grant != nil:
		return grantOf(req.Name, *res.Grant), nil
	case !res.Queued:
		return fencelock.Grant{}, fmt.Errorf("acquire %q: empty result: %w", req.Name, fencelock.ErrUnavailable)
	}
	return fencelock.Grant{}, errQueued
}

// keepPlace ends a KeepPlace wait that ran out: the request stays queued
// for claimWindow (or until a call comes to wait for it again), and the
// answer is the lock's current holder.
func (s *Server) keepPlace(name fencelock.LockName, rid string) error {
	s.expectClaim(name, rid)
	held := &fencelock.LockHeldError{Name: name}
	if l, ok := s.fsm.Get(name); ok && l.Holder != nil {
		held.Holder, held.Token = l.Holder.Holder, l.Holder.Token
	}
	return s.withExpiry(held)
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

// Renew extends the grant's lease by its TTL and returns the TTL. It writes
// nothing to disk. Errors: ErrNotHolder (not the current grant),
// ErrLeaseExpired (the lease ran out first), ErrNotLeader, invalid input.
func (s *Server) Renew(ctx context.Context, name fencelock.LockName, id fencelock.LeaseID, token fencelock.Token) (time.Duration, error) {
	if err := validateGrantRef(name, id, token); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.renewChecked(ctx, name, id, token, s.leaderCheck.check(ctx))
}

// renewChecked renews after the leadership check that ended with checkErr
// (Batch checks once for all its renewals).
func (s *Server) renewChecked(ctx context.Context, name fencelock.LockName, id fencelock.LeaseID, token fencelock.Token, checkErr error) (time.Duration, error) {
	if checkErr != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("renew %q: %w: %w", name, fencelock.ErrUnavailable, ctx.Err())
		}
		return 0, fmt.Errorf("renew %q: %w", name, s.notLeader())
	}
	ttl, r := s.leases.renew(name, id, token, time.Now())
	switch r {
	case renewed:
		s.metrics.renewals.Inc()
		return ttl, nil
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
// entry. Errors: ErrNotHolder, ErrNotLeader, ErrUnavailable, invalid input.
func (s *Server) Release(ctx context.Context, name fencelock.LockName, id fencelock.LeaseID, token fencelock.Token) error {
	if err := validateGrantRef(name, id, token); err != nil {
		return err
	}
	res, err := s.Apply(ctx, releaseCommand(name, id, token))
	if err != nil {
		return err
	}
	return s.releaseOutcome(res)
}

func releaseCommand(name fencelock.LockName, id fencelock.LeaseID, token fencelock.Token) fsm.Command {
	return fsm.Command{Op: fsm.OpRelease, Name: name, LeaseID: id, Token: token}
}

func (s *Server) releaseOutcome(res fsm.Result) error {
	if res.Err != nil {
		return res.Err
	}
	s.metrics.releases.Inc()
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
	if err := fencelock.ValidateRequestID(rid); err != nil {
		return err
	}
	res, err := s.Apply(ctx, fsm.Command{Op: fsm.OpCancelWait, Name: name, RequestID: rid})
	if err != nil {
		return err
	}
	return res.Err
}

// LockInfo describes one lock.
type LockInfo struct {
	Name    fencelock.LockName
	Holder  string // label; "" if the lock is free
	Token   fencelock.Token
	Expires time.Time // zero if unknown (not the leader) or free
	TTL     time.Duration
	Waiters []WaiterInfo
}

// WaiterInfo describes one queued Acquire.
type WaiterInfo struct {
	Holder string
	TTL    time.Duration
}

func (s *Server) info(l fsm.Lock) LockInfo {
	li := LockInfo{Name: l.Name}
	if h := l.Holder; h != nil {
		li.Holder, li.Token, li.TTL = h.Holder, h.Token, time.Duration(h.TTL)
		li.Expires, _ = s.leases.expiry(l.Name, h.Token)
	}
	for _, w := range l.Waiters {
		li.Waiters = append(li.Waiters, WaiterInfo{Holder: w.Holder, TTL: time.Duration(w.TTL)})
	}
	return li
}

// linearize waits until every entry committed before the call is applied
// here and this node is still the leader, so a read reflects them.
func (s *Server) linearize(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.raft.Barrier(s.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("read barrier: %v: %w", err, s.notLeader())
	}
	return nil
}

// Describe returns the named lock. Errors: ErrNotFound if nobody holds or
// waits for it, ErrInvalidName, ErrNotLeader.
func (s *Server) Describe(ctx context.Context, name fencelock.LockName) (LockInfo, error) {
	if err := name.Validate(); err != nil {
		return LockInfo{}, err
	}
	if err := s.linearize(ctx); err != nil {
		return LockInfo{}, err
	}
	l, ok := s.fsm.Get(name)
	if !ok {
		return LockInfo{}, fmt.Errorf("describe %q: %w", name, fencelock.ErrNotFound)
	}
	return s.info(l), nil
}

// List returns up to size locks whose names start with prefix and sort after
// pageToken (the last name of the previous page), and the next page token
// ("" on the last page).
func (s *Server) List(ctx context.Context, prefix, pageToken string, size int) ([]LockInfo, string, error) {
	if size < 0 || size > MaxPageSize {
		return nil, "", fmt.Errorf("page size %d is outside [0, %d]: %w", size, MaxPageSize, fencelock.ErrInvalidArgument)
	}
	if size == 0 {
		size = defaultPageSize
	}
	if len(prefix) > fencelock.MaxNameLen || len(pageToken) > fencelock.MaxNameLen {
		return nil, "", fmt.Errorf("prefix or page token longer than %d bytes: %w", fencelock.MaxNameLen, fencelock.ErrInvalidArgument)
	}
	if err := s.linearize(ctx); err != nil {
		return nil, "", err
	}
	locks, more := s.fsm.List(prefix, pageToken, size)
	out := make([]LockInfo, len(locks))
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
	msg := fmt.Sprintf("node %s is not the leader", s.cfg.NodeID)
	if api != "" {
		msg += fmt.Sprintf("; the leader is %s at %s", id, api)
	}
	return wire.NewNotLeader(api, msg)
}
