package server

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/sequencer"
)

// TestSequencers: a grant and each renewal carry a sequencer that the
// cluster's keys verify, but a grant asked for none; CheckSequencer tells the current grant from an
// ended one; after two rotations the first key's sequencers are refused.
func TestSequencers(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	ctx := t.Context()
	g, err := s.Acquire(ctx, AcquireRequest{Name: "reports", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := s.fsm.Identity()
	if g.Sequencer == "" || g.ClusterID == "" || g.ClusterID != id.ClusterID || len(id.Keys) != 1 {
		t.Fatalf("grant %+v, identity %+v: want a sequencer of the cluster's one key", g, id)
	}
	seq, err := s.Verifier().Verify(g.Sequencer, "reports")
	if err != nil || seq.Token != g.Token || seq.LeaseHash != sequencer.LeaseHash(g.LeaseID) || seq.LeaseEnd.Sub(seq.Issued) > 5*time.Second || seq.LeaseEnd.Sub(seq.Issued) < 4*time.Second {
		t.Fatalf("Verify = %+v, %v; want the grant's token %d and lease", seq, err, g.Token)
	}
	if cur, tok, err := checkSeq(t, s, g.Sequencer); !cur || tok != g.Token || err != nil {
		t.Fatalf("CheckSequencer of the current grant: %v %d %v", cur, tok, err)
	}
	if err := s.Release(ctx, "reports", g.LeaseID, g.Token); err != nil {
		t.Fatal(err)
	}
	g2, err := s.Acquire(ctx, AcquireRequest{Name: "reports", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if cur, tok, err := checkSeq(t, s, g.Sequencer); cur || tok != g2.Token || err != nil {
		t.Fatalf("CheckSequencer of an ended grant: %v %d %v; want not current, token %d", cur, tok, err, g2.Token)
	}
	unsigned, err := s.Acquire(ctx, AcquireRequest{Name: "unsigned", TTL: time.Second, NoSequencer: true})
	if err != nil || unsigned.Sequencer != "" || unsigned.ClusterID != id.ClusterID {
		t.Fatalf("a grant with NoSequencer: %+v, %v; want no sequencer, cluster %q", unsigned, err, id.ClusterID)
	}
	rotate := func() { // both steps: add a pending key, then make it sign
		t.Helper()
		for range 2 {
			if _, err := s.RotateKey(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if g3, err := s.Acquire(ctx, AcquireRequest{Name: "other", TTL: time.Second}); err != nil || !strings.Contains(g3.Sequencer, ".") ||
		mustVerify(t, s, g3.Sequencer).KeyID != s.fsm.Identity().Keys[0].ID {
		t.Fatalf("with a pending key, grants are signed by the key that signed: %v", err)
	}
	if _, err := s.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verifier().Verify(g.Sequencer, ""); err != nil {
		t.Fatalf("after one rotation the old key's sequencer: %v, want valid", err)
	}
	rotate()
	if _, err := s.Verifier().Verify(g.Sequencer, ""); !errors.Is(err, sequencer.ErrUnknownKey) {
		t.Fatalf("after two rotations the first key's sequencer: %v, want ErrUnknownKey", err)
	}
	if _, _, err := checkSeq(t, s, g.Sequencer); !errors.Is(err, fencelock.ErrInvalidSequencer) {
		t.Fatalf("CheckSequencer of a rotated-away key: %v", err)
	}
}

func mustVerify(t *testing.T, s *Server, text string) sequencer.Sequencer {
	t.Helper()
	seq, err := s.Verifier().Verify(text, "")
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func checkSeq(t *testing.T, s *Server, text string) (bool, fencelock.Token, error) {
	t.Helper()
	_, cur, tok, err := s.CheckSequencer(t.Context(), text)
	return cur, tok, err
}

// TestBackupRestore_StartsTheNextEpoch: a backup restored into a new data
// dir runs with the next epoch, keeping the cluster's identity; its first
// token is above every token of the backed-up cluster.
func TestBackupRestore_StartsTheNextEpoch(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	ctx := t.Context()
	var last fencelock.Token
	for range 3 {
		g, err := s.Acquire(ctx, AcquireRequest{Name: "a", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, "a", g.LeaseID, g.Token); err != nil {
			t.Fatal(err)
		}
		last = g.Token
	}
	held, err := s.Acquire(ctx, AcquireRequest{Name: "held", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := InspectBackup(bytes.NewReader(b))
	if err != nil || info.Epoch != 0 || info.Locks != 1 || info.Highest != held.Token || info.ClusterID != held.ClusterID || info.Keys != 1 {
		t.Fatalf("InspectBackup = %+v, %v", info, err)
	}
	damaged := bytes.Clone(b)
	damaged[len(damaged)-3] ^= 1
	if _, err := InspectBackup(bytes.NewReader(damaged)); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("a damaged backup: %v, want ErrInvalidArgument", err)
	}

	rc := RestoreConfig{DataDir: t.TempDir(), NodeID: DefaultConfig().NodeID, RaftAddr: testproc.FreeAddr(t)}
	if _, err := RestoreBackup(bytes.NewReader(b), rc); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreBackup(bytes.NewReader(b), rc); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("a second restore into the same dir: %v, want refused", err)
	}
	r := openInProcessWith(t, func(c *Config) { c.DataDir, c.RaftAddr = rc.DataDir, rc.RaftAddr })
	if id := r.fsm.Identity(); id.Epoch != 1 || id.ClusterID != held.ClusterID {
		t.Fatalf("restored identity %+v, want epoch 1 of cluster %s", id, held.ClusterID)
	}
	g, err := r.Acquire(ctx, AcquireRequest{Name: "a", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if g.Token <= last || g.Token <= held.Token || g.Token.Epoch() != 1 {
		t.Fatalf("first token after the restore %d, want above %d and %d, in epoch 1", g.Token, last, held.Token)
	}
	if _, err := r.Verifier().Verify(g.Sequencer, "a"); err != nil {
		t.Fatalf("a restored cluster's sequencer with its keys: %v", err)
	}
}

// TestSequencers_ofGrantsMadeTogether: grants made at once get their
// sequencers signed in batches; each one verifies for its own lock, token
// and lease.
func TestSequencers_ofGrantsMadeTogether(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	const n = 200
	grants := make([]fencelock.Grant, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			grants[i], errs[i] = s.Acquire(t.Context(), AcquireRequest{Name: fencelock.LockName(fmt.Sprintf("batch-%d", i)), TTL: 5 * time.Second})
		})
	}
	wg.Wait()
	v, batched := s.Verifier(), 0
	for i, g := range grants {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		seq, err := v.VerifyWrite(g.Sequencer, g.Name, g.Token)
		if err != nil || seq.LeaseHash != sequencer.LeaseHash(g.LeaseID) {
			t.Fatalf("grant %d (%s, token %d): sequencer %+v, %v", i, g.Name, g.Token, seq, err)
		}
		if _, body, _, _ := sequencer.Parse(g.Sequencer); body[0] == 2 {
			batched++
		}
	}
	t.Logf("%d of %d sequencers signed in batches", batched, n)
	if batched == 0 {
		t.Errorf("none of %d grants made at once was signed in a batch", n)
	}
}
