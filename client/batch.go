package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// Batching: the Acquire, Renew and Release calls a client makes
// concurrently to one node travel together as Batch requests. A call leaves
// at once while fewer than maxInFlight batches are out, or fewer than
// eagerItems calls; otherwise it waits for a batch to come back and leaves
// with every call that queued meanwhile. A lone caller pays no delay; a few
// concurrent callers do not wait for each other; many share requests, and
// the server applies their Raft entries together (one append, one sync).
// This is group commit, done in the client.
const (
	maxInFlight = 4
	eagerItems  = 16
	maxBatch    = 256
	// maxBatchBytes keeps a batch well under the server's 64 KiB limit on
	// one request message, whatever the names and labels.
	maxBatchBytes = 32 << 10
)

// errNoBatch: the node does not serve Batch (an older version); the call
// goes unary. The batcher tries Batch again after retryBatchAfter.
var errNoBatch = errors.New("batch not supported by this node")

const retryBatchAfter = time.Minute

// offSwitch is a feature a node lacks (Batch, the pipe): off since a
// refusal, and tried again retryBatchAfter later (the node may have been
// upgraded meanwhile).
type offSwitch struct {
	at atomic.Int64 // when the node refused (unix ns); 0: on
}

// off reports whether the feature is off now.
func (o *offSwitch) off() bool {
	at := o.at.Load()
	if at == 0 {
		return false
	}
	if time.Since(time.Unix(0, at)) < retryBatchAfter {
		return true
	}
	o.at.CompareAndSwap(at, 0) // try again
	return false
}

// turnOff records a refusal.
func (o *offSwitch) turnOff() { o.at.Store(time.Now().UnixNano()) }

// batcher batches the calls of one endpoint.
type batcher struct {
	rpc     func(context.Context, *fencelockv1.BatchRequest) (*fencelockv1.BatchResponse, error)
	timeout time.Duration // bounds one Batch request
	noBatch offSwitch     // the node answered Unimplemented

	mu       sync.Mutex
	queue    []*batchCall
	inflight int
	items    int // calls in the batches out
	alone    int // calls sent unary because nothing else was out (0 or 1)
	// queuedAt: when a batched Acquire of a lock last joined its wait
	// queue, so that the next Acquire that may wait goes unary: it will
	// most likely queue again, and a unary call queues and waits in one
	// request.
	queuedAt map[string]time.Time
}

// A lock counts as contended for contendedFor after an Acquire of it
// queued; the batcher remembers at most maxContended locks.
const (
	contendedFor = time.Second
	maxContended = 4096
)

// goAlone reports whether no batch and no other lone call is out and none
// is queued; then the caller sends its Acquire or Release at once, by
// itself (on the pipe, or as a unary Connect call), from its own goroutine,
// and calls doneAlone when it returns. Batching pays only when calls
// overlap; a lone call would pay a hand-off to the sending goroutine for
// nothing.
func (b *batcher) goAlone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight > 0 || b.alone > 0 || len(b.queue) > 0 {
		return false
	}
	b.alone++
	return true
}

func (b *batcher) doneAlone() {
	b.mu.Lock()
	b.alone--
	b.mu.Unlock()
}

// contended reports whether an Acquire of name queued within contendedFor.
func (b *batcher) contended(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.queuedAt[name]
	return ok && time.Since(at) < contendedFor
}

// queued records that an Acquire of name joined its wait queue.
func (b *batcher) queued(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if len(b.queuedAt) >= maxContended {
		for n, at := range b.queuedAt {
			if now.Sub(at) >= contendedFor {
				delete(b.queuedAt, n)
			}
		}
		if len(b.queuedAt) >= maxContended {
			return
		}
	}
	if b.queuedAt == nil {
		b.queuedAt = make(map[string]time.Time)
	}
	b.queuedAt[name] = now
}

type batchCall struct {
	ctx  context.Context
	item *fencelockv1.BatchItem
	done chan batchOutcome // buffered: the sender never blocks
}

type batchOutcome struct {
	res *fencelockv1.BatchResult
	err error
}

// errNotSent: the call's context ended before its batch left; it never
// reached the service.
var errNotSent = errors.New("not sent")

