package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// Batch runs every item as the unary method would, concurrently, so that
// their Raft entries share appends and syncs. An Acquire that joins a wait
// queue does not wait: its result is "queued", and the caller waits with a
// unary Acquire of the same request id.
func (a *api) Batch(ctx context.Context, req *connect.Request[fencelockv1.BatchRequest]) (*connect.Response[fencelockv1.BatchResponse], error) {
	items := req.Msg.Items
	if len(items) > MaxBatchItems {
		return nil, a.fail("Batch", fmt.Errorf("batch of %d items, more than %d: %w", len(items), MaxBatchItems, fencelock.ErrTooLarge))
	}
	a.metrics.batchItems.Observe(float64(len(items)))
	resp := &fencelockv1.BatchResponse{Results: make([]*fencelockv1.BatchResult, len(items))}
	// Items ignore the request's cancellation (none waits: a queued Acquire
	// returns at once), so each finishes when its entry commits or the node
	// loses leadership, without a goroutine per item to watch a context.
	// The request as a whole is bounded by ApplyTimeout, like a unary call.
	ictx := context.WithoutCancel(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp.Results[i] = a.batchItem(ictx, i, it)
		}()
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(a.cfg.ApplyTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return connect.NewResponse(resp), nil
	case <-timer.C:
		return nil, a.fail("Batch", fmt.Errorf("batch of %d items not done within %v: %w", len(items), a.cfg.ApplyTimeout, fencelock.ErrUnavailable))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// batchItem runs one item.
func (a *api) batchItem(ctx context.Context, i int, it *fencelockv1.BatchItem) *fencelockv1.BatchResult {
	s := (*Server)(a)
	fail := func(method string, err error) *fencelockv1.BatchResult {
		a.count(method, err)
		return &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Error{Error: wire.ToBatchError(err)}}
	}
	switch op := it.GetOp().(type) {
	case *fencelockv1.BatchItem_Acquire:
		r := acquireRequest(op.Acquire)
		if r.Wait > 0 && r.RequestID == "" {
			return fail("Acquire", fmt.Errorf("an acquire that may wait needs a request_id in a batch: %w", fencelock.ErrInvalidArgument))
		}
		r.ReturnQueued = true
		g, err := s.Acquire(ctx, r)
		if errors.Is(err, errQueued) {
			s.expectClaim(r.Name, r.RequestID)
			return &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Queued{Queued: &fencelockv1.AcquireQueued{}}}
		}
		if err != nil {
			return fail("Acquire", err)
		}
		return &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Acquire{Acquire: acquireResponse(g)}}
	case *fencelockv1.BatchItem_Renew:
		m := op.Renew
		ttl, err := s.Renew(ctx, fencelock.LockName(m.Name), fencelock.LeaseID(m.LeaseId), fencelock.Token(m.Token))
		if err != nil {
			return fail("Renew", err)
		}
		return &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Renew{Renew: &fencelockv1.RenewResponse{Ttl: durationpb.New(ttl)}}}
	case *fencelockv1.BatchItem_Release:
		m := op.Release
		if err := s.Release(ctx, fencelock.LockName(m.Name), fencelock.LeaseID(m.LeaseId), fencelock.Token(m.Token)); err != nil {
			return fail("Release", err)
		}
		return &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Release{Release: &fencelockv1.ReleaseResponse{}}}
	default:
		return fail("Batch", fmt.Errorf("batch item %d has no operation: %w", i, fencelock.ErrInvalidArgument))
	}
}

// claimWindow is how long a request that Batch queued may go without the
// unary Acquire that waits for it (the client sends that at once) before
// the leader takes it out of the queue: otherwise a client that died in
// between would leave a waiter that is granted to nobody.
const claimWindow = 10 * time.Second

// expectClaim drops request rid from name's queue after claimWindow unless
// a call waits for it by then.
func (s *Server) expectClaim(name fencelock.LockName, rid string) {
	time.AfterFunc(claimWindow, func() {
		if s.ctx.Err() != nil || !s.Ready() || s.waiters.has(name, rid) || !s.fsm.Queued(name, rid) {
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
		defer cancel()
		res, err := s.Apply(ctx, fsm.Command{Op: fsm.OpCancelWait, Name: name, RequestID: rid})
		if err != nil || res.Err != nil {
			return
		}
		s.waiters.drop(name, rid) // a call that came for it just now asks again
		s.log.Info("dropped a queued request nobody waited for", "lock", name, "request", rid)
	})
}
