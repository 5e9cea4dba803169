package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
)

// fakeBatchRPC answers each renew item with a TTL of as many seconds as the
// item's token, after release is closed (if set), and records batch sizes.
type fakeBatchRPC struct {
	mu      sync.Mutex
	sizes   []int
	release chan struct{}
	arrived chan int
}

func (f *fakeBatchRPC) Batch(ctx context.Context, req *fencelockv1.BatchRequest) (*fencelockv1.BatchResponse, error) {
	f.mu.Lock()
	f.sizes = append(f.sizes, len(req.Items))
	f.mu.Unlock()
	if f.arrived != nil {
		f.arrived <- len(req.Items)
	}
	if f.release != nil {
		<-f.release
	}
	resp := &fencelockv1.BatchResponse{}
	for _, it := range req.Items {
		ttl := durationpb.New(time.Duration(it.GetRenew().GetToken()) * time.Second)
		resp.Results = append(resp.Results, &fencelockv1.BatchResult{Result: &fencelockv1.BatchResult_Renew{
			Renew: &fencelockv1.RenewResponse{Ttl: ttl}}})
	}
	return resp, nil
}

// unimplementedBatch is a node that predates Batch.
type unimplementedBatch struct {
	fencelockv1connect.LockServiceClient
	called func()
}

func (u unimplementedBatch) Batch(context.Context, *connect.Request[fencelockv1.BatchRequest]) (*connect.Response[fencelockv1.BatchResponse], error) {
	u.called()
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("no Batch here"))
}

func renewItem(token uint64) *fencelockv1.BatchItem {
	return &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Renew{Renew: &fencelockv1.RenewRequest{Name: "x", Token: token}}}
}

// lone is how many one-call batches may be out before calls queue: fewer
// than maxInFlight batches, or fewer than eagerItems calls, are out.
var lone = max(maxInFlight, eagerItems)

// TestBatcher_GroupsCallsWhileBatchesAreOut: the first calls leave at once,
// alone, while few are out; calls made while more are out wait and then
// leave together, and every caller gets its own result.
func TestBatcher_GroupsCallsWhileBatchesAreOut(t *testing.T) {
	f := &fakeBatchRPC{release: make(chan struct{}), arrived: make(chan int, 100)}
	b := &batcher{rpc: f.Batch, timeout: 10 * time.Second}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	call := func(token uint64) {
		defer wg.Done()
		res, err := b.do(ctx, renewItem(token), nil)
		if err != nil {
			errs <- err
			return
		}
		if got := res.GetRenew().GetTtl().AsDuration(); got != time.Duration(token)*time.Second {
			errs <- fmt.Errorf("call %d got the result for %v", token, got)
		}
	}
	for i := 1; i <= lone; i++ {
		wg.Add(1)
		go call(uint64(i))
		if n := <-f.arrived; n != 1 {
			t.Fatalf("call %d left in a batch of %d, want alone", i, n)
		}
	}
	const queued = 10
	for i := 0; i < queued; i++ {
		wg.Add(1)
		go call(uint64(100 + i))
	}
	// Let the queued calls line up behind the batches that are out.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n == queued {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", n, queued)
		}
		time.Sleep(time.Millisecond)
	}
	f.release <- struct{}{} // one batch comes back: the queue leaves as one batch
	if n := <-f.arrived; n != queued {
		t.Fatalf("the queued calls left in a batch of %d, want all %d together", n, queued)
	}
	close(f.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestBatcher_OlderNodeGoesUnary: a node without Batch answers
// Unimplemented; the endpoint says so (errNoBatch), and the batcher stops
// trying.
func TestBatcher_OlderNodeGoesUnary(t *testing.T) {
	calls := 0
	ep := &endpoint{lock: unimplementedBatch{called: func() { calls++ }}}
	b := &batcher{timeout: time.Second, rpc: ep.sendBatch}
	for i := 0; i < 3; i++ {
		if _, err := b.do(context.Background(), renewItem(1), nil); !errors.Is(err, errNoBatch) {
			t.Fatalf("do against a node without Batch = %v, want errNoBatch", err)
		}
	}
	if calls != 1 {
		t.Fatalf("the node was asked %d times, want once", calls)
	}
}

// TestBatcher_CallerThatLeftIsNotSent: a queued call whose context ended
// before its batch left never reaches the service.
func TestBatcher_CallerThatLeftIsNotSent(t *testing.T) {
	f := &fakeBatchRPC{release: make(chan struct{}), arrived: make(chan int, 100)}
	b := &batcher{rpc: f.Batch, timeout: 10 * time.Second}
	for i := 0; i < lone; i++ {
		go b.do(context.Background(), renewItem(1), nil)
		<-f.arrived
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	lateErr := make(chan error, 1)
	go func() {
		_, err := b.do(ctx, renewItem(2), func(_ *fencelockv1.BatchResult, err error) { lateErr <- err })
		done <- err
	}()
	for {
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled queued call returned %v, want context.Canceled", err)
	}
	close(f.release)
	if err := <-lateErr; !errors.Is(err, errNotSent) {
		t.Fatalf("the late outcome of the cancelled call = %v, want errNotSent", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sizes) != lone {
		t.Fatalf("batches sent: %v; the cancelled call must not have been sent", f.sizes)
	}
}

// TestBatcher_LateOutcome: a caller that leaves while its batch is out
// learns the outcome later, so it can take back what the call did.
func TestBatcher_LateOutcome(t *testing.T) {
	f := &fakeBatchRPC{release: make(chan struct{}), arrived: make(chan int, 10)}
	b := &batcher{rpc: f.Batch, timeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	late := make(chan *fencelockv1.BatchResult, 1)
	done := make(chan error, 1)
	go func() {
		_, err := b.do(ctx, renewItem(7), func(res *fencelockv1.BatchResult, err error) {
			if err != nil {
				t.Errorf("late outcome error %v", err)
			}
			late <- res
		})
		done <- err
	}()
	<-f.arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("do after the caller left = %v, want context.Canceled", err)
	}
	close(f.release)
	if res := <-late; res.GetRenew().GetTtl().AsDuration() != 7*time.Second {
		t.Fatalf("late outcome = %v, want the call's own result", res)
	}
}

// TestBatcher_SplitsLargeBatches: calls with long names leave in batches
// that stay under the size limit.
func TestBatcher_SplitsLargeBatches(t *testing.T) {
	f := &fakeBatchRPC{release: make(chan struct{}), arrived: make(chan int, 100)}
	b := &batcher{rpc: f.Batch, timeout: 10 * time.Second}
	for i := 0; i < lone; i++ {
		go b.do(context.Background(), renewItem(1), nil)
		<-f.arrived
	}
	long := string(make([]byte, 1000))
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.do(context.Background(), &fencelockv1.BatchItem{Op: &fencelockv1.BatchItem_Renew{Renew: &fencelockv1.RenewRequest{Name: long, Token: 1}}}, nil)
		}()
	}
	for {
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n == 100 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(f.release)
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	total := 0
	for _, n := range f.sizes[lone:] {
		if n*1000 > maxBatchBytes {
			t.Fatalf("a batch of %d calls of 1 KB each: over the %d-byte limit (batches %v)", n, maxBatchBytes, f.sizes)
		}
		total += n
	}
	if total != 100 {
		t.Fatalf("batches %v carried %d of the 100 calls", f.sizes, total)
	}
}
