package client_test

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

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/netproxy"
)

// batchMetrics returns the node's count of Batch requests (from HTTP or the
// pipe) and the calls they carried.
func batchMetrics(t *testing.T, addr string) (batches, calls float64) {
	t.Helper()
	return counter(t, addr, "fencelock_batch_items_count"), counter(t, addr, "fencelock_batch_items_sum")
}

// pipeClient is a client with the pipe on, whose HTTP requests go through
// tr.
func pipeClient(t *testing.T, addr string, tr http.RoundTripper) *client.Client {
	t.Helper()
	return clientThrough(t, addr, tr, false)
}

// TestClient_PipeCarriesTheCalls: with the pipe, one HTTP request (the
// upgrade) carries every Acquire and Release, lone or concurrent, and the
// grants are distinct.
func TestClient_PipeCarriesTheCalls(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr := &countingTransport{n: map[string]int{}}
	c := pipeClient(t, addr, tr)
	seen := map[fencelock.Token]bool{}
	var mu sync.Mutex
	record := func(tok fencelock.Token) error {
		mu.Lock()
		defer mu.Unlock()
		if seen[tok] {
			return fmt.Errorf("token %d granted twice", tok)
		}
		seen[tok] = true
		return nil
	}
	const lone, workers, rounds = 10, 16, 5
	for i := 0; i < lone; i++ {
		l, err := c.Acquire(ctx, "lone")
		if err != nil {
			t.Fatal(err)
		}
		if err := record(l.Token()); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				l, err := c.Acquire(ctx, fmt.Sprintf("own-%d", w))
				if err == nil {
					err = record(l.Token())
				}
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Waits too: twice, an Acquire of a lock another client holds waits
	// (the second time as a contended lock's single wait call).
	for i := 0; i < 2; i++ {
		holder, err := quietClient(t, addr).Acquire(ctx, "contended")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := c.Acquire(ctx, "contended")
			if err == nil {
				if err = record(l.Token()); err == nil {
					err = l.Release(ctx)
				}
			}
			got <- err
		}()
		waitForWaiters(t, ctx, addr, "contended", 1)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	if p, b, a, r := tr.count("fencelock.v1.Pipe"), tr.count("Batch"), tr.count("Acquire"), tr.count("Release"); p != 1 || b+a+r != 0 {
		t.Fatalf("HTTP requests: %d pipe upgrades, %d batches, %d acquires, %d releases; want one upgrade and nothing else", p, b, a, r)
	}
	// Every acquire and release of the lone and concurrent rounds went in
	// a batch on the pipe (the waits' calls, and the other client's, come
	// on top).
	want := float64(2 * (lone + workers*rounds))
	if batches, calls := batchMetrics(t, addr); calls < want || batches > calls {
		t.Fatalf("the node ran %v batches carrying %v calls, want at least %v calls", batches, calls, want)
	}
}

// TestClient_InvalidCallFailsAlone: a call the node would refuse, or that
// protobuf cannot encode (invalid UTF-8), fails at once with its own error,
// and the pipe, with the calls on it, goes on. (Sent, a request that
// cannot be encoded broke the shared pipe and was retried as unavailable
// until the retries ran out.)
func TestClient_InvalidCallFailsAlone(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &countingTransport{n: map[string]int{}}
	c := pipeClient(t, addr, tr)
	l, err := c.Acquire(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		what string
		call func() error
		want error
	}{
		{"a 70 KiB holder label", func() error {
			_, err := c.Acquire(ctx, "huge", client.WithHolder(strings.Repeat("h", 70<<10)))
			return err
		}, fencelock.ErrInvalidArgument},
		{"a name that is not UTF-8", func() error { _, err := c.Acquire(ctx, "bad\xff"); return err }, fencelock.ErrInvalidName},
		{"a holder label that is not UTF-8", func() error {
			_, err := c.Acquire(ctx, "ok", client.WithHolder("\xff"))
			return err
		}, fencelock.ErrInvalidArgument},
		{"a holder label with an escape", func() error {
			_, err := c.Acquire(ctx, "ok", client.WithHolder("\x1b[2J"))
			return err
		}, fencelock.ErrInvalidArgument},
		{"a request id that is not UTF-8", func() error {
			_, err := c.Acquire(ctx, "ok", client.WithRequestID("\xff"))
			return err
		}, fencelock.ErrInvalidArgument},
		{"a release of a name that is not UTF-8", func() error { return c.Release(ctx, "bad\xff", l.LeaseID(), l.Token()) }, fencelock.ErrInvalidName},
		{"a renewal of a name that is not UTF-8", func() error { _, err := c.Renew(ctx, "bad\xff", l.LeaseID(), l.Token()); return err }, fencelock.ErrInvalidName},
	}
	for _, tc := range calls {
		start := time.Now()
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Fatalf("%s: %v, want an error wrapping %v", tc.what, err, tc.want)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: refused after %v, not at once", tc.what, took)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release on the same pipe after the refused calls: %v", err)
	}
	if n := tr.count("fencelock.v1.Pipe"); n != 1 {
		t.Fatalf("%d pipe upgrades, want 1: a refused call broke the pipe", n)
	}
}

