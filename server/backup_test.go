package server

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/testproc"
)

// seededState returns the state of the snapshot that RestoreBackup wrote
// into dir.
func seededState(tb testing.TB, dir string) []byte {
	tb.Helper()
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		tb.Fatal(err)
	}
	metas, err := snaps.List()
	if err != nil || len(metas) != 1 {
		tb.Fatalf("snapshots in %s: %d, %v; want one", dir, len(metas), err)
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		tb.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// identityOf returns the identity the state holds.
func identityOf(tb testing.TB, state []byte) (fsm.Identity, int64) {
	tb.Helper()
	f := fsm.New(0, nil)
	if err := f.Restore(io.NopCloser(bytes.NewReader(state))); err != nil {
		tb.Fatal(err)
	}
	return f.Identity(), f.LastNow()
}

// TestRestoreBackup_sameStateInEveryVoter: one backup restored with the
// same options into two data dirs (two voters) gives the same state byte
// for byte: the same epoch, cluster id and signing keys.
func TestRestoreBackup_sameStateInEveryVoter(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	if _, err := s.Acquire(t.Context(), AcquireRequest{Name: "held", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	b, err := s.Backup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	old := s.fsm.Identity()
	boot := []Peer{{ID: "n1", RaftAddr: testproc.FreeAddr(t)}, {ID: "n2", RaftAddr: testproc.FreeAddr(t)}}
	for _, tc := range []struct {
		name string
		cfg  RestoreConfig
	}{
		{"next epoch", RestoreConfig{}},
		{"given epoch", RestoreConfig{Epoch: 7}},
		{"new cluster id", RestoreConfig{NewClusterID: "staging"}},
		{"new cluster id and epoch", RestoreConfig{NewClusterID: "staging", Epoch: 7}},
		{"unsafe same epoch", RestoreConfig{UnsafeSameEpoch: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var states [][]byte
			for _, p := range boot {
				cfg := tc.cfg
				cfg.DataDir, cfg.NodeID, cfg.RaftAddr, cfg.Bootstrap = t.TempDir(), p.ID, p.RaftAddr, boot
				if _, err := RestoreBackup(bytes.NewReader(b), cfg); err != nil {
					t.Fatal(err)
				}
				states = append(states, seededState(t, cfg.DataDir))
			}
			first, lastNow := identityOf(t, states[0])
			if second, _ := identityOf(t, states[1]); !reflect.DeepEqual(first, second) {
				t.Fatalf("two voters restored from one backup: identities %+v and %+v, want the same", first, second)
			}
			if !bytes.Equal(states[0], states[1]) {
				t.Fatalf("two voters restored from one backup hold different states:\n%s\n%s", states[0], states[1])
			}
			if tc.cfg.NewClusterID == "" {
				if !reflect.DeepEqual(first.Keys, old.Keys) || first.ClusterID != old.ClusterID {
					t.Fatalf("restored identity %+v, want the backup's id and keys %+v", first, old)
				}
				return
			}
			if len(first.Keys) != 1 || first.ClusterID != tc.cfg.NewClusterID || first.Keys[0].Added != lastNow {
				t.Fatalf("restored identity %+v, want one key of cluster %s added at the backup's last command time %d",
					first, tc.cfg.NewClusterID, lastNow)
			}
			for _, k := range old.Keys {
				if k.ID == first.Keys[0].ID || bytes.Equal(k.Seed, first.Keys[0].Seed) {
					t.Fatalf("the restored cluster's key %s is one of the backup's", k.ID)
				}
			}
		})
	}
}

// TestRestoreBackup_keyDependsOnTheOptions: restores of one backup with
// another new cluster id or epoch get another signing key.
func TestRestoreBackup_keyDependsOnTheOptions(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	b, err := s.Backup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, cfg := range []RestoreConfig{{NewClusterID: "a"}, {NewClusterID: "b"}, {NewClusterID: "a", Epoch: 9}} {
		cfg.DataDir, cfg.NodeID, cfg.RaftAddr = t.TempDir(), "n1", testproc.FreeAddr(t)
		if _, err := RestoreBackup(bytes.NewReader(b), cfg); err != nil {
			t.Fatal(err)
		}
		id, _ := identityOf(t, seededState(t, cfg.DataDir))
		what := fmt.Sprintf("cluster %s in epoch %d", id.ClusterID, id.Epoch)
		if other, ok := seen[string(id.Keys[0].Seed)]; ok {
			t.Fatalf("%s got the signing key of %s", what, other)
		}
		seen[string(id.Keys[0].Seed)] = what
	}
}
