package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
)

// maxProposals bounds the proposals and barriers under way on a node: as
// many as Raft's queue holds (raftConfig: MaxAppendEntries, BatchApplyCh). A
// proposal takes a slot before it goes to Raft and gives it back when its
// outcome is known, so handing it to Raft never waits; a proposal that
// finds no slot (a leader whose disk stalls) waits for one as long as its
// caller does.
const maxProposals = 1024

// Apply proposes cmd through Raft and waits until it is applied or ctx ends
// (if ctx has no deadline, for ApplyTimeout and up to a quarter more).
// Errors: ErrNotLeader when this node is not the leader; ErrUnavailable
// when the outcome is unknown (leadership lost, timeout, shutdown, ctx
// ended after the proposal).
func (s *Server) Apply(ctx context.Context, p fsm.Payload) (fsm.Result, error) {
	start := time.Now()
	timeout := s.bound(ctx, start)
	if err := s.enter(ctx, timeout); err != nil {
		return fsm.Result{}, fmt.Errorf("apply %s: %w: %w", opName(p), fencelock.ErrUnavailable, err)
	}
	cmd := fsm.Command{Now: s.clock.now(s.raft.CurrentTerm(), s.fsm.LastNow), Payload: p}
	f := s.raft.Apply(cmd.Encode(), 0) // the slot is a place in Raft's queue: no wait
	answered, err := s.await(ctx, timeout, f)
	if !answered {
		return fsm.Result{}, fmt.Errorf("apply %s: %w: %w", opName(p), fencelock.ErrUnavailable, err)
	}
	return s.outcome(p, f, err, start)
}

// await waits for f, queued with a slot taken by enter, while ctx lasts,
// until timeout (nil: never) and until the node closes. answered reports
// whether f's outcome came meanwhile; err is then f's error, else what
// ended the wait. The slot is given back when f is answered, whoever still
// waits.
func (s *Server) await(ctx context.Context, timeout <-chan struct{}, f raft.Future) (answered bool, err error) {
	done := make(chan error, 1)
	// The wait on the future has a goroutine of its own, also for the
	// order it gives a one-thread node: the proposal readied Raft's leader
	// loop to run next; the new goroutine takes that place, so the calls
	// already read propose before the loop appends, and an append carries
	// them all (docs/ARCHITECTURE.md).
	go func() {
		err := f.Error()
		<-s.slots
		done <- err
	}()
	select {
	case err := <-done:
		return true, err
	case <-ctx.Done():
		return false, ctx.Err()
	case <-timeout:
		return false, context.DeadlineExceeded
	case <-s.ctx.Done(): // hashicorp/raft leaves unanswered what it queues as it stops
		return false, raft.ErrRaftShutdown
	}
}

// applyKnown is Apply for a caller that must learn the outcome: it waits
// for the entry whatever the caller's context does, up to ApplyTimeout.
func (s *Server) applyKnown(p fsm.Payload) (fsm.Result, error) {
	return s.Apply(s.ctx, p)
}

// bound is what ends a wait begun at now whose ctx has no deadline:
// ApplyTimeout, through a channel shared with the waits of the same moment
// (not a timer each). nil if ctx has a deadline.
func (s *Server) bound(ctx context.Context, now time.Time) <-chan struct{} {
	if _, ok := ctx.Deadline(); ok {
		return nil
	}
	return s.timeouts.after(now)
}

// enter takes a slot of s.slots, waiting while ctx lasts, until timeout
// (nil: never) and until the node closes.
func (s *Server) enter(ctx context.Context, timeout <-chan struct{}) error {
	select {
	case <-s.ctx.Done(): // hashicorp/raft leaves unanswered what it queues after it stops
		return raft.ErrRaftShutdown
	default:
	}
	select {
	case s.slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return context.DeadlineExceeded
	case <-s.ctx.Done():
		return raft.ErrRaftShutdown
	}
}

// barrier waits until every entry proposed before it is applied, through
// a slot of s.slots, as a proposal, and as long as a proposal's wait lasts.
// Errors: what ended the wait (ctx, the timeout, the node's close), wrapped
// in ErrUnavailable; else Raft's (not the leader, leadership lost).
func (s *Server) barrier(ctx context.Context) error {
	timeout := s.bound(ctx, time.Now())
	if err := s.enter(ctx, timeout); err != nil {
		return fmt.Errorf("%w: %w", fencelock.ErrUnavailable, err)
	}
	answered, err := s.await(ctx, timeout, s.raft.Barrier(0))
	if !answered {
		return fmt.Errorf("%w: %w", fencelock.ErrUnavailable, err)
	}
	return err
}

func (s *Server) outcome(op fsm.Payload, f raft.ApplyFuture, err error, start time.Time) (fsm.Result, error) {
	s.metrics.applySeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader):
			return fsm.Result{}, fmt.Errorf("apply %s: %w", opName(op), s.notLeader())
		default:
			return fsm.Result{}, fmt.Errorf("apply %s: %v: %w", opName(op), err, fencelock.ErrUnavailable)
		}
	}
	res, ok := f.Response().(fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("apply %s: unexpected response %T: %w", opName(op), f.Response(), fencelock.ErrUnavailable)
	}
	return res, nil
}

func opName(p fsm.Payload) string {
	switch p.(type) {
	case fsm.Acquire:
		return "acquire"
	case fsm.Release:
		return "release"
	case fsm.Expire:
		return "expire"
	case fsm.CancelWait:
		return "cancel-wait"
	case fsm.Detach:
		return "detach"
	}
	return fmt.Sprintf("%T", p)
}

// deadlines hands out channels that close d to 5d/4 after they are asked
// for: the callers of one d/4 share a channel and its timer, where a timer
// each cost a busy node an allocation and two changes to the runtime's
// timer heap per proposal.
type deadlines struct {
	d   time.Duration
	mu  sync.Mutex
	at  time.Time // when cur closes
	cur chan struct{}
}

// after returns a channel that closes between d and 5d/4 after now.
func (dl *deadlines) after(now time.Time) <-chan struct{} {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.cur == nil || dl.at.Before(now.Add(dl.d)) {
		ch := make(chan struct{})
		dl.cur, dl.at = ch, now.Add(dl.d+dl.d/4)
		time.AfterFunc(dl.d+dl.d/4, func() { close(ch) })
	}
	return dl.cur
}
