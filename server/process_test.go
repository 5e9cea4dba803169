package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
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

func newClient(tb testing.TB, addr string) *client.Client {
	tb.Helper()
	cfg := client.DefaultConfig(addr)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.RetryTimeout = 5 * time.Second
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// rawAcquire acquires without a keep-alive, as a holder that then pauses.
func rawAcquire(tb testing.TB, addr, name, rid string, ttl time.Duration) *fencelockv1.Grant {
	tb.Helper()
	rpc := fencelockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+addr)
	resp, err := rpc.Acquire(context.Background(), connect.NewRequest(&fencelockv1.AcquireRequest{
		Name: name, Ttl: durationpb.New(ttl), RequestId: rid}))
	if err != nil {
		tb.Fatalf("acquire %q: %v", name, wire.FromConnect(err))
	}
	return resp.Msg.Grant
}

func ctxFor(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

func TestServer_ExpiredLeaseHandsLockOnWithHigherToken(t *testing.T) {
	srv := testproc.StartServer(t)
	proxy := testproc.StartProxy(t, srv.Addr)
	ctx := ctxFor(t, 30*time.Second)
	a := newClient(t, proxy.Addr) // holder A reaches the service through a link we can cut
	b := newClient(t, srv.Addr)

	lockA, err := a.Acquire(ctx, "report.pdf", client.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Block() // A can no longer renew, like a paused or partitioned holder

	lockB, err := b.Acquire(ctx, "report.pdf", client.WithTTL(5*time.Second), client.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("B acquire after A's lease expired: %v", err)
	}
	defer lockB.Release(ctx)
	if lockB.Token() <= lockA.Token() {
		t.Errorf("B's token %d is not above A's %d", lockB.Token(), lockA.Token())
	}
	select {
	case <-lockA.Done():
	default:
		t.Fatal("A's lease context is not done although its lease expired at the service")
	}
	if !errors.Is(lockA.Err(), fencelock.ErrLeaseExpired) {
		t.Errorf("A's lease context ended with %v, want ErrLeaseExpired", lockA.Err())
	}

	proxy.Unblock()
	_, err = a.Renew(ctx, "report.pdf", lockA.LeaseID(), lockA.Token())
	if !errors.Is(err, fencelock.ErrLeaseExpired) && !errors.Is(err, fencelock.ErrNotHolder) {
		t.Errorf("A's renew after expiry: got %v, want LeaseExpired or NotHolder", err)
	}
	if err := a.Release(ctx, "report.pdf", lockA.LeaseID(), lockA.Token()); !errors.Is(err, fencelock.ErrNotHolder) {
		t.Errorf("A's release after expiry: got %v, want NotHolder", err)
	}
	li, err := b.Describe(ctx, "report.pdf")
	if err != nil || li.Token != lockB.Token() {
		t.Errorf("after A's stale release, describe says %+v, %v; want B's token %d", li, err, lockB.Token())
	}
}

func TestServer_TokensIncreaseAcrossKill9Restarts(t *testing.T) {
	srv := testproc.StartServer(t)
	ctx := ctxFor(t, 60*time.Second)
	var highest fencelock.Token
	for round := 0; round < 3; round++ {
		c := newClient(t, srv.Addr)
		for i := 0; i < 5; i++ {
			l, err := c.TryAcquire(ctx, "job", client.WithTTL(5*time.Second))
			if err != nil {
				t.Fatalf("round %d: acquire: %v", round, err)
			}
			if l.Token() <= highest {
				t.Fatalf("round %d: token %d is not above every earlier token (%d)", round, l.Token(), highest)
			}
			highest = l.Token()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		held, err := c.TryAcquire(ctx, "held", client.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		highest = max(highest, held.Token())
		srv.Kill9()
		srv.Start()
		// The held lease survives the restart: re-armed, not revoked.
		_, err = c.TryAcquire(ctx, "held", client.WithTTL(time.Second))
		var lh *fencelock.LockHeldError
		if !errors.As(err, &lh) || lh.Token != held.Token() {
			t.Fatalf("round %d: try-lock on a lease held across restart: got %v, want LockHeld with token %d", round, err, held.Token())
		}
		if err := c.Release(ctx, "held", held.LeaseID(), held.Token()); err != nil {
			t.Fatalf("round %d: release the held lock after restart: %v", round, err)
		}
	}
}

func TestServer_RetryWithSameRequestIDReturnsSameGrant(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	g1 := rawAcquire(t, srv.Addr, "dedupe", "req-1", 5*time.Second)
	g2 := rawAcquire(t, srv.Addr, "dedupe", "req-1", 5*time.Second)
	if g1.Token != g2.Token || g1.LeaseId != g2.LeaseId {
		t.Fatalf("retry got token %d lease %s, want the first grant's %d %s", g2.Token, g2.LeaseId, g1.Token, g1.LeaseId)
	}
}

func TestServer_WaitersAreGrantedInFIFOOrder(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	ctx := ctxFor(t, 30*time.Second)
	c := newClient(t, srv.Addr)
	holder, err := c.TryAcquire(ctx, "fifo", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, "fifo", client.WithTTL(10*time.Second), client.WithHolder(fmt.Sprint(i)))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				order <- -1
				return
			}
			order <- i
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		}()
		waitFor(t, func() bool { // queue waiter i before starting i+1
			li, err := c.Describe(ctx, "fifo")
			return err == nil && len(li.Waiters) == i+1
		})
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for want := 0; want < n; want++ {
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d, want %d (FIFO)", want, got, want)
		}
	}
}

func TestServer_WaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	ctx := ctxFor(t, 30*time.Second)
	c := newClient(t, srv.Addr)
	holder, err := c.TryAcquire(ctx, "q", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, "q", client.WithTTL(10*time.Second))
		errc <- err
	}()
	waitFor(t, func() bool {
		li, err := c.Describe(ctx, "q")
		return err == nil && len(li.Waiters) == 1
	})
	cancel() // the waiter disconnects
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter got %v, want context.Canceled", err)
	}
	waitFor(t, func() bool {
		li, err := c.Describe(ctx, "q")
		return err == nil && len(li.Waiters) == 0
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Describe(ctx, "q"); !errors.Is(err, fencelock.ErrNotFound) {
		t.Errorf("after release with no waiters, describe got %v, want ErrNotFound (nobody was granted)", err)
	}
}

// waitFor polls cond for up to 10s.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	tb.Fatal("condition not met within 10s")
}

