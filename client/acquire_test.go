package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// scriptNode is a fake node whose Acquire answers with fn.
type scriptNode struct {
	flakyNode
	fn func(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error)
}

func (n *scriptNode) acquire(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
	n.mu.Lock()
	n.acquires++
	n.reqs = append(n.reqs, r)
	n.mu.Unlock()
	return n.fn(ctx, r)
}

func grantOf(r *fencelockv1.AcquireRequest) *fencelockv1.Grant {
	return &fencelockv1.Grant{Name: r.Name, Token: 5, LeaseId: "lease-5", Ttl: durationpb.New(10 * time.Second)}
}

// TestAcquisition_States walks the state machine through each way an
// acquisition ends, against a fake node.
func TestAcquisition_States(t *testing.T) {
	t.Parallel()
	held := &fencelock.LockHeldError{Name: "x", Holder: "other", Token: 3}
	tests := []struct {
		name       string
		wait       time.Duration // < 0: until ctx ends
		ctxTimeout time.Duration
		answers    func(call int, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error)
		want       acquireState
		wantErr    error
		wantCancel bool
	}{
		{"granted at once", 0, time.Minute, func(int, *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) { return nil, nil },
			stateGranted, nil, false},
		{"try-lock refused", 0, time.Minute, func(int, *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) { return nil, held },
			stateRefused, fencelock.ErrLockHeld, false},
		{"granted after a wait of two calls", -1, time.Minute, func(call int, _ *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
			if call == 1 {
				return nil, held
			}
			return nil, nil
		}, stateGranted, nil, false},
		{"caller gave up, the call answered late", -1, 200 * time.Millisecond, func(_ int, _ *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
			time.Sleep(time.Second)
			return nil, fmt.Errorf("cut: %w", fencelock.ErrUnavailable)
		}, stateAbandoned, context.DeadlineExceeded, true},
		// The node takes back a request whose call was cancelled on its
		// stream, but not a grant already on its way: the client still
		// sends CancelWait.
		{"caller gave up during a call", -1, 200 * time.Millisecond, nil, stateAbandoned, context.DeadlineExceeded, true},
		{"invalid", 0, time.Minute, func(int, *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
			return nil, fmt.Errorf("ttl: %w", fencelock.ErrInvalidTTL)
		}, stateRefused, fencelock.ErrInvalidTTL, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			calls := 0
			n := &scriptNode{}
			n.fn = func(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
				mu.Lock()
				calls++
				call := calls
				mu.Unlock()
				if tt.answers == nil { // waits until the call is cancelled
					<-ctx.Done()
					return nil, ctx.Err()
				}
				g, err := tt.answers(call, r)
				if err == nil && g == nil {
					g = grantOf(r)
				}
				return g, err
			}
			c := fakeClient(t, n, nil)
			ctx, cancel := context.WithTimeout(context.Background(), tt.ctxTimeout)
			defer cancel()
			var opts []Option
			if tt.wait >= 0 {
				opts = append(opts, WithWait(tt.wait))
			}
			a, err := c.newAcquisition(ctx, "x", opts)
			if err != nil {
				t.Fatal(err)
			}
			l, err := a.run(ctx)
			if l != nil {
				defer l.Release(context.Background())
			}
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("run = %v, want %v", err, tt.wantErr)
			}
			if a.state != tt.want {
				t.Errorf("state %d, want %d", a.state, tt.want)
			}
			c.takeBacks.await(context.Background(), a.o.requestID)
			if _, cancelled := n.counts(); (len(cancelled) > 0) != tt.wantCancel {
				t.Errorf("take-backs %v, want one: %v", cancelled, tt.wantCancel)
			}
		})
	}
}

