package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/testproc"
)

// TestApply_givesUpAfterApplyTimeoutWithoutADeadline: a proposal that
// cannot commit (the leader lost its followers) fails with ErrUnavailable
// after ApplyTimeout when the caller's context has no deadline, before
// the leader's lease would end it.
func TestApply_givesUpAfterApplyTimeoutWithoutADeadline(t *testing.T) {
	var peers []Peer
	for i := range 3 {
		peers = append(peers, Peer{ID: string(rune('a' + i)), RaftAddr: testproc.FreeAddr(t)})
	}
	const applyTimeout = 100 * time.Millisecond
	nodes := make([]*Server, len(peers))
	for i := range peers {
		nodes[i] = openNodeWith(t, func(cfg *Config) {
			cfg.NodeID, cfg.RaftAddr, cfg.Bootstrap = peers[i].ID, peers[i].RaftAddr, peers
			cfg.HeartbeatTimeout, cfg.ElectionTimeout = 2*time.Second, 2*time.Second // the lease outlasts the timeout
			cfg.ApplyTimeout = applyTimeout
		})
	}
	var leader *Server
	eventually(t, "a leader", func() bool {
		for _, s := range nodes {
			if s.Ready() {
				leader = s
			}
		}
		return leader != nil
	})
	for _, s := range nodes {
		if s != leader {
			s.Close()
		}
	}
	start := time.Now()
	_, err := leader.Apply(context.Background(), fsm.Acquire{Name: "x", LeaseID: fencelock.NewLeaseID(), TTL: int64(10 * time.Second)})
	took := time.Since(start)
	if !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply without followers = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if took < applyTimeout {
		t.Fatalf("Apply gave up after %v, before ApplyTimeout (%v)", took, applyTimeout)
	}
}
