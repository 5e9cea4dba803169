package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/sequencer"
	"github.com/fencelock/fencelock/server"
)

// startServer runs an in-process one-node service and returns its API
// address.
func startServer(tb testing.TB) string {
	tb.Helper()
	return fencelocktest.StartNode(tb).Addr
}

// startServerWith is startServer with a changed configuration.
func startServerWith(tb testing.TB, change func(*server.Config)) string {
	tb.Helper()
	return fencelocktest.StartNode(tb, change).Addr
}

func quietClient(tb testing.TB, addr string) *client.Client {
	tb.Helper()
	cfg := client.DefaultConfig(addr)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func TestLock_ContextEndsOnNotHolderAnswer(t *testing.T) {
	t.Parallel()
	c := quietClient(t, startServer(t))
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "x", client.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Someone who knows the grant releases it behind the holder's back.
	if err := c.Release(ctx, "x", l.LeaseID(), l.Token()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(2500 * time.Millisecond):
		t.Fatal("lock context still live 2.5s after its grant ended")
	}
	if !errors.Is(l.Err(), fencelock.ErrNotHolder) {
		t.Errorf("lock context ended with %v, want ErrNotHolder from the renewal (before the deadline)", l.Err())
	}
}

func TestLock_KeepAliveHoldsPastTTL(t *testing.T) {
	t.Parallel()
	c := quietClient(t, startServer(t))
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "x", client.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while keep-alive ran: %v", err)
	}
	if _, err := c.TryAcquire(ctx, "x", client.WithTTL(time.Second)); !errors.Is(err, fencelock.ErrLockHeld) {
		t.Errorf("second try-lock: got %v, want ErrLockHeld", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Errorf("after Release, Err() = %v, want ErrReleased", l.Err())
	}
}

func TestDo_RunsWithTokenAndReleases(t *testing.T) {
	t.Parallel()
	c := quietClient(t, startServer(t))
	ctx := context.Background()
	var got fencelock.Token
	err := client.Do(ctx, c, "job", func(ctx context.Context, token fencelock.Token) error {
		got = token
		if ctx.Err() != nil {
			t.Error("critical section started with a dead context")
		}
		return errors.New("boom")
	}, client.WithTTL(2*time.Second))
	if err == nil || err.Error() != "boom" {
		t.Errorf("Do returned %v, want fn's error", err)
	}
	if got == 0 {
		t.Error("fn got token 0")
	}
	l, err := c.TryAcquire(ctx, "job", client.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("lock not released after Do: %v", err)
	}
	if l.Token() <= got {
		t.Errorf("next token %d not above %d", l.Token(), got)
	}
}

func TestClient_ErrorsKeepIdentityAcrossTheWire(t *testing.T) {
	t.Parallel()
	c := quietClient(t, startServer(t))
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"empty name", func() error { _, err := c.TryAcquire(ctx, ""); return err }, fencelock.ErrInvalidName},
		{"ttl too long", func() error { _, err := c.TryAcquire(ctx, "a", client.WithTTL(2*time.Hour)); return err }, fencelock.ErrInvalidTTL},
		{"negative wait", func() error { _, err := c.Acquire(ctx, "a", client.WithWait(-time.Second)); return err }, fencelock.ErrInvalidArgument},
		{"describe missing", func() error { _, err := c.Describe(ctx, "missing"); return err }, fencelock.ErrNotFound},
		{"release unknown", func() error {
			return c.Release(ctx, "a", fencelock.NewLeaseID(), 7)
		}, fencelock.ErrNotHolder},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want errors.Is %v", err, tc.want)
			}
		})
	}
}

func TestClient_RotatesPastDeadEndpoints(t *testing.T) {
	t.Parallel()
	live := startServer(t)
	dead := func() string { // a port nobody listens on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	cfg := client.DefaultConfig(dead(), dead(), live)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ { // several calls, so the rotation wraps around
		if _, err := c.Describe(context.Background(), "none"); !errors.Is(err, fencelock.ErrNotFound) {
			t.Fatalf("call %d: got %v, want the live endpoint's ErrNotFound", i, err)
		}
	}
}

