package server_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
)

func acquireItem(name, rid string, wait time.Duration) *fencelockv1.BatchItem {
	return &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Acquire{Acquire: &fencelockv1.AcquireRequest{
		Name: name, Ttl: durationpb.New(10 * time.Second), Wait: durationpb.New(wait), RequestId: rid}}}
}

func batch(t *testing.T, rpc fencelockv1connect.LockServiceClient, items ...*fencelockv1.BatchItem) []*fencelockv1.BatchResult {
	t.Helper()
	resp, err := rpc.Batch(ctxFor(t, 10*time.Second), connect.NewRequest(&fencelockv1.BatchRequest{Items: items}))
	if err != nil {
		t.Fatalf("Batch: %v", wire.FromConnect(err))
	}
	if len(resp.Msg.Results) != len(items) {
		t.Fatalf("Batch of %d items returned %d results", len(items), len(resp.Msg.Results))
	}
	return resp.Msg.Results
}

// TestServer_BatchRunsEachItemAsAlone: results come back in item order,
// each what the call alone would have returned; a queued Acquire does not
// wait in the batch, and a unary Acquire of its request id then gets the
// grant when the holder releases.
func TestServer_BatchRunsEachItemAsAlone(t *testing.T) {
	srv := testproc.StartServer(t)
	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+srv.Addr)
	ctx := ctxFor(t, 30*time.Second)

	// Items run concurrently: results are in item order, whatever order
	// they were applied in.
	res := batch(t, rpc, acquireItem("a", "r1", 0), acquireItem("b", "r2", time.Minute),
		acquireItem("bad name\x00", "r4", 0), &fencelockv1.BatchItem{})
	ga, gb := res[0].GetAcquire().GetGrant(), res[1].GetAcquire().GetGrant()
	if ga == nil || gb == nil || ga.Name != "a" || gb.Name != "b" || ga.Token == gb.Token {
		t.Fatalf("acquires of free locks a and b = %v, %v; want grants of a and b with different tokens", res[0], res[1])
	}
	if err := wire.FromBatchError(res[2].GetError()); !errors.Is(err, fencelock.ErrInvalidName) {
		t.Fatalf("acquire of a bad name = %v, want ErrInvalidName", err)
	}
	if err := wire.FromBatchError(res[3].GetError()); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("empty item = %v, want ErrInvalidArgument", err)
	}
	res = batch(t, rpc, acquireItem("a", "r3", 0))
	var held *fencelock.LockHeldError
	if err := wire.FromBatchError(res[0].GetError()); res[0].GetError() == nil || !errors.As(err, &held) || held.Token != fencelock.Token(ga.Token) {
		t.Fatalf("try-acquire of held lock a = %v, want lock_held by token %d", res[0], ga.Token)
	}

	// A waiter: queued at once, granted on release through a unary Acquire.
	start := time.Now()
	res = batch(t, rpc, acquireItem("a", "w1", time.Minute))
	if res[0].GetQueued() == nil {
		t.Fatalf("acquire of held lock a with wait = %v, want queued", res[0])
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("a queued acquire in a batch took %v: it must not wait", time.Since(start))
	}
	got := make(chan *fencelockv1.Grant, 1)
	go func() {
		resp, err := rpc.Acquire(ctx, connect.NewRequest(&fencelockv1.AcquireRequest{
			Name: "a", Ttl: durationpb.New(10 * time.Second), Wait: durationpb.New(time.Minute), RequestId: "w1"}))
		if err != nil {
			t.Errorf("waiting for the queued request: %v", wire.FromConnect(err))
			got <- nil
			return
		}
		got <- resp.Msg.Grant
	}()
	time.Sleep(200 * time.Millisecond)
	res = batch(t, rpc, &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Release{Release: &fencelockv1.ReleaseRequest{
		Name: "a", LeaseId: ga.LeaseId, Token: ga.Token}}})
	if res[0].GetRelease() == nil {
		t.Fatalf("release in a batch = %v", res[0])
	}
	g := <-got
	if g == nil || g.Token <= ga.Token {
		t.Fatalf("the waiter got %v, want a grant above token %d", g, ga.Token)
	}
	res = batch(t, rpc, &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Renew{Renew: &fencelockv1.RenewRequest{
		Name: "a", LeaseId: g.LeaseId, Token: g.Token}}})
	if res[0].GetRenew().GetTtl().AsDuration() != 10*time.Second {
		t.Fatalf("renew in a batch = %v, want ttl 10s", res[0])
	}
}

