package server_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/netproxy"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/server"
)

// TestRemoveMember_ConcurrentRemovalsKeepAQuorum: membership changes run
// one at a time, each checking the quorum against the configuration as it
// is. Two removals at once from four voters with one down each passed the
// check against the same configuration, and together left {leader, the
// dead node}: no leader could ever be elected.
func TestRemoveMember_ConcurrentRemovalsKeepAQuorum(t *testing.T) {
	t.Parallel()
	const n = 4
	c := fencelocktest.StartCluster(t, n)
	nodes, peers, leader := c.Nodes, c.Peers, c.Leader()
	var others []int
	for i := range n {
		if i != leader {
			others = append(others, i)
		}
	}
	dead := others[2]
	nodes[dead].Close()

	ctx := context.Background()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = nodes[leader].Server.RemoveMember(ctx, peers[others[k]].ID)
		}()
	}
	wg.Wait()
	t.Logf("remove %s: %v; remove %s: %v", peers[others[0]].ID, errs[0], peers[others[1]].ID, errs[1])
	time.Sleep(3 * time.Second)
	st, _ := nodes[leader].Server.Status()
	var ids []string
	for _, m := range st.Members {
		ids = append(ids, m.ID)
	}
	t.Logf("leader %s now: state=%s ready=%v members=%v (dead: %s)", peers[leader].ID, st.State, st.Ready, ids, peers[dead].ID)
	if errs[0] == nil && errs[1] == nil || !st.Ready {
		t.Errorf("both removals went through (errors %v, %v): configuration %v with %s down, ready %v", errs[0], errs[1], ids, peers[dead].ID, st.Ready)
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, fencelock.ErrPreconditionFailed) {
			t.Errorf("a refused removal: %v, want an error wrapping ErrPreconditionFailed", err)
		}
	}
}

// TestRemoveMember_VoterCutOffFromRaftDoesNotCount: a voter whose API
// answers while its Raft link is cut does not count toward the quorum a
// removal leaves. Removing the other follower would leave the leader and a
// node it cannot reach: no entry could commit, and no leader be elected.
func TestRemoveMember_VoterCutOffFromRaftDoesNotCount(t *testing.T) {
	proxies := map[string]*netproxy.Proxy{} // in front of each node's Raft address
	c := fencelocktest.StartCluster(t, 3, func(i int, cfg *server.Config) {
		if len(proxies) == 0 {
			for _, p := range cfg.Bootstrap {
				px, err := netproxy.Listen(p.RaftAddr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(px.Close)
				proxies[p.ID] = px
			}
		}
		cfg.PeerAddrs = map[string]string{}
		for id, px := range proxies {
			if id != cfg.NodeID {
				cfg.PeerAddrs[id] = px.Addr
			}
		}
	})
	nodes, peers, leader := c.Nodes, c.Peers, c.Leader()
	var followers []int
	for i := range nodes {
		if i != leader {
			followers = append(followers, i)
		}
	}
	cut, other := followers[0], followers[1]
	proxies[peers[cut].ID].Block()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, _ := nodes[cut].Server.Status()
		if st.State != "follower" || st.LastContact > nodes[cut].Server.Config().HeartbeatTimeout {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still follows with its Raft link cut: %+v", peers[cut].ID, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := nodes[cut].Server.Status(); err != nil {
		t.Fatalf("the cut node's status: %v", err)
	}

	err := nodes[leader].Server.RemoveMember(context.Background(), peers[other].ID)
	if !errors.Is(err, fencelock.ErrPreconditionFailed) {
		t.Fatalf("remove %s while %s is cut off from Raft (its API up) = %v; want ErrPreconditionFailed", peers[other].ID, peers[cut].ID, err)
	}
	if st, _ := nodes[leader].Server.Status(); len(st.Members) != 3 {
		t.Fatalf("members after the refused removal: %+v", st.Members)
	}
}

// TestAddMember_UnreachableVoterIsRefused: a new voter counts toward the
// quorum at once; one that does not answer (a mistyped address) would leave
// a one-node cluster unable to elect a leader, with none left to undo it.
func TestAddMember_UnreachableVoterIsRefused(t *testing.T) {
	t.Parallel()
	s := fencelocktest.StartNode(t, func(c *server.Config) { c.Peers = api.Peers(nil, "") }).Server
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.AddMember(ctx, "noapi", testproc.FreeAddr(t), ""); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("add a voter without an API address = %v, want an error wrapping ErrInvalidArgument", err)
	}
	err := s.AddMember(ctx, "typo", testproc.FreeAddr(t), testproc.FreeAddr(t))
	if !errors.Is(err, fencelock.ErrPreconditionFailed) {
		t.Fatalf("add an unreachable voter = %v, want an error wrapping ErrPreconditionFailed", err)
	}
	if err := s.RemoveMember(ctx, st0ID(t, s)); !errors.Is(err, fencelock.ErrPreconditionFailed) || !strings.Contains(err.Error(), "last voter") {
		t.Fatalf("remove the last voter = %v, want a refusal naming the last voter", err)
	}
	time.Sleep(2 * time.Second) // an added voter would have cost the leadership by now
	if st, _ := s.Status(); !st.Ready || len(st.Members) != 1 {
		t.Fatalf("after the refused add: ready %v, %d members; want ready with 1", st.Ready, len(st.Members))
	}
}

// st0ID is s's node id.
func st0ID(t *testing.T, s *server.Server) string {
	t.Helper()
	st, err := s.Status()
	if err != nil {
		t.Fatal(err)
	}
	return st.ID
}

// A read waits for its barrier only as long as its caller does: a leader
// that lost its quorum answers a read whose context ends before the leader
// steps down with the context's end, not later with "not the leader".
func TestDescribe_ReadBarrierEndsWithItsContext(t *testing.T) {
	t.Parallel()
	c := fencelocktest.StartCluster(t, 3)
	leader := c.Leader()
	for i, n := range c.Nodes {
		if i != leader {
			n.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Nodes[leader].Server.Describe(ctx, "no-quorum")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Describe on a leader without a quorum, context of 100ms: %v, want ErrUnavailable with the context's deadline", err)
	}
}
