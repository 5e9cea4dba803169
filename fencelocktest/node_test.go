package fencelocktest_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/server"
)

// TestStartNode: the node grants through its API and its configuration
// takes the changes given.
func TestStartNode(t *testing.T) {
	n := fencelocktest.StartNode(t, func(c *server.Config) { c.MaxTTL = time.Minute })
	c, err := client.New(n.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(t.Context(), "x", client.WithTTL(time.Second))
	if err != nil || l.Token() == 0 {
		t.Fatalf("acquire on the test node: %v", err)
	}
	if _, err := c.TryAcquire(t.Context(), "y", client.WithTTL(time.Hour)); err == nil {
		t.Error("a TTL above the configured MaxTTL was granted")
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestStartCluster: a client given every node is granted by the leader,
// and again by the next one once the leader is stopped, with a larger
// token.
func TestStartCluster(t *testing.T) {
	cl := fencelocktest.StartCluster(t, 3, func(i int, c *server.Config) { c.MaxTTL = time.Minute })
	if len(cl.Nodes) != 3 || len(cl.Peers) != 3 || cl.Peers[0].ID != "n1" {
		t.Fatalf("cluster of %d nodes, peers %+v; want 3, n1 first", len(cl.Nodes), cl.Peers)
	}
	c, err := client.New(cl.Addrs()...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(t.Context(), "x", client.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("acquire on the test cluster: %v", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	old := cl.Leader()
	cl.Nodes[old].Close()
	cl.Nodes[old].Close() // again: nothing
	l2, err := c.Acquire(t.Context(), "x", client.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("acquire after the leader stopped: %v", err)
	}
	if now := cl.Leader(); now == old || now < 0 || l2.Token() <= l.Token() {
		t.Fatalf("after the failover: leader %d (was %d), token %d after %d", now, old, l2.Token(), l.Token())
	}
	if err := l2.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
