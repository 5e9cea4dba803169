package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// MaxBatchItems bounds one Batch request.
const MaxBatchItems = 1024

// Batch runs every item as the unary method would, and their Raft entries
// share appends and syncs. An Acquire that joins a wait queue does not wait:
// its result is "queued", and the caller waits with a unary Acquire of the
// same request id.
func (a *api) Batch(ctx context.Context, req *connect.Request[fencelockv1.BatchRequest]) (*connect.Response[fencelockv1.BatchResponse], error) {
	resp, err := a.batch(ctx, req.Msg.Items)
	if err != nil {
		return nil, a.fail("Batch", err)
	}
	return connect.NewResponse(resp), nil
}

// batch runs a Batch request's items (the Connect API).
func (a *api) batch(ctx context.Context, items []*fencelockv1.BatchItem) (*fencelockv1.BatchResponse, error) {
	r, err := a.startBatch(items)
	if err != nil {
		return nil, err
	}
	// Items ignore the request's cancellation (none waits: a queued Acquire
	// returns at once), so each finishes when its entry commits or the node
	// loses leadership. Proposing is bounded by ApplyTimeout (startBatch),
	// and so is waiting for the outcomes, like a unary call.
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.finish()
	}()
	timer := time.NewTimer(a.cfg.ApplyTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return &fencelockv1.BatchResponse{Results: r.out}, nil
	case <-timer.C:
		return nil, r.timedOut()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// batchRun is a Batch request under way: startBatch proposes its entries,
// in the caller's goroutine (so that they reach Raft without a hand-off),
// and finish collects their outcomes.
type batchRun struct {
	s     *Server
	items []*fencelockv1.BatchItem
	out   []*fencelockv1.BatchResult // out[i] is item i's result

	proposals []proposal
	acquires  []AcquireRequest
	renews    []int
	checked   chan error // the renewals' leadership check; nil if none
}

// startBatch validates the request and proposes every item's Raft entry
// (in the batch's order, with no goroutine per item); it starts one
// leadership check for all the renewals meanwhile.
func (a *api) startBatch(items []*fencelockv1.BatchItem) (*batchRun, error) {
	if len(items) > MaxBatchItems {
		return nil, fmt.Errorf("batch of %d items, more than %d: %w", len(items), MaxBatchItems, fencelock.ErrTooLarge)
	}
	a.metrics.batchItems.Observe(float64(len(items)))
	s := (*Server)(a)
	r := &batchRun{s: s, items: items, out: make([]*fencelockv1.BatchResult, len(items)),
		proposals: make([]proposal, len(items)), acquires: make([]AcquireRequest, len(items))}
	out := r.out
	// Proposing waits only while Raft's queue is full (a stalled disk):
	// all of it within ApplyTimeout, and items left then are not proposed.
	deadline := time.Now().Add(s.cfg.ApplyTimeout)
	proposedNow := false
	propose := func(i int, method string, cmd fsm.Command) {
		left := time.Until(deadline)
		if left <= 0 {
			out[i] = r.fail(method, fmt.Errorf("not proposed within %v, Raft's queue is full: %w", s.cfg.ApplyTimeout, fencelock.ErrUnavailable))
			return
		}
		r.proposals[i] = s.proposeWithin(cmd, left)
		proposedNow = proposedNow || r.proposals[i].later == nil
	}
	// One leadership check for all the renewals, started at once (every
	// renewal has arrived, so its answer proves leadership after each of
	// them; see leaderCheck), not behind the proposals.
	for _, it := range items {
		if it.GetRenew() != nil {
			r.checked = make(chan error, 1)
			go func() { r.checked <- s.leaderCheck.check(context.Background()) }()
			break
		}
	}
	for i, it := range items {
		switch op := it.GetOp().(type) {
		case *fencelockv1.BatchItem_Acquire:
			req := acquireRequest(op.Acquire)
			if err := s.validate(req); err != nil {
				out[i] = r.fail("Acquire", err)
				continue
			}
			if req.Wait > 0 && req.RequestID == "" {
				out[i] = r.fail("Acquire", fmt.Errorf("an acquire that may wait needs a request_id in a batch: %w", fencelock.ErrInvalidArgument))
				continue
			}
			if req.RequestID != "" {
				if err := s.waiters.arrived(req.Name, req.RequestID); err != nil {
					out[i] = r.fail("Acquire", askAgain(req.Name, err))
					continue
				}
			}
			req.Wait = min(req.Wait, s.cfg.MaxWait)
			r.acquires[i] = req
			propose(i, "Acquire", acquireCommand(req))
		case *fencelockv1.BatchItem_Renew:
			m := op.Renew
			if err := validateGrantRef(fencelock.LockName(m.Name), fencelock.LeaseID(m.LeaseId), fencelock.Token(m.Token)); err != nil {
				out[i] = r.fail("Renew", err)
				continue
			}
			r.renews = append(r.renews, i)
		case *fencelockv1.BatchItem_Release:
			m := op.Release
			name, id, token := fencelock.LockName(m.Name), fencelock.LeaseID(m.LeaseId), fencelock.Token(m.Token)
			if err := validateGrantRef(name, id, token); err != nil {
				out[i] = r.fail("Release", err)
				continue
			}
			propose(i, "Release", releaseCommand(name, id, token))
		default:
			out[i] = r.fail("Batch", fmt.Errorf("batch item %d has no operation: %w", i, fencelock.ErrInvalidArgument))
		}
	}
	if proposedNow {
		// Acquires this batch held back after its last entry go with it,
		// not after the hold window.
		s.deferrals.flush()
	}
	return r, nil
}

func (r *batchRun) fail(method string, err error) *fencelockv1.BatchResult {
	(*api)(r.s).count(method, err)
	return &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Error{Error: wire.ToBatchError(err)}}
}