func TestServer_BadInputIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	ctx := ctxFor(t, 30*time.Second)
	c := newClient(t, srv.Addr)
	held, err := c.TryAcquire(ctx, "kept", client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, body string
		wantHTTP           int
		wantCode           string
	}{
		{"empty name", "Acquire", `{"name":"","ttl":"5s"}`, 400, "invalid_name"},
		{"name too long", "Acquire", `{"name":"` + strings.Repeat("x", 513) + `","ttl":"5s"}`, 400, "invalid_name"},
		{"control character", "Acquire", `{"name":"a\u0001b","ttl":"5s"}`, 400, "invalid_name"},
		{"invalid utf-8", "Acquire", "{\"name\":\"\xff\xfe\",\"ttl\":\"5s\"}", 400, ""},
		{"ttl zero", "Acquire", `{"name":"x","ttl":"0s"}`, 400, "invalid_ttl"},
		{"ttl too long", "Acquire", `{"name":"x","ttl":"7200s"}`, 400, "invalid_ttl"},
		{"negative wait", "Acquire", `{"name":"x","ttl":"5s","wait":"-1s"}`, 400, "invalid_argument"},
		{"holder too long", "Acquire", `{"name":"x","ttl":"5s","holder":"` + strings.Repeat("h", 300) + `"}`, 400, "invalid_argument"},
		{"malformed json", "Acquire", `{"name":`, 400, ""},
		{"unknown field type", "Acquire", `{"name":5}`, 400, ""},
		{"renew unknown lease", "Renew", `{"name":"kept","leaseId":"00000000000000000000000000000000","token":"` + held.Token().String() + `"}`, 400, "not_holder"},
		{"renew malformed lease", "Renew", `{"name":"kept","leaseId":"zz","token":"1"}`, 400, "invalid_argument"},
		{"release wrong token", "Release", `{"name":"kept","leaseId":"` + string(held.LeaseID()) + `","token":"1"}`, 400, "not_holder"},
		{"release token zero", "Release", `{"name":"kept","leaseId":"` + string(held.LeaseID()) + `","token":"0"}`, 400, "missing_fencing_token"},
		{"describe unknown", "Describe", `{"name":"nope"}`, 404, "not_found"},
		{"list page too big", "List", `{"pageSize":100000}`, 400, "invalid_argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post("http://"+srv.Addr+"/fencelock.v1.LockService/"+tc.method, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantHTTP {
				t.Errorf("HTTP status %d, want %d; body %s", resp.StatusCode, tc.wantHTTP, body)
			}
			if tc.wantCode != "" && !strings.Contains(string(body), `"code":"`+tc.wantCode+`"`) {
				t.Errorf("body %s does not carry code %q", body, tc.wantCode)
			}
		})
	}
	locks, _, err := c.List(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].Name != "kept" || locks[0].Token != held.Token() {
		t.Errorf("lock table after bad input: %+v, want only %q with token %d", locks, "kept", held.Token())
	}
	if resp, err := http.Get("http://" + srv.Addr + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("server unhealthy after bad input: %v", err)
	}
}
