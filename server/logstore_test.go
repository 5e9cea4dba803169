package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
)

// A second node on a data dir in use fails at once with a clear error; it
// waited for raft.db's file lock forever, deaf to signals.
func TestOpen_DataDirInUse(t *testing.T) {
	t.Parallel()
	first := openInProcess(t)
	cfg := first.cfg
	cfg.RaftAddr = testproc.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		s, err := Open(context.Background(), cfg)
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "another node is using the data dir") {
			t.Fatalf("a second Open of the data dir = %v, want an error that another node uses it", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a second Open of a data dir in use still waits after 30s")
	}
}

// A Raft address peers cannot reach (0.0.0.0) is refused with a typed
// error before anything listens.
func TestOpen_UnspecifiedRaftAddress(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr = "0.0.0.0:0"
	s, err := Open(context.Background(), cfg)
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), "unspecified") {
		t.Fatalf("Open with Raft address 0.0.0.0:0 = %v, want ErrInvalidArgument naming the unspecified address", err)
	}
}
