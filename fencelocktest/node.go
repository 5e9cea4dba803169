package fencelocktest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/server"
)

// startTimeout bounds how long StartNode and StartCluster wait for a
// ready leader.
const startTimeout = 20 * time.Second

// Node is a fencelock node running in the test's process: a real Raft log
// (synced to disk) in a temp dir, and the API on loopback over HTTP/1.1 and
// HTTP/2 without TLS, as "fencelock serve" serves it.
type Node struct {
	// Server is the node: its operations (Acquire, Describe, Apply...) can
	// be called directly.
	Server *server.Server
	// Addr is the API's host:port, for client.New.
	Addr string

	once  sync.Once
	close func()
}

// Close stops the node: the server (ending the calls that wait), then its
// API. The other nodes of its Cluster go on without it. Calling it again,
// as the test's end does, does nothing.
func (n *Node) Close() { n.once.Do(n.close) }

// StartNode starts a one-node service with server.DefaultConfig changed by
// each of configure (its data dir, Raft address, API address and a silent
// logger are set first), waits until it leads with its leases armed, and
// closes it when the test ends. It fails the test if the node does not
// start within 20 s.
func StartNode(tb testing.TB, configure ...func(*server.Config)) *Node {
	tb.Helper()
	cfg := nodeConfig(tb)
	for _, c := range configure {
		c(&cfg)
	}
	n := openNode(tb, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := n.Server.WaitReady(ctx); err != nil {
		tb.Fatalf("start a test node: %v", err)
	}
	return n
}

// Cluster is a cluster of Nodes in the test's process, one Raft group.
type Cluster struct {
	Nodes []*Node
	Peers []server.Peer // the voters it started with: Peers[i] is Nodes[i]
}

// StartCluster starts a cluster of n voters, "n1" to "nN", each with
// server.DefaultConfig changed by each of configure (called with the
// node's index once its data dir, node id, Raft and API addresses,
// Bootstrap and a silent logger are set), and returns once one of them is
// a ready leader that knows every member's API address. The nodes close
// when the test ends; Node.Close stops one before, for a failover.
func StartCluster(tb testing.TB, n int, configure ...func(i int, cfg *server.Config)) *Cluster {
	tb.Helper()
	c := &Cluster{}
	for i := range n {
		c.Peers = append(c.Peers, server.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: testproc.FreeAddr(tb)})
	}
	for i := range n {
		cfg := nodeConfig(tb)
		cfg.NodeID, cfg.RaftAddr, cfg.Bootstrap = c.Peers[i].ID, c.Peers[i].RaftAddr, c.Peers
		for _, f := range configure {
			f(i, &cfg)
		}
		if cfg.Peers == nil {
			cfg.Peers = api.Peers(nil, cfg.AdminToken)
		}
		c.Nodes = append(c.Nodes, openNode(tb, cfg))
	}
	deadline := time.Now().Add(startTimeout)
	for !c.complete() {
		if time.Now().After(deadline) {
			tb.Fatalf("start a test cluster: no ready leader knowing the API address of all %d members within %v", n, startTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// complete reports whether a ready leader knows every member's API
// address.
func (c *Cluster) complete() bool {
	i := c.Leader()
	if i < 0 {
		return false
	}
	st, err := c.Nodes[i].Server.Status()
	if err != nil || len(st.Members) != len(c.Nodes) {
		return false
	}
	for _, m := range st.Members {
		if m.APIAddr == "" {
			return false
		}
	}
	return true
}

// Leader returns the index of the node that is a ready leader now, or -1.
func (c *Cluster) Leader() int {
	for i, n := range c.Nodes {
		if n.Server.Ready() {
			return i
		}
	}
	return -1
}

// Addrs returns the nodes' API addresses, for client.New(c.Addrs()...).
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Addr)
	}
	return out
}

// nodeConfig is server.DefaultConfig with a temp data dir, a free Raft
// address and a silent logger.
func nodeConfig(tb testing.TB) server.Config {
	cfg := server.DefaultConfig()
	cfg.DataDir = tb.TempDir()
	cfg.RaftAddr = testproc.FreeAddr(tb)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}

// openNode opens a node with cfg and serves its API on a loopback port,
// which becomes cfg.APIAddr unless that is set.
func openNode(tb testing.TB, cfg server.Config) *Node {
	tb.Helper()
	ln := testproc.Listen(tb)
	if cfg.APIAddr == "" {
		cfg.APIAddr = ln.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := server.Open(ctx, cfg)
	if err != nil {
		tb.Fatalf("start a test node: %v", err)
	}
	hs := testproc.StartH2C(ln, api.Handler(s))
	n := &Node{Server: s, Addr: ln.Addr().String(), close: func() {
		s.Close() // before the listener: it ends the calls that wait
		hs.Close()
	}}
	tb.Cleanup(n.Close)
	return n
}