// refusePipe answers the pipe's upgrade with 404, as a node of an older
// release (or a proxy that does not pass upgrades) would, and passes every
// other request on.
type refusePipe struct{ countingTransport }

func (r *refusePipe) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/fencelock.v1.Pipe") {
		r.mu.Lock()
		r.n["fencelock.v1.Pipe"]++
		r.mu.Unlock()
		return &http.Response{StatusCode: http.StatusNotFound, Status: "404 Not Found", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: io.NopCloser(strings.NewReader("404 page not found\n")), Request: req}, nil
	}
	return r.countingTransport.RoundTrip(req)
}

// TestClient_RefusedPipeFallsBackToConnect: a node that refuses the pipe is
// asked once; the calls go as Connect requests and succeed.
func TestClient_RefusedPipeFallsBackToConnect(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr := &refusePipe{countingTransport{n: map[string]int{}}}
	c := pipeClient(t, addr, tr)
	for i := 0; i < 5; i++ {
		l, err := c.Acquire(ctx, "refused")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p, a, r := tr.count("fencelock.v1.Pipe"), tr.count("Acquire"), tr.count("Release"); p != 1 || a != 5 || r != 5 {
		t.Fatalf("%d pipe upgrades, %d unary acquires, %d releases; want 1, 5 and 5", p, a, r)
	}
}

// TestClient_PipeThroughAHungLinkRedials: when the link to the node hangs
// silently (a partition), a call out on the pipe times out, the client drops
// that connection, and once the link is back the call succeeds on a new
// one. The request that the hung connection delivers late is the same
// request (same id): the caller ends up with the one grant the node made.
func TestClient_PipeThroughAHungLinkRedials(t *testing.T) {
	addr := startServer(t)
	proxy, err := netproxy.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr := &countingTransport{n: map[string]int{}}
	cfg := client.DefaultConfig(proxy.Addr)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.HTTPClient = &http.Client{Transport: tr}
	cfg.AttemptTimeout = 300 * time.Millisecond
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, err := c.Acquire(ctx, "hung")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Block()
	time.AfterFunc(time.Second, proxy.Unblock)
	start := time.Now()
	l, err := c.TryAcquire(ctx, "hung") // no wait: each attempt takes AttemptTimeout
	if err != nil {
		t.Fatalf("acquire across a 1 s partition: %v", err)
	}
	if time.Since(start) < time.Second {
		t.Fatalf("acquire returned after %v, before the link was back: the test did not cut it", time.Since(start))
	}
	if n := tr.count("fencelock.v1.Pipe"); n < 2 {
		t.Fatalf("%d pipe upgrades, want a new one after the hung connection", n)
	}
	li, err := quietClient(t, addr).Describe(ctx, "hung")
	if err != nil {
		t.Fatal(err)
	}
	if li.Token != l.Token() || len(li.Waiters) != 0 {
		t.Fatalf("the node holds token %d with waiters %+v; the caller was granted %d", li.Token, li.Waiters, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("releasing the grant the caller got: %v", err)
	}
}

// TestClient_GiveUpMidFlightLeavesNoGrant: callers whose context ends while
// their Acquire of a free lock is still on its way leave no grant held for
// nobody: the client takes each such request back once it has landed (on
// the pipe, when its answer comes; as a Connect call, a moment after it was
// sent). Without that, a take-back that overtakes the acquire finds nothing,
// and the lock stays held until its TTL (a minute here).
func TestClient_GiveUpMidFlightLeavesNoGrant(t *testing.T) {
	addr := startServer(t)
	for _, noPipe := range []bool{false, true} {
		grantsBefore := counter(t, addr, "fencelock_grants_total")
		cfg := client.DefaultConfig(addr)
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.NoPipe = noPipe
		c, err := client.NewFromConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const n = 60
		names := make([]string, n)
		gaveUp := 0
		for i := range names {
			names[i] = fmt.Sprintf("mid-flight-%v-%d", noPipe, i)
			// From well before an answer can come to about when it does.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+10*i)*time.Microsecond)
			l, err := c.Acquire(ctx, names[i], client.WithTTL(time.Minute))
			cancel()
			if err != nil {
				gaveUp++
				continue
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if gaveUp == 0 {
			t.Fatalf("noPipe=%v: no caller gave up: the test did not test anything", noPipe)
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, name := range names {
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				li, err := c.Describe(ctx, name)
				cancel()
				if errors.Is(err, fencelock.ErrNotFound) || err == nil && li.Holder == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("noPipe=%v: %s is still held (%+v, %v) 10 s after its caller gave up", noPipe, name, li, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		landed := int(counter(t, addr, "fencelock_grants_total")-grantsBefore) - (n - gaveUp)
		t.Logf("noPipe=%v: %d of %d callers gave up mid-flight; %d of those were granted, and taken back", noPipe, gaveUp, n, landed)
		if landed == 0 {
			t.Fatalf("noPipe=%v: no caller gave up after its acquire reached the node: the take-back was not tested", noPipe)
		}
	}
}

// counter reads a counter from the node's metrics.
func counter(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v float64
	for _, line := range strings.Split(string(body), "\n") {
		fmt.Sscanf(line, name+" %g", &v)
	}
	return v
}

// TestClient_WaiterThatGivesUpOnThePipeLeavesTheQueue: an Acquire waiting
// on the pipe whose caller gives up leaves the lock's queue at once, and
// the lock's next release does not grant it.
func TestClient_WaiterThatGivesUpOnThePipeLeavesTheQueue(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder, err := quietClient(t, addr).Acquire(ctx, "left")
	if err != nil {
		t.Fatal(err)
	}
	tr := &countingTransport{n: map[string]int{}}
	c := pipeClient(t, addr, tr)
	for i := 0; i < 2; i++ { // the second time as a contended lock's wait call
		// Cancelled, not a deadline: the node's own timer does not end the
		// wait, the caller's leaving does.
		short, cancelShort := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, cancelShort)
		_, err := c.Acquire(short, "left")
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("acquire that gave up = %v, want context.Canceled", err)
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		waitForWaiters(t, wctx, addr, "left", 0)
		wcancel()
	}
	if n := tr.count("Acquire"); n != 0 {
		t.Fatalf("%d Connect Acquire requests: the waits were not on the pipe", n)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := quietClient(t, addr).TryAcquire(ctx, "left")
	if err != nil {
		t.Fatalf("after the release the lock should be free, got %v: was it granted to a caller that gave up?", err)
	}
	next.Release(ctx)
}

// slowUpgrade delays the pipe's upgrade request, so that calls made
// meanwhile find a dial under way.
type slowUpgrade struct {
	*countingTransport
	delay time.Duration
}

func (s slowUpgrade) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/fencelock.v1.Pipe") {
		time.Sleep(s.delay)
	}
	return s.countingTransport.RoundTrip(r)
}

// TestClient_CallsDuringTheDialShareIt: the first calls of a new client,
// made at once while the pipe is being dialled, wait for that one dial
// instead of each opening a connection (a lone call and up to four batches
// go out at once), and none falls back to Connect.
func TestClient_CallsDuringTheDialShareIt(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr := slowUpgrade{&countingTransport{n: map[string]int{}}, 200 * time.Millisecond}
	c := pipeClient(t, addr, tr)
	const workers = 16
	start := make(chan struct{})
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := c.Acquire(ctx, fmt.Sprintf("dial-%d", w))
			if err == nil {
				err = l.Release(ctx)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p, b, a, r := tr.count("fencelock.v1.Pipe"), tr.count("Batch"), tr.count("Acquire"), tr.count("Release"); p != 1 || b+a+r != 0 {
		t.Fatalf("HTTP requests: %d pipe upgrades, %d batches, %d acquires, %d releases; want one upgrade and nothing else", p, b, a, r)
	}
}
