package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
)

// A step of the leader's wall clock during its leadership moves neither
// command time nor the dedupe window: the retry of a request whose grant
// ended is still told so after the wall clock jumps by more than the window.
func TestCommandTime_LeaderWallClockStep(t *testing.T) {
	t.Parallel()
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

// A new term reads the wall clock again, but never starts before the
// command time already applied.
func TestCommandTime_NewLeadership(t *testing.T) {
	t.Parallel()
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
		t.Fatalf("the same term followed the wall clock's step (%v)", d)
	}
	if d := time.Duration(c.now(2, applied) - wall.UnixNano()); d < 0 || d > time.Second {
		t.Fatalf("a new term's stamp is %v from the wall clock", d)
	}
	// A wall clock behind what was applied: command time starts there.
	later := wall.Add(2 * time.Hour).UnixNano()
	if got := c.now(3, func() int64 { return later }); got < later {
		t.Fatalf("a new term stamped %d, before the applied %d", got, later)
	}
}

// A follower stamps the proposals Raft refuses it; the wall clock it read
// then must not carry into a later leadership of its own. Here a follower's
// clock is an hour ahead when it refuses an Acquire, and right again by the
// time it leads: the retry of an ended grant must still be told it ended.
func TestCommandTime_FollowerClockDoesNotCarryIntoLeadership(t *testing.T) {
	t.Parallel()
	var peers []Peer
	for i := range 3 {
		peers = append(peers, Peer{ID: string(rune('a' + i)), RaftAddr: testproc.FreeAddr(t)})
	}
	nodes := make([]*Server, len(peers))
	for i := range peers {
		nodes[i] = openNodeWith(t, func(cfg *Config) {
			cfg.NodeID = peers[i].ID
			cfg.RaftAddr = peers[i].RaftAddr
			cfg.Bootstrap = peers
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := -1
	for a < 0 {
		for i, s := range nodes {
			if s.Ready() {
				a = i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := (a + 1) % len(nodes)
	g, err := nodes[a].Acquire(ctx, AcquireRequest{Name: "l", TTL: 10 * time.Second, RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes[a].Release(ctx, "l", g.LeaseID, g.Token); err != nil {
		t.Fatal(err)
	}

	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	nodes[b].clock.wall.Store(&ahead)
	if _, err := nodes[b].Acquire(ctx, AcquireRequest{Name: "x", TTL: 10 * time.Second}); !errors.Is(err, fencelock.ErrNotLeader) {
		t.Fatalf("an Acquire on the follower = %v, want ErrNotLeader", err)
	}
	right := time.Now
	nodes[b].clock.wall.Store(&right)
	if _, err := nodes[a].TransferLeader(ctx, peers[b].ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the follower leads", nodes[b].Ready)
	before := nodes[b].fsm.LastNow()
	if _, err := nodes[b].Acquire(ctx, AcquireRequest{Name: "m", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if moved := time.Duration(nodes[b].fsm.LastNow() - before); moved > time.Minute {
		t.Fatalf("command time moved %v on the new leader's first entry", moved)
	}
	if _, err := nodes[b].Acquire(ctx, AcquireRequest{Name: "l", TTL: 10 * time.Second, RequestID: "r1"}); !errors.Is(err, fencelock.ErrNotHolder) {
		t.Fatalf("the retry of an ended grant on the new leader = %v; want ErrNotHolder", err)
	}
}
