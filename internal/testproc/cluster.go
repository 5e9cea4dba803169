package testproc

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Cluster is a set of "fencelock serve" processes forming one Raft group
// on loopback. Every directed Raft link i->j goes through its own Proxy, so
// tests can partition any link.
type Cluster struct {
	tb    testing.TB
	Nodes []*Server
	links map[[2]int]*Proxy
}

// DefaultClusterFlags are Raft timeouts tuned for loopback on a small,
// busy machine.
var DefaultClusterFlags = []string{"--heartbeat-timeout", "1s", "--election-timeout", "1s"}

// StartCluster starts n nodes bootstrapped together, with extra flags for
// every node ("{node}" in a flag becomes the node's id, NodeID), and waits
// until one leads.
func StartCluster(tb testing.TB, n int, extra ...string) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb, links: map[[2]int]*Proxy{}}
	var boot []string
	for i := 0; i < n; i++ {
		s := &Server{tb: tb, Addr: FreeAddr(tb), RaftAddr: FreeAddr(tb), DataDir: tb.TempDir(), Follower: true}
		c.Nodes = append(c.Nodes, s)
		boot = append(boot, fmt.Sprintf("%s=%s", NodeID(i), s.RaftAddr))
	}
	for i, s := range c.Nodes {
		var over []string
		for j, t := range c.Nodes {
			if i == j {
				over = append(over, fmt.Sprintf("%s=%s", NodeID(j), t.RaftAddr))
				continue
			}
			p := StartProxy(tb, t.RaftAddr)
			c.links[[2]int{i, j}] = p
			over = append(over, fmt.Sprintf("%s=%s", NodeID(j), p.Addr))
		}
		s.Args = append([]string{"--node-id", NodeID(i), "--bootstrap", strings.Join(boot, ","),
			"--raft-peer-addrs", strings.Join(over, ",")}, DefaultClusterFlags...)
		for _, a := range extra {
			s.Args = append(s.Args, strings.ReplaceAll(a, "{node}", NodeID(i)))
		}
	}
	for _, s := range c.Nodes {
		s.Start()
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			for i, s := range c.Nodes {
				tb.Logf("--- log of %s (running: %v):\n%s", NodeID(i), s.Running(), tail(s.Log(), 150))
			}
		}
		for _, s := range c.Nodes {
			if s.cmd != nil {
				_ = s.Signal(syscall.SIGCONT) // in case a test left it stopped
				s.Kill9()
			}
		}
	})
	c.WaitLeader(-1)
	return c
}

// NodeID names node i.
func NodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

// Endpoints returns every node's API address.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, s := range c.Nodes {
		out = append(out, s.Addr)
	}
	return out
}

// Leader returns the index of a running node that is a ready leader, or -1.
func (c *Cluster) Leader() int {
	for i, s := range c.Nodes {
		if s.Running() && s.IsReadyLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits up to 30s for a ready leader other than node not (-1:
// any) and returns its index.
func (c *Cluster) WaitLeader(not int) int {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i, s := range c.Nodes {
			if i != not && s.Running() && s.IsReadyLeader() {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.tb.Fatalf("no ready leader (other than %d) within 30s", not)
	return -1
}

// Isolate cuts every Raft link to and from node i; Heal restores all links.
func (c *Cluster) Isolate(i int) {
	for k, p := range c.links {
		if k[0] == i || k[1] == i {
			p.Block()
		}
	}
}

// Heal restores every link.
func (c *Cluster) Heal() {
	for _, p := range c.links {
		p.Unblock()
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
