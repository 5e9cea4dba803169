package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/netproxy"
	"github.com/fencelock/fencelock/internal/raftlog"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/server"
)

type memberNode struct {
	s   *server.Server
	hs  *http.Server
	cfg server.Config
}

// startMemberNodes starts an in-process cluster of n voters, a to ..., with
// tweak (if set) adjusting each node's config, and returns once one of them
// is a ready leader that knows every member's API address.
func startMemberNodes(t *testing.T, n int, tweak func(i int, cfg *server.Config)) ([]*memberNode, []server.Peer, int) {
	t.Helper()
	var peers []server.Peer
	raft := make([]string, n)
	for i := range n {
		raft[i] = testproc.FreeAddr(t)
		peers = append(peers, server.Peer{ID: string(rune('a' + i)), RaftAddr: raft[i]})
	}
	nodes := make([]*memberNode, n)
	for i := range n {
		cfg := server.DefaultConfig()
		cfg.NodeID = peers[i].ID
		cfg.DataDir = t.TempDir()
		cfg.RaftAddr = raft[i]
		cfg.APIAddr = testproc.FreeAddr(t)
		cfg.Bootstrap = peers
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if tweak != nil {
			tweak(i, &cfg)
		}
		nodes[i] = openMemberNode(t, cfg)
	}
	leader := -1
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
	return nodes, peers, leader
}