func TestServer_BatchRefusesBadBatches(t *testing.T) {
	srv := testproc.StartServer(t)
	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+srv.Addr)
	ctx := ctxFor(t, 30*time.Second)
	items := make([]*fencelockv1.BatchItem, 1025)
	for i := range items {
		items[i] = &fencelockv1.BatchItem{}
	}
	_, err := rpc.Batch(ctx, connect.NewRequest(&fencelockv1.BatchRequest{Items: items}))
	if err := wire.FromConnect(err); !errors.Is(err, fencelock.ErrTooLarge) {
		t.Fatalf("a batch of 1025 items = %v, want ErrTooLarge", err)
	}
	res := batch(t, rpc, acquireItem("x", "", time.Second))
	if err := wire.FromBatchError(res[0].GetError()); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("an acquire that may wait without a request id = %v, want ErrInvalidArgument", err)
	}
}

// TestServer_CancelWait: a queued request that gave up leaves the queue; a
// request granted after its caller gave up has its grant ended, so the lock
// does not sit held until the TTL.
func TestServer_CancelWait(t *testing.T) {
	srv := testproc.StartServer(t)
	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+srv.Addr)
	ctx := ctxFor(t, 30*time.Second)
	cancelWait := func(name, rid string) error {
		_, err := rpc.CancelWait(ctx, connect.NewRequest(&fencelockv1.CancelWaitRequest{Name: name, RequestId: rid}))
		return wire.FromConnect(err)
	}
	describe := func(name string) *fencelockv1.LockInfo {
		resp, err := rpc.Describe(ctx, connect.NewRequest(&fencelockv1.DescribeRequest{Name: name}))
		if errors.Is(wire.FromConnect(err), fencelock.ErrNotFound) {
			return &fencelockv1.LockInfo{Name: name} // free and nobody waits
		}
		if err != nil {
			t.Fatalf("describe %s: %v", name, wire.FromConnect(err))
		}
		return resp.Msg.Lock
	}
	release := func(g *fencelockv1.Grant) {
		batch(t, rpc, &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Release{Release: &fencelockv1.ReleaseRequest{
			Name: "c", LeaseId: g.LeaseId, Token: g.Token}}})
	}

	h := batch(t, rpc, acquireItem("c", "h", 0))[0].GetAcquire().GetGrant()
	if q := batch(t, rpc, acquireItem("c", "w1", time.Minute))[0]; q.GetQueued() == nil {
		t.Fatalf("waiter = %v, want queued", q)
	}
	if err := cancelWait("c", "w1"); err != nil {
		t.Fatalf("cancel of a queued request = %v", err)
	}
	if l := describe("c"); len(l.Waiters) != 0 {
		t.Fatalf("after the cancel, lock c has waiters %v", l.Waiters)
	}

	// Granted while nobody waited for it: the cancel ends the grant.
	batch(t, rpc, acquireItem("c", "w2", time.Minute))
	release(h)
	l := describe("c")
	if l.Token <= h.Token {
		t.Fatalf("after the release, lock c has token %d, want the waiter's grant above %d", l.Token, h.Token)
	}
	if err := cancelWait("c", "w2"); err != nil {
		t.Fatalf("cancel of a granted request = %v", err)
	}
	if l := describe("c"); l.Token != 0 {
		t.Fatalf("after cancelling the granted request, lock c is held by token %d, want free", l.Token)
	}
	if err := cancelWait("c", "nobody"); !errors.Is(err, fencelock.ErrNotFound) {
		t.Fatalf("cancel of an unknown request = %v, want ErrNotFound", err)
	}
	if err := cancelWait("c", ""); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("cancel without a request id = %v, want ErrInvalidArgument", err)
	}
}

