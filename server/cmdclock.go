package server

import (
	"sync"
	"sync/atomic"
	"time"
)

// cmdClock stamps Command.Now, the command time by which every replica
// measures the dedupe window. A leader reads its wall clock once, when it
// first stamps a command in its Raft term, never earlier than the command
// time already applied, and from then on moves on by the monotonic clock.
// (Keyed by the term, not by the lease table's epoch: a follower stamps the
// proposals Raft then refuses, and a clock it started would carry into its
// leadership.)
// A step of the wall clock during the term thus changes nothing:
// read afresh for every command, a step forward of more than the window
// would forget at once the requests whose grant ended (a late retry would
// then be granted anew, for nobody), and a step back, or the correction
// of a step forward, would hold command time still (the FSM never lets it
// go back) and with it the pruning of the window.
type cmdClock struct {
	wall atomic.Pointer[func() time.Time] // the wall clock; tests replace it

	mu    sync.Mutex
	term  uint64    // the Raft term the clock was started in
	base  int64     // command time at start, Unix nanoseconds
	start time.Time // when it started, on the monotonic clock
}

func newCmdClock() *cmdClock {
	c := &cmdClock{}
	now := time.Now
	c.wall.Store(&now)
	return c
}

// now returns the command time for a command proposed in Raft term term;
// applied is the command time already applied (FSM.LastNow).
func (c *cmdClock) now(term uint64, applied func() int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() || c.term != term {
		c.term = term
		c.start = time.Now()
		c.base = max((*c.wall.Load())().UnixNano(), applied())
	}
	return c.base + int64(time.Since(c.start))
}
