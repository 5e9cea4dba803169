package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
)

// TestApply_givesUpAfterApplyTimeoutWithoutADeadline: a proposal whose
// entry does not finish applying (here the FSM's goroutine is held up
// handing the grant to its calls) fails with ErrUnavailable after
// ApplyTimeout when the caller's context has no deadline.
func TestApply_givesUpAfterApplyTimeoutWithoutADeadline(t *testing.T) {
	t.Parallel()
	const applyTimeout = 100 * time.Millisecond
	s := openInProcessWith(t, func(cfg *Config) { cfg.ApplyTimeout = applyTimeout })
	acquire := fsm.Acquire{Name: "x", RequestID: "r1", LeaseID: fencelock.NewLeaseID(), TTL: int64(10 * time.Second)}

	s.claims.mu.Lock() // the grant's delivery to its calls waits for it
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), acquire)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		s.claims.mu.Unlock()
		t.Fatalf("Apply without a deadline still waits, 10 s after its ApplyTimeout (%v)", applyTimeout)
	}
	took := time.Since(start)
	s.claims.mu.Unlock()
	if !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply of an entry held up = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if took < applyTimeout {
		t.Fatalf("Apply gave up after %v, before ApplyTimeout (%v)", took, applyTimeout)
	}
	res, err := s.Apply(context.Background(), acquire) // the same request: it was granted meanwhile
	if err != nil || res.Grant == nil {
		t.Fatalf("Apply once the entry applied = %+v, %v; want the request's grant", res, err)
	}
}
