package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// A step of the leader's wall clock during its leadership moves neither
// command time nor the dedupe window: the retry of a request whose grant
// ended is still told so after the wall clock jumps by more than the window.
func TestCommandTime_LeaderWallClockStep(t *testing.T) {
	s := openInProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := s.Acquire(ctx, AcquireRequest{Name: "l", TTL: 10 * time.Second, RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "l", g.LeaseID, g.Token); err != nil {
		t.Fatal(err)
	}
	before := s.fsm.LastNow()

	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	s.clock.wall.Store(&ahead)
	if _, err := s.Acquire(ctx, AcquireRequest{Name: "m", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if moved := time.Duration(s.fsm.LastNow() - before); moved > time.Minute {
		t.Fatalf("command time moved %v with the wall clock's step of an hour", moved)
	}
	_, err = s.Acquire(ctx, AcquireRequest{Name: "l", TTL: 10 * time.Second, RequestID: "r1"})
	if !errors.Is(err, fencelock.ErrNotHolder) {
		t.Fatalf("the retry of an ended grant after the step = %v; want ErrNotHolder (its record kept)", err)
	}
}

// A new leadership reads the wall clock again, but never starts before the
// command time already applied.
func TestCommandTime_NewLeadership(t *testing.T) {
	c := newCmdClock()
	wall := time.Now()
	at := func() time.Time { return wall }
	c.wall.Store(&at)
	applied := func() int64 { return wall.Add(-time.Hour).UnixNano() }

	first := c.now(1, applied)
	if d := time.Duration(first - wall.UnixNano()); d < 0 || d > time.Second {
		t.Fatalf("first stamp is %v from the wall clock", d)
	}
	wall = wall.Add(time.Hour)
	if d := time.Duration(c.now(1, applied) - first); d > time.Second {
		t.Fatalf("the same leadership followed the wall clock's step (%v)", d)
	}
	if d := time.Duration(c.now(2, applied) - wall.UnixNano()); d < 0 || d > time.Second {
		t.Fatalf("a new leadership's stamp is %v from the wall clock", d)
	}
	// A wall clock behind what was applied: command time starts there.
	later := wall.Add(2 * time.Hour).UnixNano()
	if got := c.now(3, func() int64 { return later }); got < later {
		t.Fatalf("a new leadership stamped %d, before the applied %d", got, later)
	}
}
