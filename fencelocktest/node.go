package fencelocktest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/server"
)

// Node is a one-node fencelock service running in the test's process: a
// real Raft log (synced to disk) in a temp dir, and the API on loopback over
// HTTP/2 without TLS, as "fencelock serve" serves it.
type Node struct {
	// Server is the node: its operations (Acquire, Describe, Apply...) can
	// be called directly.
	Server *server.Server
	// Addr is the API's host:port, for client.New.
	Addr string
}

// StartNode starts a Node with server.DefaultConfig changed by each of
// configure (its data dir, Raft address and a silent logger are set
// first), waits until it leads with its leases armed, and closes it when
// the test ends, before the API's listener. It fails the test if the node
// does not start within 20 s.
func StartNode(tb testing.TB, configure ...func(*server.Config)) *Node {
	tb.Helper()
	cfg := server.DefaultConfig()
	cfg.DataDir = tb.TempDir()
	cfg.RaftAddr = testproc.FreeAddr(tb)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range configure {
		c(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := server.Open(ctx, cfg)
	if err != nil {
		tb.Fatalf("start a test node: %v", err)
	}
	addr := testproc.ServeH2C(tb, api.Handler(s))
	tb.Cleanup(func() { s.Close() }) // before the listener: it ends the calls that wait
	if err := s.WaitReady(ctx); err != nil {
		tb.Fatalf("start a test node: %v", err)
	}
	return &Node{Server: s, Addr: addr}
}