// do sends item in the next batch and returns its result, or the error of
// the whole request, or ctx's error. errNoBatch means: send it unary. If
// ctx ends first and late is set, late gets the call's outcome when it is
// known (errNotSent if it was never sent).
func (b *batcher) do(ctx context.Context, item *fencelockv1.BatchItem, late func(*fencelockv1.BatchResult, error)) (*fencelockv1.BatchResult, error) {
	if b.noBatch.off() {
		return nil, errNoBatch
	}
	c := &batchCall{ctx: ctx, item: item, done: make(chan batchOutcome, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	b.startLocked()
	b.mu.Unlock()
	select {
	case o := <-c.done:
		return o.res, o.err
	case <-ctx.Done():
		if late != nil {
			go func() {
				o := <-c.done
				late(o.res, o.err)
			}()
		}
		return nil, ctx.Err()
	}
}

// startLocked sends queued calls while fewer than maxInFlight batches, or
// fewer than eagerItems calls, are out.
func (b *batcher) startLocked() {
	for len(b.queue) > 0 && (b.inflight < maxInFlight || b.items < eagerItems) {
		n, size := 0, 0
		for n < len(b.queue) && n < maxBatch {
			size += proto.Size(b.queue[n].item) + 4
			if n > 0 && size > maxBatchBytes {
				break
			}
			n++
		}
		calls := make([]*batchCall, n)
		copy(calls, b.queue)
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.inflight++
		b.items += n
		go b.send(calls)
	}
}

// send sends one batch of queued calls and hands each call its result.
// Calls whose caller has already gone are left out: they never reach the
// service. A batch, once sent, runs to its answer (bounded by the batcher's
// timeout) even if its callers leave, so that a caller that left can still
// learn what its call did.
func (b *batcher) send(calls []*batchCall) {
	n := len(calls)
	live := calls[:0]
	for _, c := range calls {
		if c.ctx.Err() == nil {
			live = append(live, c)
		} else {
			c.done <- batchOutcome{err: errNotSent}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	b.sendNow(ctx, live, n)
}

// sendNow sends calls as one Batch request within ctx, hands each call its
// result and frees the in-flight slot, which held taken calls.
func (b *batcher) sendNow(ctx context.Context, calls []*batchCall, taken int) {
	defer func() {
		b.mu.Lock()
		b.inflight--
		b.items -= taken
		b.startLocked()
		b.mu.Unlock()
	}()
	if len(calls) == 0 {
		return
	}
	req := &fencelockv1.BatchRequest{Items: make([]*fencelockv1.BatchItem, len(calls))}
	for i, c := range calls {
		req.Items[i] = c.item
	}
	resp, err := b.rpc(ctx, req)
	if errors.Is(err, errNoBatch) {
		b.noBatch.turnOff()
	}
	if err == nil && len(resp.GetResults()) != len(calls) {
		err = fmt.Errorf("batch of %d calls answered with %d results: %w", len(calls), len(resp.GetResults()), fencelock.ErrUnavailable)
	}
	for i, c := range calls {
		if err != nil {
			c.done <- batchOutcome{err: err}
			continue
		}
		c.done <- batchOutcome{res: resp.Results[i]}
	}
}

// sendBatch sends one Batch request: on the pipe when the node speaks it,
// otherwise with Connect. errNoBatch: the node serves neither.
func (ep *endpoint) sendBatch(ctx context.Context, req *fencelockv1.BatchRequest) (*fencelockv1.BatchResponse, error) {
	if ep.pipe != nil {
		resp, err := ep.pipe.roundTrip(ctx, req, nil)
		if !errors.Is(err, errNoPipe) {
			return resp, err
		}
	}
	resp, err := ep.lock.Batch(ctx, connect.NewRequest(req))
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		return nil, errNoBatch
	}
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// alone sends item by itself on the pipe, from the caller's goroutine. ok
// is false when the call must go as a unary Connect call instead (no pipe).
// An item's error comes back as err. If ctx ends first and late is set,
// late gets the item's outcome when it is known.
func (ep *endpoint) alone(ctx context.Context, item *fencelockv1.BatchItem, late func(*fencelockv1.BatchResult, error)) (res *fencelockv1.BatchResult, ok bool, err error) {
	if ep.pipe == nil {
		return nil, false, nil
	}
	var lateAll func(*fencelockv1.BatchResponse, error)
	if late != nil {
		lateAll = func(resp *fencelockv1.BatchResponse, err error) {
			if err == nil && len(resp.GetResults()) != 1 {
				err = fmt.Errorf("a call answered with %d results: %w", len(resp.GetResults()), fencelock.ErrUnavailable)
			}
			if err != nil {
				late(nil, err)
				return
			}
			late(resp.Results[0], nil)
		}
	}
	resp, err := ep.pipe.roundTrip(ctx, &fencelockv1.BatchRequest{Items: []*fencelockv1.BatchItem{item}}, lateAll)
	switch {
	case errors.Is(err, errNoPipe):
		return nil, false, nil
	case err != nil:
		return nil, true, err
	case len(resp.GetResults()) != 1:
		return nil, true, fmt.Errorf("a call answered with %d results: %w", len(resp.GetResults()), fencelock.ErrUnavailable)
	}
	res = resp.Results[0]
	if res.GetError() != nil {
		err = wire.FromBatchError(res.GetError())
	}
	return res, true, err
}

// batched sends item in ep's next batch. ok is false when the call must go
// unary instead (batching off, or the node predates Batch). An item's error
// comes back as err.
func (ep *endpoint) batched(ctx context.Context, item *fencelockv1.BatchItem, late func(*fencelockv1.BatchResult, error)) (res *fencelockv1.BatchResult, ok bool, err error) {
	if ep.batch == nil {
		return nil, false, nil
	}
	res, err = ep.batch.do(ctx, item, late)
	if errors.Is(err, errNoBatch) {
		return nil, false, nil
	}
	if err == nil && res.GetError() != nil {
		err = wire.FromBatchError(res.GetError())
	}
	return res, true, err
}

// acquire is one attempt of Acquire on ep. In a batch an Acquire that joins
// the queue does not wait; a unary Acquire of the same request id then waits
// for the grant (the node adds no entry for it). An Acquire that may wait
// for a lock that was contended lately goes unary at once. If the attempt
// ends before the batch answers and the answer then shows the request
// queued or granted, abandoned is called (in another goroutine): the caller
// decides whether to take the request back. A unary call whose context ends
// calls it too: its entry may still commit after the call went away.
//
// gone reports whether the caller has given up (not just this attempt).
func (ep *endpoint) acquire(ctx context.Context, req *fencelockv1.AcquireRequest, gone func() bool, abandoned func(landBy time.Time)) (*fencelockv1.Grant, error) {
	late := func(res *fencelockv1.BatchResult, err error) {
		if err == nil && (res.GetQueued() != nil || res.GetAcquire() != nil) {
			abandoned(time.Time{})
		}
	}
	// An Acquire that will most likely wait goes unary without taking the
	// lone slot: it may be out for long, and others' calls may go alone.
	contended := ep.batch != nil && req.Wait.AsDuration() > 0 && ep.batch.contended(req.Name)
	alone := ep.batch != nil && !contended && ep.batch.goAlone()
	doneAlone := func() {}
	if alone {
		doneAlone = sync.OnceFunc(ep.batch.doneAlone)
		defer doneAlone()
	}
	if ep.batch != nil && !contended {
		item := &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Acquire{Acquire: req}}
		var res *fencelockv1.BatchResult
		var ok bool
		var err error
		if alone {
			// A late answer decides, as for a batch; with none (the pipe
			// broke), the outcome is unknown and the request is taken back
			// to be safe, and again once it could have landed (the node
			// may still run what the broken connection delivered).
			res, ok, err = ep.alone(ctx, item, func(res *fencelockv1.BatchResult, err error) {
				if err != nil {
					abandoned(time.Now().Add(landGrace))
					return
				}
				late(res, nil)
			})
			if ok {
				// Answered: a wait that follows (the request queued) must
				// not keep other calls from going alone meanwhile.
				doneAlone()
			}
		} else {
			res, ok, err = ep.batched(ctx, item, late)
		}
		if ok && (err != nil || res.GetQueued() == nil) {
			return res.GetAcquire().GetGrant(), err
		}
		if ok {
			ep.batch.queued(req.Name) // queued: wait with a unary call below
		}
	}
	if ep.pipe != nil {
		// On the pipe: if the caller leaves, the node ends the wait (and
		// takes the request out of the queue) as for a Connect call that
		// went away. Whatever the late answer says (a grant made just
		// before, a place kept because the wait ran out just then, the
		// node's own take-back failing), the client takes the request back
		// too; with no answer, also once it could have landed.
		resp, err := ep.pipe.acquire(ctx, req, gone, func(_ *fencelockv1.AcquireResponse, err error) {
			if err != nil && errors.Is(err, fencelock.ErrUnavailable) {
				abandoned(time.Now().Add(landGrace))
				return
			}
			abandoned(time.Time{})
		})
		if !errors.Is(err, errNoPipe) {
			return resp.GetGrant(), err
		}
	}
	sent := time.Now()
	resp, err := ep.lock.Acquire(ctx, connect.NewRequest(req))
	if err != nil {
		if ctx.Err() != nil {
			// The acquire may commit after we left, or a queued request may
			// never have been waited for: queued or granted for nobody. The
			// caller decides whether to take it back. The request may
			// still be on its way: a take-back that finds nothing tries
			// again once it has had time to land (landBy), or it would be
			// granted to nobody.
			go abandoned(sent.Add(landGrace))
		}
		return nil, err
	}
	return resp.Msg.Grant, nil
}

// landGrace: a unary Acquire whose caller left may still be on its way to
// the node for this long after it was sent.
const landGrace = time.Second

// renew is one attempt of Renew on ep.
func (ep *endpoint) renew(ctx context.Context, req *fencelockv1.RenewRequest) (*fencelockv1.RenewResponse, error) {
	// Renewals always batch, even alone: nobody waits on their latency, and
	// a batched renewal costs the node a fraction of a unary one's CPU.
	res, ok, err := ep.batched(ctx, &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Renew{Renew: req}}, nil)
	if ok {
		if err == nil && res.GetRenew() == nil {
			err = fmt.Errorf("renew: empty batch result: %w", fencelock.ErrUnavailable)
		}
		return res.GetRenew(), err
	}
	resp, err := ep.lock.Renew(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// release is one attempt of Release on ep.
func (ep *endpoint) release(ctx context.Context, req *fencelockv1.ReleaseRequest) error {
	if ep.batch != nil {
		item := &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Release{Release: req}}
		var ok bool
		var err error
		if ep.batch.goAlone() {
			defer ep.batch.doneAlone()
			_, ok, err = ep.alone(ctx, item, nil)
		} else {
			_, ok, err = ep.batched(ctx, item, nil)
		}
		if ok {
			return err
		}
	}
	_, err := ep.lock.Release(ctx, connect.NewRequest(req))
	return err
}