// TestAcquisition_AsksAgainUntilTheWaitIsOver: a node that ends each call
// early (its max wait) is asked again, with the same request id, until the
// caller's wait is over; the last call does not ask to keep the place.
func TestAcquisition_AsksAgainUntilTheWaitIsOver(t *testing.T) {
	t.Parallel()
	n := &scriptNode{}
	n.fn = func(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
		// A node with a short max wait ends each call early.
		time.Sleep(min(r.Wait.AsDuration(), 100*time.Millisecond))
		return nil, &fencelock.LockHeldError{Name: fencelock.LockName(r.Name)}
	}
	c := fakeClient(t, n, nil)
	ctx := context.Background()
	start := time.Now()
	_, err := c.Acquire(ctx, "x", WithWait(450*time.Millisecond))
	if elapsed := time.Since(start); elapsed < 450*time.Millisecond {
		t.Errorf("acquire returned after %v, before its wait of 450ms was over", elapsed)
	}
	if !errors.Is(err, fencelock.ErrLockHeld) {
		t.Fatalf("acquire = %v, want ErrLockHeld", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.reqs) < 3 {
		t.Fatalf("%d calls, want one every 100ms", len(n.reqs))
	}
	last := n.reqs[len(n.reqs)-1]
	if last.KeepPlace {
		t.Errorf("the last call asked to keep the place: nothing asks again after it")
	}
	for i, r := range n.reqs {
		if r.RequestId != n.reqs[0].RequestId {
			t.Errorf("call %d has request id %q, want %q", i, r.RequestId, n.reqs[0].RequestId)
		}
	}
	if len(n.cancelled) != 0 {
		t.Errorf("take-backs %v after a wait that ran out: the node already left the queue", n.cancelled)
	}
}

// silentNode never answers: a frozen node whose connection the transport's
// pings close.
type silentNode struct{ flakyNode }

func (n *silentNode) acquire(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
	n.mu.Lock()
	n.acquires++
	n.mu.Unlock()
	return nil, wire.NoAnswer(errors.New("ping timed out"))
}

// hintNode is a follower that names leader.
type hintNode struct {
	flakyNode
	leader string
}

func (n *hintNode) acquire(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
	return nil, &fencelock.NotLeaderError{Node: "n", LeaderAPI: n.leader}
}

// TestClient_SkipsASilentNodeThatAFollowerNames: a follower's not_leader
// hint may name the old leader, which froze; the client does not go back to
// a node that did not answer, and finds the new leader among the others.
func TestClient_SkipsASilentNodeThatAFollowerNames(t *testing.T) {
	t.Parallel()
	frozen := &silentNode{}
	nodes := map[string]node{
		"http://a:1": frozen,
		"http://b:1": &hintNode{leader: "a:1"},
		"http://c:1": &flakyNode{},
	}
	c := quietTestClient(t, "a:1", func(cfg *Config) { cfg.Endpoints = []string{"a:1", "b:1", "c:1"} })
	c.dial = func(u string) node { return nodes[u] }
	var eps []*endpoint
	for _, e := range c.cfg.Endpoints {
		eps = append(eps, c.newEndpoint(c.endpointURL(e)))
	}
	c.eps.Store(&eps)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if got, _ := frozen.counts(); got != 1 {
		t.Errorf("the frozen node got %d calls, want 1: the hint naming it was followed", got)
	}
}

// A grant answered a while after the call (within the safety margin, so
// not renewed before use) is renewed TTL/3 after the moment its lease
// counts from, not TTL/3 after the answer: with a margin over TTL/3 the
// latter would come after the lock's deadline, and a lock whose renewals
// all succeed would be lost.
func TestLock_FirstRenewalCountsFromTheLeaseStart(t *testing.T) {
	t.Parallel()
	n := &renewCountNode{}
	n.fn = func(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
		time.Sleep(700 * time.Millisecond) // in line behind a short holder
		return &fencelockv1.Grant{Name: r.Name, Token: 5, LeaseId: "lease-5", Ttl: durationpb.New(3 * time.Second)}, nil
	}
	c := fakeClient(t, n, nil)
	l, err := c.Acquire(context.Background(), "x", WithTTL(3*time.Second), WithSafetyMargin(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	time.Sleep(2 * time.Second) // past the deadline without a renewal (start + 1.5 s)
	if err := l.Err(); err != nil {
		t.Fatalf("a lock whose renewals succeed was lost: %v", err)
	}
	if n.renews.Load() == 0 {
		t.Fatal("no renewal was made")
	}
}

// renewCountNode is a scriptNode that counts renewals.
type renewCountNode struct {
	scriptNode
	renews atomic.Int32
}

func (n *renewCountNode) renew(ctx context.Context, r *fencelockv1.RenewRequest) (*fencelockv1.RenewResponse, error) {
	n.renews.Add(1)
	return n.scriptNode.renew(ctx, r)
}

// cancelUnknownNode: the first Acquire waits until its caller gives up;
// the first CancelWait's outcome is unknown (it waits until its attempt
// times out, and may still land later), the next ones are answered. It
// records an Acquire sent while no CancelWait had been answered.
type cancelUnknownNode struct {
	flakyNode
	acquires, cancels atomic.Int32
	answered, raced   atomic.Bool
}

func (n *cancelUnknownNode) acquire(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
	if n.acquires.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if !n.answered.Load() {
		n.raced.Store(true)
	}
	return grantOf(r), nil
}

func (n *cancelUnknownNode) cancelWait(ctx context.Context, _, _ string) error {
	if n.cancels.Add(1) == 1 {
		<-ctx.Done()
		return ctx.Err()
	}
	n.answered.Store(true)
	return nil
}

// A new Acquire with a request id whose take-back has an unknown outcome
// waits until a take-back is answered: a CancelWait that lands after the
// new grant would end it.
func TestAcquire_OwnIDWaitsForATakeBackAnswered(t *testing.T) {
	t.Parallel()
	n := &cancelUnknownNode{}
	c := fakeClient(t, n, func(cfg *Config) { cfg.AttemptTimeout = 200 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := c.Acquire(ctx, "x", WithRequestID("r"))
	cancel()
	if err == nil {
		t.Fatal("the first Acquire did not give up")
	}
	l, err := c.Acquire(context.Background(), "x", WithRequestID("r"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if n.raced.Load() {
		t.Fatal("an Acquire with the request id went out while its take-back had an unknown outcome")
	}
	if n.cancels.Load() < 2 {
		t.Fatalf("%d CancelWait calls; want the unknown one retried", n.cancels.Load())
	}
}
