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

// TestAcquire_RetryWithOwnRequestIDKeepsItsGrant: after a caller with its
// own request id gives up while the node is frozen (its call's cancel
// reaches the node late), a new Acquire with that id gets a grant that no
// late take-back ends: the lock stays held by it past the node's grace.
func TestAcquire_RetryWithOwnRequestIDKeepsItsGrant(t *testing.T) {
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
	// The node is stopped while the caller gives up, so that the cancel
	// and the retry reach it together.
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	giveUp()
	err = <-gaveUp
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire whose caller gave up = %v, want context.Canceled", err)
	}

	retried := make(chan *Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "x", WithRequestID("r"))
		if err != nil {
			t.Error(err)
		}
		retried <- l
	}()
	time.Sleep(100 * time.Millisecond) // the retry is on its way
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-retried
	if l == nil {
		t.FailNow()
	}
	for range 2 { // at once, and past the node's 3 s grace for a request its calls left
		li, err := other.Describe(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if li.Token != l.Token() {
			t.Fatalf("lock after the retry = %+v; want it held with the retry's token %d", li, l.Token())
		}
		time.Sleep(4 * time.Second)
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
