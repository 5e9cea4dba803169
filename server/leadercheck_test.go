package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLeaderCheck_SharesRoundsThatStartAfterTheCaller: callers that arrive
// while a round runs share the next round, and never get the answer of a
// round that started before they arrived.
func TestLeaderCheck_SharesRoundsThatStartAfterTheCaller(t *testing.T) {
	t.Parallel()
	var rounds atomic.Int64
	var arrived atomic.Int64 // callers that have called check
	gate := make(chan struct{})
	var c *leaderCheck
	c = &leaderCheck{verify: func() error {
		n := rounds.Add(1)
		if n == 1 {
			<-gate                       // the first round runs until every other caller has arrived
			return errors.New("round 1") // must reach only the first caller
		}
		return nil
	}}
	first := make(chan error, 1)
	go func() { first <- c.check(context.Background()) }()
	for rounds.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrived.Add(1)
			errs <- c.check(context.Background())
		}()
	}
	for arrived.Load() < n {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let them block in check
	close(gate)
	if err := <-first; err == nil || err.Error() != "round 1" {
		t.Fatalf("the first caller got %v, want the first round's answer", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a caller that arrived during round 1 got %v: the answer of a round that started before it", err)
		}
	}
	if got := rounds.Load(); got != 2 {
		t.Fatalf("%d rounds for 51 callers, want 2 (one shared by the 50 that arrived during the first)", got)
	}
}

func TestLeaderCheck_ContextEnds(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	c := &leaderCheck{verify: func() error { <-block; return nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.check(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("check with a round that never ends = %v, want the context's error", err)
	}
	close(block)
}
