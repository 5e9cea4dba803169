package server

import (
	"context"
	"sync"
)

// leaderCheck shares raft.VerifyLeader rounds among concurrent callers.
// A round confirms leadership with a heartbeat to a quorum (no disk), so
// 10,000 held locks renewing at TTL/3 would otherwise cost thousands of
// heartbeat rounds per second. A caller joins the next round that has not
// started yet, never one already running: the round that answers it began
// after the caller arrived, so it proves as much as a round of its own
// would. hashicorp/raft counts toward a round any follower reply that
// arrives after the round starts, even to an RPC sent before it: a quorum
// of such replies proves only that a quorum followed this node when each
// reply was sent, at most rpcTimeout before it arrived (a vote for a
// leadership transfer can come right after). A new leader therefore arms
// leases with rpcTimeout on top of their TTL (becomeReady).
type leaderCheck struct {
	verify func() error

	mu      sync.Mutex
	next    *checkRound // the round that will start after the running one; nil if none
	running bool
}

type checkRound struct {
	done chan struct{}
	err  error
}

// check waits for a round that starts after the call and returns its
// result, or ctx's error.
func (c *leaderCheck) check(ctx context.Context) error {
	c.mu.Lock()
	r := c.next
	if r == nil {
		r = &checkRound{done: make(chan struct{})}
		c.next = r
	}
	if !c.running {
		c.running = true
		go c.loop()
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop runs rounds while callers wait for one.
func (c *leaderCheck) loop() {
	for {
		c.mu.Lock()
		r := c.next
		c.next = nil
		if r == nil {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		r.err = c.verify()
		close(r.done)
	}
}
