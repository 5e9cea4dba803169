package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// flakyNode is a fake node (the client's transport seam) whose Acquire
// answers Unavailable (a leader that stepped down, a connection cut) for
// its first failures calls, each after a delay (a wait in the queue), and
// grants after that. It records the CancelWait calls it gets.
type flakyNode struct {
	delay     time.Duration
	failures  int  // -1: always fail
	renewDown bool // Renew answers Unavailable

	mu        sync.Mutex
	acquires  int
	reqs      []*fencelockv1.AcquireRequest
	cancelled []string // request ids
}

var _ node = (*flakyNode)(nil)

func (n *flakyNode) acquire(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
	n.mu.Lock()
	n.acquires++
	n.reqs = append(n.reqs, r)
	fail := n.failures < 0 || n.acquires <= n.failures
	n.mu.Unlock()
	if fail {
		time.Sleep(n.delay)
		return nil, fmt.Errorf("leader stepped down: %w", fencelock.ErrUnavailable)
	}
	return &fencelockv1.Grant{Name: r.Name, Token: 7, LeaseId: "lease-7", Ttl: durationpb.New(10 * time.Second)}, nil
}

func (n *flakyNode) renew(ctx context.Context, r *fencelockv1.RenewRequest) (*fencelockv1.RenewResponse, error) {
	if n.renewDown {
		return nil, fmt.Errorf("no leader: %w", fencelock.ErrUnavailable)
	}
	return &fencelockv1.RenewResponse{Ttl: durationpb.New(10 * time.Second)}, nil
}

func (n *flakyNode) cancelWait(ctx context.Context, name, rid string) error {
	n.mu.Lock()
	n.cancelled = append(n.cancelled, rid)
	n.mu.Unlock()
	return nil
}

func (n *flakyNode) release(ctx context.Context, r *fencelockv1.ReleaseRequest) error { return nil }

func (n *flakyNode) describe(ctx context.Context, name string) (*fencelockv1.LockInfo, error) {
	return nil, fencelock.ErrNotFound
}

func (n *flakyNode) list(ctx context.Context, r *fencelockv1.ListRequest) (*fencelockv1.ListResponse, error) {
	return &fencelockv1.ListResponse{}, nil
}

func (n *flakyNode) checkSequencer(ctx context.Context, seq string) (*fencelockv1.CheckSequencerResponse, error) {
	return nil, fencelock.ErrInvalidSequencer
}

func (n *flakyNode) counts() (acquires int, cancelled []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.acquires, append([]string(nil), n.cancelled...)
}

// fakeClient is a client whose every endpoint is the fake node n.
func fakeClient(t *testing.T, n node, change func(*Config)) *Client {
	t.Helper()
	c := quietTestClient(t, "fake:1", change)
	c.dial = func(string) node { return n }
	eps := []*endpoint{c.newEndpoint("http://fake:1")}
	c.eps.Store(&eps)
	return c
}

func flakyClient(t *testing.T, n *flakyNode) *Client {
	t.Helper()
	return fakeClient(t, n, func(cfg *Config) { cfg.RetryTimeout = 200 * time.Millisecond })
}

// TestAcquire_RetriesAfterAWaitLongerThanRetryTimeout: RetryTimeout counts
// from the first failure, not from the call's start. A waiting Acquire
// whose node goes away after a wait longer than RetryTimeout is retried,
// not given up with its request left in the queue.
func TestAcquire_RetriesAfterAWaitLongerThanRetryTimeout(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
			if want := c.ownRequestID("req-1"); cancelled[0] != want {
				t.Fatalf("CancelWait for %q, want req-1's %q", cancelled[0], want)
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
	flakyNode
	releases int
}

func (n *lostNode) acquire(ctx context.Context, r *fencelockv1.AcquireRequest) (*fencelockv1.Grant, error) {
	return &fencelockv1.Grant{Name: r.Name, Token: 9, LeaseId: "lease-9", Ttl: durationpb.New(300 * time.Millisecond)}, nil
}

func (n *lostNode) renew(ctx context.Context, r *fencelockv1.RenewRequest) (*fencelockv1.RenewResponse, error) {
	return nil, fmt.Errorf("lease-9 expired: %w", fencelock.ErrNotHolder)
}

func (n *lostNode) release(ctx context.Context, r *fencelockv1.ReleaseRequest) error {
	n.mu.Lock()
	n.releases++
	first := n.releases == 1
	n.mu.Unlock()
	if first {
		return wire.NoAnswer(errors.New("connection cut"))
	}
	return fmt.Errorf("lease-9: %w", fencelock.ErrNotHolder)
}

// TestLock_ReleaseOfALostLeaseReportsNotHolder: a Lock whose lease was lost
// before Release reports ErrNotHolder, also when an earlier attempt of the
// release had an unknown outcome (which, for a lease still believed held,
// is taken to be the release that made the grant go).
func TestLock_ReleaseOfALostLeaseReportsNotHolder(t *testing.T) {
	t.Parallel()
	c := fakeClient(t, &lostNode{}, nil)
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
	t.Parallel()
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
		if _, cancelled := n.counts(); len(cancelled) > 0 && cancelled[0] == c.ownRequestID("job-7") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no CancelWait for the grant Acquire did not return")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