// timedOut is the error of a batch not done within ApplyTimeout.
func (r *batchRun) timedOut() error {
	return fmt.Errorf("batch of %d items not done within %v: %w", len(r.items), r.s.cfg.ApplyTimeout, fencelock.ErrUnavailable)
}

// finish answers the renewals and waits for every proposed entry, filling
// r.out.
func (r *batchRun) finish() {
	s, out := r.s, r.out
	if r.checked != nil {
		ctx := context.Background()
		checkErr := <-r.checked
		for _, i := range r.renews {
			m := r.items[i].GetRenew()
			ttl, err := s.renewChecked(ctx, fencelock.LockName(m.Name), fencelock.LeaseID(m.LeaseId), fencelock.Token(m.Token), checkErr)
			if err != nil {
				out[i] = r.fail("Renew", err)
				continue
			}
			out[i] = &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Renew{Renew: &fencelockv1.RenewResponse{Ttl: durationpb.New(ttl)}}}
		}
	}

	for i, p := range r.proposals {
		if p.none() {
			continue
		}
		res, err := s.await(p)
		switch p.op {
		case fsm.OpAcquire:
			req := r.acquires[i]
			var g fencelock.Grant
			if err == nil {
				g, err = s.acquireOutcome(req, res)
			}
			switch {
			case errors.Is(err, errQueued):
				s.expectClaim(req.Name, req.RequestID)
				out[i] = &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Queued{Queued: &fencelockv1.AcquireQueued{}}}
			case err != nil:
				out[i] = r.fail("Acquire", err)
			default:
				out[i] = &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Acquire{Acquire: acquireResponse(g)}}
			}
		case fsm.OpRelease:
			if err == nil {
				err = s.releaseOutcome(res)
			}
			if err != nil {
				out[i] = r.fail("Release", err)
				continue
			}
			out[i] = &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Release{Release: &fencelockv1.ReleaseResponse{}}}
		}
	}
}

// claimWindow is how long a request that Batch queued may go without the
// unary Acquire that waits for it (the client sends that at once) before
// the leader takes it out of the queue: otherwise a client that died in
// between would leave a waiter that is granted to nobody.
const claimWindow = 10 * time.Second

// claimRecheck: a request unclaimed after claimWindow is dropped only if it
// is still unclaimed this much later.
const claimRecheck = time.Second

// expectClaim drops request rid from name's queue after claimWindow unless
// a call waits for it by then.
func (s *Server) expectClaim(name fencelock.LockName, rid string) {
	unclaimed := func() bool {
		return s.ctx.Err() == nil && s.Ready() && !s.waiters.has(name, rid) && s.fsm.Queued(name, rid)
	}
	time.AfterFunc(claimWindow, func() {
		// Look twice, a second apart: a client whose wait is a string of
		// short calls (a small --max-wait) may be between two of them.
		if !unclaimed() {
			return
		}
		time.Sleep(claimRecheck)
		// Look and mark at once: a call that comes for the request from
		// now until the cancel commits is told to ask again, or it could be
		// handed a grant (a release applied meanwhile) that the cancel
		// then ends.
		if !s.waiters.beginUnclaimedCancel(name, rid) {
			return
		}
		defer s.waiters.endCancel(name, rid)
		if !unclaimed() {
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
		defer cancel()
		// Wait: only if still queued; a grant made meanwhile stands (its
		// lease runs out if nobody uses it). Under RulesV1 it would end.
		res, err := s.Apply(ctx, fsm.Command{Op: fsm.OpCancelWait, Name: name, RequestID: rid, Wait: true})
		if err != nil || res.Err != nil {
			return
		}
		s.log.Info("dropped a queued request nobody waited for", "lock", name, "request", rid)
	})
}
