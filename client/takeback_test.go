package client

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testproc"
)

// TestAcquire_RetryWithOwnRequestIDWaitsForTheTakeBack: after a caller
// with its own request id gives up, a new Acquire with that id waits until
// whatever the given-up call could still take back is settled, so that a
// late take-back cannot end the grant the new call returns.
func TestAcquire_RetryWithOwnRequestIDWaitsForTheTakeBack(t *testing.T) {
	srv := testproc.StartServer(t)
	newClient := func() *Client {
		return quietTestClient(t, srv.Addr, func(cfg *Config) {
			cfg.AttemptTimeout = 300 * time.Millisecond
		})
	}
	c, other := newClient(), newClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := other.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}

	first, giveUp := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.Acquire(first, "x", WithRequestID("r"))
		gaveUp <- err
	}()
	for {
		li, err := other.Describe(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if len(li.Waiters) == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The node is stopped while the caller gives up, so that its take-back
	// (which would otherwise end within a log sync) is still under way when
	// the mark is looked at.
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	giveUp()
	err = <-gaveUp
	c.takeBacks.mu.Lock()
	mark := c.takeBacks.m[c.ownRequestID("r")]
	c.takeBacks.mu.Unlock()
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire whose caller gave up = %v, want context.Canceled", err)
	}
	if mark == nil {
		t.Fatal("no mark on the request id of a caller that gave up")
	}

	retried := make(chan *Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "x", WithRequestID("r"))
		if err != nil {
			t.Error(err)
		}
		retried <- l
	}()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-retried
	if l == nil {
		t.FailNow()
	}
	select {
	case <-mark.free:
	default:
		t.Fatal("the retry returned before the given-up call's take-back was settled")
	}
	li, err := other.Describe(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if li.Token != l.Token() {
		t.Fatalf("lock after the retry = %+v; want it held with the retry's token %d", li, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release of the retry's grant: %v", err)
	}
}

// quietTestClient is a client of the node at addr that logs nothing,
// configured further by change (if set) and closed when the test ends.
func quietTestClient(t *testing.T, addr string, change func(*Config)) *Client {
	t.Helper()
	cfg := DefaultConfig(addr)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if change != nil {
		change(&cfg)
	}
	c, err := NewFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