// openMemberNode opens a server with cfg and serves its API at cfg.APIAddr.
func openMemberNode(t *testing.T, cfg server.Config) *memberNode {
	t.Helper()
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.Open(context.Background(), cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	nd := &memberNode{s: s, hs: &http.Server{Handler: s.Handler()}, cfg: cfg}
	go nd.hs.Serve(ln)
	t.Cleanup(nd.close)
	return nd
}

// close stops the node (again: a no-op).
func (nd *memberNode) close() {
	nd.hs.Close()
	nd.s.Close()
}

// TestRemoveMember_ConcurrentRemovalsKeepAQuorum: membership changes run
// one at a time, each checking the quorum against the configuration as it
// is. Two removals at once from four voters with one down each passed the
// check against the same configuration, and together left {leader, the
// dead node}: no leader could ever be elected.
func TestRemoveMember_ConcurrentRemovalsKeepAQuorum(t *testing.T) {
	const n = 4
	nodes, peers, leader := startMemberNodes(t, n, nil)
	var others []int
	for i := range n {
		if i != leader {
			others = append(others, i)
		}
	}
	dead := others[2]
	nodes[dead].close()

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

// TestRemoveMember_VoterCutOffFromRaftDoesNotCount: a voter whose API
// answers while its Raft link is cut does not count toward the quorum a
// removal leaves. Removing the other follower would leave the leader and a
// node it cannot reach: no entry could commit, and no leader be elected.
func TestRemoveMember_VoterCutOffFromRaftDoesNotCount(t *testing.T) {
	proxies := map[string]*netproxy.Proxy{} // in front of each node's Raft address
	nodes, peers, leader := startMemberNodes(t, 3, func(i int, cfg *server.Config) {
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
		st, _ := nodes[cut].s.Status()
		if st.State != raft.Follower.String() || st.LastContact > nodes[cut].cfg.HeartbeatTimeout {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still follows with its Raft link cut: %+v", peers[cut].ID, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := nodes[cut].s.Status(); err != nil {
		t.Fatalf("the cut node's status: %v", err)
	}

	err := nodes[leader].s.RemoveMember(context.Background(), peers[other].ID)
	if !errors.Is(err, fencelock.ErrPreconditionFailed) {
		t.Fatalf("remove %s while %s is cut off from Raft (its API up) = %v; want ErrPreconditionFailed", peers[other].ID, peers[cut].ID, err)
	}
	if st, _ := nodes[leader].s.Status(); len(st.Members) != 3 {
		t.Fatalf("members after the refused removal: %+v", st.Members)
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
	if err := s.AddMember(ctx, "noapi", testproc.FreeAddr(t), ""); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("add a voter without an API address = %v, want an error wrapping ErrInvalidArgument", err)
	}
	err = s.AddMember(ctx, "typo", testproc.FreeAddr(t), testproc.FreeAddr(t))
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

// TestRules_RaisedOnceEveryMemberImplementsThem: the leader raises the log
// rules only when every member implements the new ones (one capped at
// RulesV1 stands for a node of an earlier release in a rolling upgrade);
// once raised, a node that does not implement them may not join.
func TestRules_RaisedOnceEveryMemberImplementsThem(t *testing.T) {
	const old = 2 // node c
	nodes, _, leader := startMemberNodes(t, 3, func(i int, cfg *server.Config) {
		if i == old {
			cfg.MaxRules = fsm.RulesV1
		}
	})
	rules := func() []uint64 {
		var out []uint64
		for _, nd := range nodes {
			st, _ := nd.s.Status()
			out = append(out, st.Rules)
		}
		return out
	}
	if leader == old {
		// A capped leader never tries to raise: lead from a, which tries
		// and must hold back for c.
		if _, err := nodes[old].s.TransferLeader(context.Background(), "a"); err != nil {
			t.Fatalf("transfer leadership off the capped node: %v", err)
		}
	}
	// The leader asks every few seconds; a raise would show by then.
	time.Sleep(2*time.Second + 3*time.Second)
	if nodes[old].s.Ready() {
		t.Fatal("the capped node leads: the test checks nothing")
	}
	for i, r := range rules() {
		if r != fsm.RulesV1 {
			t.Fatalf("node %d applies rules %d while node c implements only 1 (leader %d)", i, r, leader)
		}
	}

	// c is upgraded: restarted without the cap, on its own data. Under
	// rules 1 every entry is JSON, which releases before rules 2 read.
	nodes[old].close()
	if js, bin := logEncodings(t, nodes[old].cfg.DataDir); js == 0 || bin != 0 {
		t.Fatalf("c's log under rules 1: %d JSON and %d binary commands; want only JSON", js, bin)
	}
	cfg := nodes[old].cfg
	cfg.MaxRules = 0
	cfg.Bootstrap = nil
	nodes[old] = openMemberNode(t, cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs := rules()
		if rs[0] == fsm.MaxRules && rs[1] == fsm.MaxRules && rs[2] == fsm.MaxRules {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rules on a, b, c: %v; want all %d once every member implements them", rs, fsm.MaxRules)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A node behind the log's rules answers, but may not join any more.
	dcfg := server.DefaultConfig()
	dcfg.NodeID, dcfg.DataDir, dcfg.Join = "d", t.TempDir(), true
	dcfg.RaftAddr, dcfg.APIAddr = testproc.FreeAddr(t), testproc.FreeAddr(t)
	dcfg.MaxRules = fsm.MaxRules - 1
	dcfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d := openMemberNode(t, dcfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ld *server.Server
	for _, nd := range nodes {
		if nd.s.Ready() {
			ld = nd.s
		}
	}
	if ld == nil {
		t.Fatal("no ready leader")
	}
	err := ld.AddMember(ctx, "d", dcfg.RaftAddr, dcfg.APIAddr)
	if !errors.Is(err, fencelock.ErrPreconditionFailed) {
		t.Fatalf("add a node that implements rules up to %d to a cluster at rules %d: %v, want ErrPreconditionFailed", fsm.MaxRules-1, fsm.MaxRules, err)
	}
	// Uncapped, it joins.
	d.close()
	dcfg.MaxRules = 0
	d = openMemberNode(t, dcfg)
	if err := ld.AddMember(ctx, "d", dcfg.RaftAddr, dcfg.APIAddr); err != nil {
		t.Fatalf("add a node that implements rules %d: %v", fsm.MaxRules, err)
	}
	for {
		if st, _ := d.s.Status(); st.Rules == fsm.MaxRules && slices.ContainsFunc(st.Members, func(m server.Member) bool {
			return m.ID == "d" && m.APIAddr != ""
		}) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the new member never applied the log up to the raise and its own API address")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// After the raise the leader writes binary entries (d's API address).
	d.close()
	if js, bin := logEncodings(t, dcfg.DataDir); bin == 0 {
		t.Errorf("d's log after the raise: %d JSON and %d binary commands; want binary ones", js, bin)
	}
}

// logEncodings counts the command entries in the Raft log of a closed
// node's data dir by encoding, and fails the test if a JSON one follows a
// binary one (the leader switches once, at the raise of the rules).
func logEncodings(t *testing.T, dataDir string) (jsonCmds, binaryCmds int) {
	t.Helper()
	l, err := raftlog.Open(filepath.Join(dataDir, "raftlog"), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	for i := first; i <= last && first > 0; i++ {
		var e raft.Log
		if err := l.GetLog(i, &e); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if e.Type != raft.LogCommand || len(e.Data) == 0 {
			continue
		}
		if _, err := fsm.DecodeCommand(e.Data); err != nil {
			t.Fatalf("entry %d does not decode: %v", i, err)
		}
		if e.Data[0] == '{' {
			if binaryCmds > 0 {
				t.Fatalf("entry %d is JSON after %d binary ones", i, binaryCmds)
			}
			jsonCmds++
		} else {
			binaryCmds++
		}
	}
	return jsonCmds, binaryCmds
}