func TestAcquire_SameRequestIDOnTwoLocksGetsTheRightGrant(t *testing.T) {
	t.Parallel()
	c := quietClient(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hx, err := c.TryAcquire(ctx, "x", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	hy, err := c.TryAcquire(ctx, "y", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *client.Lock
		err error
	}
	wx, wy := make(chan result, 1), make(chan result, 1)
	for name, ch := range map[string]chan result{"x": wx, "y": wy} {
		go func() {
			l, err := c.Acquire(ctx, name, client.WithTTL(10*time.Second), client.WithRequestID("same-id"))
			ch <- result{l, err}
		}()
	}
	for _, name := range []string{"x", "y"} {
		for {
			li, err := c.Describe(ctx, name)
			if err == nil && len(li.Waiters) == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := hx.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rx := <-wx
	if rx.err != nil || rx.l.Name() != "x" {
		t.Fatalf("waiter on x: %+v", rx)
	}
	select {
	case ry := <-wy:
		t.Fatalf("the waiter on y returned (%v, %v) when x was granted", ry.l.Token(), ry.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := hy.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ry := <-wy
	if ry.err != nil || ry.l.Token() == rx.l.Token() {
		t.Fatalf("waiter on y got %+v; want its own grant, not x's token %d", ry, rx.l.Token())
	}
	li, err := c.Describe(ctx, "y")
	if err != nil || li.Token != ry.l.Token() {
		t.Errorf("y is held with token %d (%v), but its waiter was told %d", li.Token, err, ry.l.Token())
	}
}

// TestClient_ConcurrentCallsGetDistinctGrants: many goroutines locking
// their own locks through one Client get distinct grants.
func TestClient_ConcurrentCallsGetDistinctGrants(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	c := quietClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const workers, rounds = 32, 10
	tokens := make(chan fencelock.Token, workers*rounds)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				l, err := c.Acquire(ctx, fmt.Sprintf("own-%d", w))
				if err != nil {
					errs <- err
					return
				}
				tokens <- l.Token()
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(tokens)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[fencelock.Token]bool{}
	for tok := range tokens {
		if seen[tok] {
			t.Fatalf("token %d granted twice", tok)
		}
		seen[tok] = true
	}
}

// slowAcquires delays every Session stream (which carries acquires) on its
// way to the node, so a caller can give up while its call is out.
type slowAcquires struct {
	delay time.Duration
	sent  atomic.Int32
	next  http.RoundTripper
}

func (s *slowAcquires) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/Session") {
		s.sent.Add(1)
		time.Sleep(s.delay)
	}
	return s.next.RoundTrip(r)
}

// TestClient_CallerThatGivesUpLeavesNothingBehind: a caller whose context
// ends while its acquire is still on its way leaves no waiter in the queue
// and no grant held for nobody.
func TestClient_CallerThatGivesUpLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	holderC := quietClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holder, err := holderC.Acquire(ctx, "given-up")
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.DefaultConfig(addr)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	slowTr := &slowAcquires{delay: 300 * time.Millisecond, next: testproc.H2CTransport()}
	cfg.HTTPClient = &http.Client{Transport: slowTr}
	slow, err := client.NewFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if _, err := slow.Acquire(short, "given-up"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire that gave up = %v, want context.DeadlineExceeded", err)
	}
	if slowTr.sent.Load() == 0 {
		t.Fatal("the acquire was not sent: this test is about a call out when its caller gives up")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		li, err := holderC.Describe(ctx, "given-up")
		if err != nil {
			t.Fatal(err)
		}
		if len(li.Waiters) == 0 && time.Since(deadline.Add(-5*time.Second)) > 500*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned request still waits in the queue: %+v", li.Waiters)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := holderC.TryAcquire(ctx, "given-up")
	if err != nil {
		t.Fatalf("after the release the lock should be free, got %v: was it granted to the caller that gave up?", err)
	}
	next.Release(ctx)
}

// TestClient_WaitLongerThanTheNodeAllows: a node ends one Acquire call at
// its --max-wait; the client asks again until its own wait is over, so
// WithWait(3s) against a node that allows 500 ms still gets a lock
// released after 1.5 s.
func TestClient_WaitLongerThanTheNodeAllows(t *testing.T) {
	t.Parallel()
	addr := startServerWith(t, func(cfg *server.Config) { cfg.MaxWait = 500 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder, err := quietClient(t, addr).Acquire(ctx, "short-waits")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(1500*time.Millisecond, func() { holder.Release(context.Background()) })
	start := time.Now()
	l, err := quietClient(t, addr).Acquire(ctx, "short-waits", client.WithWait(3*time.Second))
	if err != nil {
		t.Fatalf("acquire with a 3 s wait, lock released after 1.5 s: %v (after %v)", err, time.Since(start))
	}
	l.Release(ctx)
	// And a wait shorter than the hold still ends with the lock held.
	holder, err = quietClient(t, addr).Acquire(ctx, "short-waits")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	if _, err := quietClient(t, addr).Acquire(ctx, "short-waits", client.WithWait(1200*time.Millisecond)); !errors.Is(err, fencelock.ErrLockHeld) {
		t.Fatalf("acquire with a 1.2 s wait on a held lock = %v, want ErrLockHeld", err)
	}
	// Its calls asked the node to keep its place, but not the last: once
	// the wait is over, the request is out of the queue.
	li, err := quietClient(t, addr).Describe(ctx, "short-waits")
	if err != nil {
		t.Fatal(err)
	}
	if len(li.Waiters) != 0 {
		t.Fatalf("after the wait ended, the lock still has waiters %+v, want none", li.Waiters)
	}
}

// TestAcquire_OwnRequestIDLeaseCountsFromARenewal: with the caller's own
// request id, Acquire can return a grant made long before the call (an
// earlier Acquire of the same client). The Lock must not believe in the
// lease longer than the node does: its deadline comes from a renewal made
// by this call, not from the call's start.
func TestAcquire_OwnRequestIDLeaseCountsFromARenewal(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const ttl = 3 * time.Second
	first := quietClient(t, addr)
	l1, err := first.Acquire(ctx, "own-id", client.WithTTL(ttl), client.WithRequestID("job-42"))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	time.Sleep(ttl / 2)
	again := first
	l2, err := again.Acquire(ctx, "own-id", client.WithTTL(ttl), client.WithRequestID("job-42"))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Token() != l1.Token() {
		t.Fatalf("token %d, want the first process's grant %d", l2.Token(), l1.Token())
	}
	li, err := again.Describe(ctx, "own-id")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Deadline().After(li.Expires) {
		t.Errorf("the Lock believes in its lease until %v, %v after the node lets it expire (%v)",
			l2.Deadline().Format(time.StampMilli), l2.Deadline().Sub(li.Expires), li.Expires.Format(time.StampMilli))
	}
	// Its sequencer covers the lease as long as the Lock believes in it:
	// the old grant's own sequencer ended with the lease it came with.
	if seq, _, _, err := sequencer.Parse(l2.Sequencer()); err != nil || seq.LeaseEnd.Before(l2.Deadline()) {
		t.Errorf("the Lock's sequencer covers the lease until %v (%v), before the Lock's deadline %v",
			seq.LeaseEnd.Format(time.StampMilli), err, l2.Deadline().Format(time.StampMilli))
	}
}

// TestAcquire_OneRequestIDOnTwoLocks: the service remembers a request id per
// lock, so a retry on the first lock still finds its grant after the same
// id was used on a second one. A request id with a zero byte is refused.
func TestAcquire_OneRequestIDOnTwoLocks(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := quietClient(t, addr)
	defer c.Close()
	a, err := c.Acquire(ctx, "job-a", client.WithTTL(10*time.Second), client.WithRequestID("job"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := c.Acquire(ctx, "job-b", client.WithTTL(10*time.Second), client.WithRequestID("job"))
	if err != nil {
		t.Fatalf("the same id on a second lock: %v", err)
	}
	defer b.Release(ctx)
	retry, err := c.TryAcquire(ctx, "job-a", client.WithTTL(10*time.Second), client.WithRequestID("job"))
	if err != nil {
		t.Fatalf("retry on the first lock: %v; want its grant, token %d", err, a.Token())
	}
	if retry.Token() != a.Token() {
		t.Fatalf("retry on the first lock: token %d; want its grant, token %d", retry.Token(), a.Token())
	}
	if _, err := c.TryAcquire(ctx, "job-c", client.WithRequestID("jo\x00b")); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("request id with a zero byte: %v, want ErrInvalidArgument", err)
	}
}

// TestClient_WorksOverHTTP1: a client whose HTTP client cannot speak
// HTTP/2 (a plain http.Transport to an http:// node) gets its Session
// stream refused, and makes its calls as unary calls: a try-lock, a wait
// in the queue until a release, a renewal, a release, and the take-back of
// a caller that gives up all work.
func TestClient_WorksOverHTTP1(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	cfg := client.DefaultConfig(addr)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.HTTPClient = &http.Client{Transport: &http.Transport{}}
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := c.TryAcquire(ctx, "h1")
	if err != nil {
		t.Fatalf("try-lock over HTTP/1.1 = %v, want a grant", err)
	}
	waited := make(chan *client.Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "h1", client.WithWait(5*time.Second))
		if err != nil {
			t.Errorf("acquire waiting over HTTP/1.1 = %v, want the grant after the release", err)
		}
		waited <- l
	}()
	waitForWaiters(t, c, "h1", 1)
	if err := first.Release(ctx); err != nil {
		t.Fatalf("release over HTTP/1.1: %v", err)
	}
	second := <-waited
	if second == nil {
		t.FailNow()
	}
	if _, err := c.Renew(ctx, "h1", second.LeaseID(), second.Token()); err != nil {
		t.Fatalf("renew over HTTP/1.1: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := c.Acquire(short, "h1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire that gave up over HTTP/1.1 = %v, want context.DeadlineExceeded", err)
	}
	// The client's CancelWait travels on a connection of its own and can
	// reach the node before the Acquire it cancels; the node then takes
	// the request back once the call's connection has closed, within its
	// 3 s grace.
	waitForWaitersWithin(t, c, "h1", 0, 5*time.Second)
	if err := second.Release(ctx); err != nil {
		t.Fatalf("release over HTTP/1.1: %v", err)
	}
}

// waitForWaiters waits until the named lock has n waiters, for at most
// half the node's take-back of a request whose call ended (3 s): a waiter
// that leaves sooner was taken back by its client.
func waitForWaiters(tb testing.TB, c *client.Client, name string, n int) {
	tb.Helper()
	const nodeTakeBack = 3 * time.Second
	waitForWaitersWithin(tb, c, name, n, nodeTakeBack/2)
}

// waitForWaitersWithin waits until the named lock has n waiters, for at
// most within.
func waitForWaitersWithin(tb testing.TB, c *client.Client, name string, n int, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		li, err := c.Describe(context.Background(), name)
		if err != nil {
			tb.Fatal(err)
		}
		if li.WaiterCount == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("lock %q has waiters %+v, want %d", name, li.Waiters, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lateContext is a context whose deadline has passed while it has not
// ended yet. A context's timer fires a moment after its deadline; an
// answer that comes in that moment finds the context live. Here the moment
// lasts as long as the parent context.
type lateContext struct {
	context.Context
	deadline time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.deadline, true }

// TestAcquire_AnswerAfterTheDeadlineLeavesNoWaiter: a waiter's call that
// comes back after the caller's deadline, before its context has ended,
// ends the acquisition as abandoned and takes its place back at once. The
// node cut the call at its max wait and kept the place for a next call
// that will not come.
func TestAcquire_AnswerAfterTheDeadlineLeavesNoWaiter(t *testing.T) {
	t.Parallel()
	const maxWait = 300 * time.Millisecond
	addr := startServerWith(t, func(cfg *server.Config) { cfg.MaxWait = maxWait })
	holderC := quietClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder, err := holderC.Acquire(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	// The waiter's stream reaches the node 300 ms after its call starts:
	// the call asks for more than the node's max wait (so the node keeps
	// its place when it ends it), and its answer comes after the deadline.
	cfg := client.DefaultConfig(addr)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.HTTPClient = &http.Client{Transport: &slowAcquires{delay: 300 * time.Millisecond, next: testproc.H2CTransport()}}
	waiter, err := client.NewFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	late := lateContext{Context: ctx, deadline: time.Now().Add(maxWait + 100*time.Millisecond)}
	_, err = waiter.Acquire(late, "late")
	waitForWaiters(t, holderC, "late", 0)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrLockHeld) {
		t.Fatalf("acquire answered after its deadline = %v, want context.DeadlineExceeded after ErrLockHeld", err)
	}
}

// TestClient_SessionOverWebSocketOrUnary: with its own transport the
// client carries its calls on a WebSocket to each node; a node, or a
// proxy, that refuses the upgrade gets the same calls as unary calls.
func TestClient_SessionOverWebSocketOrUnary(t *testing.T) {
	t.Parallel()
	n := fencelocktest.StartNode(t)
	h := api.Handler(n.Server)
	for _, refuse := range []bool{false, true} {
		var upgrades, sessionCalls atomic.Int64
		addr := testproc.ServeH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case api.WebSocketPath:
				upgrades.Add(1)
				if refuse {
					http.NotFound(w, r)
					return
				}
			case fencelockv1connect.LockServiceSessionProcedure:
				sessionCalls.Add(1)
			}
			h.ServeHTTP(w, r)
		}))
		c := quietClient(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l, err := c.Acquire(ctx, "ws")
		if err != nil {
			t.Fatalf("acquire (upgrade refused: %v): %v", refuse, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release (upgrade refused: %v): %v", refuse, err)
		}
		cancel()
		if upgrades.Load() == 0 || sessionCalls.Load() != 0 {
			t.Fatalf("upgrade refused: %v: %d upgrades, %d HTTP/2 Session streams; want the WebSocket tried, no HTTP/2 stream", refuse, upgrades.Load(), sessionCalls.Load())
		}
	}
}