// TestServer_UnclaimedQueuedRequestIsDropped: a request that Batch queued
// and that no unary Acquire comes to wait for (its client died in between)
// leaves the queue after the claim window, instead of being granted to
// nobody later.
func TestServer_UnclaimedQueuedRequestIsDropped(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 10 s claim window")
	}
	srv := testproc.StartServer(t)
	waiters := queueOrphan(t, srv.Addr)
	time.Sleep(5 * time.Second)
	if n := waiters(); n != 1 {
		t.Fatalf("%d waiters 5 s after queueing, want the request still queued within the claim window", n)
	}
	deadline := time.Now().Add(15 * time.Second)
	for waiters() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the unclaimed request is still queued 20 s after it was queued")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// queueOrphan has Batch queue request "gone" on lock "orphan" behind a
// holder whose lease outlives the claim window, and nothing waits for it (its
// client died); it returns how many requests wait on "orphan".
func queueOrphan(t *testing.T, addr string) (waiters func() int) {
	t.Helper()
	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+addr)
	ctx := ctxFor(t, 60*time.Second)
	holder := acquireItem("orphan", "h", 0)
	holder.GetAcquire().Ttl = durationpb.New(time.Minute) // outlives the claim window
	batch(t, rpc, holder)
	if q := batch(t, rpc, acquireItem("orphan", "gone", time.Minute))[0]; q.GetQueued() == nil {
		t.Fatalf("waiter = %v, want queued", q)
	}
	return func() int {
		resp, err := rpc.Describe(ctx, connect.NewRequest(&fencelockv1.DescribeRequest{Name: "orphan"}))
		if err != nil {
			t.Fatalf("describe: %v", wire.FromConnect(err))
		}
		return len(resp.Msg.Lock.Waiters)
	}
}

// TestServer_NewLeaderDropsUnclaimedQueuedRequests: a leader that takes
// over (here: the one node, restarted) gives every queued request the claim
// window too. A request queued before the change whose client died is
// dropped instead of being granted to nobody; until the window ends it
// keeps its place, for a client that comes back to wait for it.
func TestServer_NewLeaderDropsUnclaimedQueuedRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 10 s claim window")
	}
	srv := testproc.StartServer(t)
	waiters := queueOrphan(t, srv.Addr)
	srv.Kill9() // before the claim window of the leader that queued it
	srv.Start()
	restarted := time.Now()
	time.Sleep(3 * time.Second)
	if n := waiters(); n != 1 {
		t.Fatalf("%d waiters 3 s after the new leader took over, want the request still queued within its claim window", n)
	}
	for waiters() != 0 {
		if time.Since(restarted) > 20*time.Second {
			t.Fatalf("the unclaimed request is still queued 20 s after the new leader took over")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServer_LongWaitKeepsItsPlace: a client splits a long wait into calls
// (here cut to 1 s by --max-wait); when one runs out, the request keeps its
// place in the queue, so a request queued after it stays after it. Without
// keep_place the waiter would leave the queue and join it again at the back.
func TestServer_LongWaitKeepsItsPlace(t *testing.T) {
	srv := testproc.StartServer(t, "--max-wait", "1s")
	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+srv.Addr)
	ctx := ctxFor(t, 10*time.Minute) // longer than one call's wait (5 min): the client splits it
	h := batch(t, rpc, acquireItem("line", "holder", 0))[0].GetAcquire().GetGrant()
	c := newClient(t, srv.Addr)
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "line", client.WithHolder("first"))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waiters := func() []string {
		resp, err := rpc.Describe(ctx, connect.NewRequest(&fencelockv1.DescribeRequest{Name: "line"}))
		if err != nil {
			t.Fatalf("describe: %v", wire.FromConnect(err))
		}
		var out []string
		for _, w := range resp.Msg.Lock.Waiters {
			out = append(out, w.Holder)
		}
		return out
	}
	for len(waiters()) != 1 {
		time.Sleep(10 * time.Millisecond)
	}
	// The second request waits without calls that run out: Batch queued
	// it, and nobody claims it within the test.
	second := acquireItem("line", "second", time.Minute)
	second.GetAcquire().Holder = "second"
	if q := batch(t, rpc, second)[0]; q.GetQueued() == nil {
		t.Fatalf("second = %v, want queued", q)
	}
	time.Sleep(2500 * time.Millisecond) // the first waiter's calls ran out twice
	if w := waiters(); len(w) != 2 || w[0] != "first" || w[1] != "second" {
		t.Fatalf("waiters after the first one's calls ran out: %q, want [first second]", w)
	}
	// And the first is served first.
	batch(t, rpc, &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Release{Release: &fencelockv1.ReleaseRequest{
		Name: "line", LeaseId: h.LeaseId, Token: h.Token}}})
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("first waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first waiter was not granted the lock the holder released")
	}
}

