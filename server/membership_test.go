package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/server"
)

type memberNode struct {
	s  *server.Server
	hs *http.Server
}

// TestRemoveMember_ConcurrentRemovalsKeepAQuorum: membership changes run
// one at a time, each checking the quorum against the configuration as it
// is. Two removals at once from four voters with one down each passed the
// check against the same configuration, and together left {leader, the
// dead node}: no leader could ever be elected.
func TestRemoveMember_ConcurrentRemovalsKeepAQuorum(t *testing.T) {
	const n = 4
	var peers []server.Peer
	raft := make([]string, n)
	lns := make([]net.Listener, n)
	for i := range n {
		raft[i] = testproc.FreeAddr(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		peers = append(peers, server.Peer{ID: string(rune('a' + i)), RaftAddr: raft[i]})
	}
	nodes := make([]*memberNode, n)
	for i := range n {
		cfg := server.DefaultConfig()
		cfg.NodeID = peers[i].ID
		cfg.DataDir = t.TempDir()
		cfg.RaftAddr = raft[i]
		cfg.APIAddr = lns[i].Addr().String()
		cfg.Bootstrap = peers
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		s, err := server.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: s.Handler()}
		go hs.Serve(lns[i])
		nodes[i] = &memberNode{s, hs}
		t.Cleanup(func() { hs.Close(); s.Close() })
	}
	// Wait for a ready leader that knows every API address.
	var leader int = -1
	deadline := time.Now().Add(20 * time.Second)
	for leader < 0 && time.Now().Before(deadline) {
		for i, nd := range nodes {
			st, _ := nd.s.Status()
			if st.Ready && len(st.Members) == n {
				all := true
				for _, m := range st.Members {
					all = all && m.APIAddr != ""
				}
				if all {
					leader = i
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if leader < 0 {
		t.Fatal("no ready leader with all API addresses")
	}
	var others []int
	for i := range n {
		if i != leader {
			others = append(others, i)
		}
	}
	dead := others[2]
	nodes[dead].hs.Close()
	nodes[dead].s.Close()

	ctx := context.Background()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = nodes[leader].s.RemoveMember(ctx, peers[others[k]].ID)
		}()
	}
	wg.Wait()
	t.Logf("remove %s: %v; remove %s: %v", peers[others[0]].ID, errs[0], peers[others[1]].ID, errs[1])
	time.Sleep(3 * time.Second)
	st, _ := nodes[leader].s.Status()
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

// TestAddMember_UnreachableVoterIsRefused: a new voter counts toward the
// quorum at once; one that does not answer (a mistyped address) would leave
// a one-node cluster unable to elect a leader, with none left to undo it.
func TestAddMember_UnreachableVoterIsRefused(t *testing.T) {
	cfg := server.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr = testproc.FreeAddr(t)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := server.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	err = s.AddMember(ctx, "typo", testproc.FreeAddr(t), "")
	if !errors.Is(err, fencelock.ErrPreconditionFailed) {
		t.Fatalf("add an unreachable voter = %v, want an error wrapping ErrPreconditionFailed", err)
	}
	time.Sleep(2 * time.Second) // an added voter would have cost the leadership by now
	if st, _ := s.Status(); !st.Ready || len(st.Members) != 1 {
		t.Fatalf("after the refused add: ready %v, %d members; want ready with 1", st.Ready, len(st.Members))
	}
}
