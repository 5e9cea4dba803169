package client

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
)

// flakyNode is a node whose Acquire answers Unavailable (a leader that
// stepped down, a connection cut) for its first failures calls, each after
// a delay (a wait in the queue), and grants after that. It records the
// CancelWait calls it gets.
type flakyNode struct {
	fencelockv1connect.UnimplementedLockServiceHandler
	delay     time.Duration
	failures  int  // -1: always fail
	renewDown bool // Renew answers Unavailable

	mu        sync.Mutex
	acquires  int
	cancelled []string // request ids
}

func (n *flakyNode) Acquire(ctx context.Context, r *connect.Request[fencelockv1.AcquireRequest]) (*connect.Response[fencelockv1.AcquireResponse], error) {
	n.mu.Lock()
	n.acquires++
	fail := n.failures < 0 || n.acquires <= n.failures
	n.mu.Unlock()
	if fail {
		time.Sleep(n.delay)
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("leader stepped down"))
	}
	return connect.NewResponse(&fencelockv1.AcquireResponse{Grant: &fencelockv1.Grant{Name: r.Msg.Name, Token: 7,
		LeaseId: "lease-7", Ttl: durationpb.New(10 * time.Second)}}), nil
}

func (n *flakyNode) Renew(ctx context.Context, r *connect.Request[fencelockv1.RenewRequest]) (*connect.Response[fencelockv1.RenewResponse], error) {
	if n.renewDown {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no leader"))
	}
	return connect.NewResponse(&fencelockv1.RenewResponse{Ttl: durationpb.New(10 * time.Second)}), nil
}

func (n *flakyNode) CancelWait(ctx context.Context, r *connect.Request[fencelockv1.CancelWaitRequest]) (*connect.Response[fencelockv1.CancelWaitResponse], error) {
	n.mu.Lock()
	n.cancelled = append(n.cancelled, r.Msg.RequestId)
	n.mu.Unlock()
	return connect.NewResponse(&fencelockv1.CancelWaitResponse{}), nil
}

func (n *flakyNode) Release(ctx context.Context, r *connect.Request[fencelockv1.ReleaseRequest]) (*connect.Response[fencelockv1.ReleaseResponse], error) {
	return connect.NewResponse(&fencelockv1.ReleaseResponse{}), nil
}

func (n *flakyNode) counts() (acquires int, cancelled []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.acquires, append([]string(nil), n.cancelled...)
}

func flakyClient(t *testing.T, n *flakyNode) *Client {
	t.Helper()
	_, h := fencelockv1connect.NewLockServiceHandler(n)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return quietTestClient(t, srv.URL, func(cfg *Config) {
		cfg.NoBatch = true // unary calls, which the fake serves
		cfg.RetryTimeout = 200 * time.Millisecond
	})
}

// TestAcquire_RetriesAfterAWaitLongerThanRetryTimeout: RetryTimeout counts
// from the first failure, not from the call's start. A waiting Acquire
// whose node goes away after a wait longer than RetryTimeout is retried,
// not given up with its request left in the queue.
func TestAcquire_RetriesAfterAWaitLongerThanRetryTimeout(t *testing.T) {
	n := &flakyNode{delay: 400 * time.Millisecond, failures: 1} // RetryTimeout is 200ms
	c := flakyClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "long-wait", WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("acquire after one failed 400ms wait = %v, want the grant of the retry", err)
	}
	defer l.Release(ctx)
	if got, _ := n.counts(); got != 2 {
		t.Errorf("%d acquire calls, want 2 (one failure, one retry)", got)
	}
}

// TestAcquire_OutOfRetriesTakesTheRequestBack: when Acquire returns because
// its retries ran out with the last attempts' outcome unknown, the caller's
// context is still alive but nothing will ask for the request again: the
// client takes it back (CancelWait), or it could wait in the queue and be
// granted to nobody.
func TestAcquire_OutOfRetriesTakesTheRequestBack(t *testing.T) {
	n := &flakyNode{delay: 20 * time.Millisecond, failures: -1}
	c := flakyClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Acquire(ctx, "unreachable", WithWait(5*time.Second), WithRequestID("req-1"))
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("acquire = %v, want an error wrapping ErrUnavailable", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the caller's context ended: this test is about retries that run out first")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, cancelled := n.counts(); len(cancelled) > 0 {
			if cancelled[0] != "req-1" {
				t.Fatalf("CancelWait for %q, want req-1", cancelled[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no CancelWait after Acquire gave up: a request it may have queued is left for nobody")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lostNode grants short leases, refuses their renewal (the grant ended on
// the node) and answers the first Release Unavailable (its outcome
// unknown to the client), every later one NotHolder.
type lostNode struct {
	fencelockv1connect.UnimplementedLockServiceHandler
	mu       sync.Mutex
	releases int
}

func (n *lostNode) Acquire(ctx context.Context, r *connect.Request[fencelockv1.AcquireRequest]) (*connect.Response[fencelockv1.AcquireResponse], error) {
	return connect.NewResponse(&fencelockv1.AcquireResponse{Grant: &fencelockv1.Grant{Name: r.Msg.Name, Token: 9,
		LeaseId: "lease-9", Ttl: durationpb.New(300 * time.Millisecond)}}), nil
}

func (n *lostNode) Renew(ctx context.Context, r *connect.Request[fencelockv1.RenewRequest]) (*connect.Response[fencelockv1.RenewResponse], error) {
	return nil, wire.ToConnect(fmt.Errorf("lease-9 expired: %w", fencelock.ErrNotHolder))
}

func (n *lostNode) Release(ctx context.Context, r *connect.Request[fencelockv1.ReleaseRequest]) (*connect.Response[fencelockv1.ReleaseResponse], error) {
	n.mu.Lock()
	n.releases++
	first := n.releases == 1
	n.mu.Unlock()
	if first {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("connection cut"))
	}
	return nil, wire.ToConnect(fmt.Errorf("lease-9: %w", fencelock.ErrNotHolder))
}

// TestLock_ReleaseOfALostLeaseReportsNotHolder: a Lock whose lease was lost
// before Release reports ErrNotHolder, also when an earlier attempt of the
// release had an unknown outcome (which, for a lease still believed held,
// is taken to be the release that made the grant go).
func TestLock_ReleaseOfALostLeaseReportsNotHolder(t *testing.T) {
	_, h := fencelockv1connect.NewLockServiceHandler(&lostNode{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := quietTestClient(t, srv.URL, func(cfg *Config) { cfg.NoBatch = true })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "lost", WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the refused renewal did not end the lock's context")
	}
	if err := l.Release(ctx); !errors.Is(err, fencelock.ErrNotHolder) {
		t.Fatalf("release of a lost lease = %v, want an error wrapping ErrNotHolder", err)
	}
}

// TestAcquire_OwnRequestIDWithoutARenewalFails: a grant returned for the
// caller's own request id may predate the call, so its lease counts only
// from a renewal; when that renewal cannot be made, Acquire fails and takes
// the grant back rather than return a Lock whose lease has no known start.
func TestAcquire_OwnRequestIDWithoutARenewalFails(t *testing.T) {
	n := &flakyNode{renewDown: true}
	c := flakyClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "own", WithRequestID("job-7"))
	if err == nil {
		l.Release(ctx)
		t.Fatal("Acquire with its own request id returned a Lock although its grant could not be renewed")
	}
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("acquire = %v, want an error wrapping ErrUnavailable", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, cancelled := n.counts(); len(cancelled) > 0 && cancelled[0] == "job-7" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no CancelWait for the grant Acquire did not return")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