// TestServer_RetryKeepsARequestItsFirstCallLeft: a client's connection
// breaks while it waits, and its retry (same request id, new connection)
// is already waiting when the node notices: the first call's going away
// must not take the request out of the queue under the retry.
func TestServer_RetryKeepsARequestItsFirstCallLeft(t *testing.T) {
	srv := testproc.StartServer(t)
	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+srv.Addr)
	ctx := ctxFor(t, 60*time.Second)
	h := batch(t, rpc, acquireItem("retried", "holder", 0))[0].GetAcquire().GetGrant()
	wait := func(ctx context.Context) (*fencelockv1.Grant, error) {
		resp, err := rpc.Acquire(ctx, connect.NewRequest(&fencelockv1.AcquireRequest{Name: "retried",
			Ttl: durationpb.New(10 * time.Second), Wait: durationpb.New(time.Minute), RequestId: "w"}))
		if err != nil {
			return nil, wire.FromConnect(err)
		}
		return resp.Msg.Grant, nil
	}
	firstCtx, breakFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() { _, err := wait(firstCtx); firstDone <- err }()
	waitForQueue := func() {
		for {
			resp, err := rpc.Describe(ctx, connect.NewRequest(&fencelockv1.DescribeRequest{Name: "retried"}))
			if err == nil && len(resp.Msg.Lock.Waiters) == 1 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitForQueue()
	type result struct {
		g   *fencelockv1.Grant
		err error
	}
	retried := make(chan result, 1)
	go func() {
		g, err := wait(ctx)
		retried <- result{g, err}
	}()
	time.Sleep(300 * time.Millisecond) // the retry is waiting on the node
	breakFirst()
	<-firstDone
	time.Sleep(300 * time.Millisecond) // the first call's handler has finished
	batch(t, rpc, &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Release{Release: &fencelockv1.ReleaseRequest{
		Name: "retried", LeaseId: h.LeaseId, Token: h.Token}}})
	select {
	case r := <-retried:
		if r.err != nil || r.g == nil || r.g.Token <= h.Token {
			t.Fatalf("retry got %v, %v; want a grant above token %d", r.g, r.err, h.Token)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the retry was never granted: the first call took the request out of the queue")
	}
}

// TestServer_WaitWithoutKeepPlaceLeavesTheQueue: a caller that does not ask
// for keep_place (a client of the first release, a plain API call) takes
// lock_held as final, so when its wait runs out, here cut by --max-wait, its
// request leaves the queue; otherwise the lock could later be granted to
// nobody.
func TestServer_WaitWithoutKeepPlaceLeavesTheQueue(t *testing.T) {
	srv := testproc.StartServer(t, "--max-wait", "1s")
	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+srv.Addr)
	ctx := ctxFor(t, 30*time.Second)
	batch(t, rpc, acquireItem("plain", "holder", 0))
	_, err := rpc.Acquire(ctx, connect.NewRequest(&fencelockv1.AcquireRequest{Name: "plain",
		Ttl: durationpb.New(30 * time.Second), Wait: durationpb.New(2 * time.Second), RequestId: "plain-waiter"}))
	if !errors.Is(wire.FromConnect(err), fencelock.ErrLockHeld) {
		t.Fatalf("wait cut by --max-wait = %v, want lock_held", wire.FromConnect(err))
	}
	resp, err := rpc.Describe(ctx, connect.NewRequest(&fencelockv1.DescribeRequest{Name: "plain"}))
	if err != nil {
		t.Fatal(wire.FromConnect(err))
	}
	if n := len(resp.Msg.Lock.Waiters); n != 0 {
		t.Fatalf("%d waiters after the wait ended without keep_place, want 0", n)
	}
}
