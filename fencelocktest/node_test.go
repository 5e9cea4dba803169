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
