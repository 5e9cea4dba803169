package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
)

// backupFormat names the backup file format in its first line.
const backupFormat = "fencelock-backup"

// MaxBackupSize is the largest backup file read, in bytes.
const MaxBackupSize = 1 << 30

// BackupInfo is the first line of a backup file, and what Inspect adds.
type BackupInfo struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	ClusterID string    `json:"cluster_id"`
	Epoch     uint64    `json:"epoch"`
	Index     uint64    `json:"index"` // the last log index the state holds
	Taken     time.Time `json:"taken"`
	Size      int64     `json:"size"`   // of the state, after the first line
	SHA256    string    `json:"sha256"` // of the state
	// Filled in by InspectBackup:
	Locks   int             `json:"locks,omitempty"`
	Highest fencelock.Token `json:"highest_token,omitempty"`
	Keys    int             `json:"keys,omitempty"`
}

// Backup returns a backup of the whole state: on the leader, after a
// barrier, so that it holds every committed entry. The file is a JSON line
// (BackupInfo), then the state as a snapshot holds it. One runs at a time;
// another meanwhile fails with ErrUnavailable.
func (s *Server) Backup(ctx context.Context) ([]byte, error) {
	if !s.backingUp.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("backup: another backup is running: %w", fencelock.ErrUnavailable)
	}
	defer s.backingUp.Store(false)
	if err := s.linearize(ctx); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return encodeBackup(s.fsm)
}

func encodeBackup(f *fsm.FSM) ([]byte, error) {
	snap, err := f.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Release()
	var body bytes.Buffer
	if err := snap.Persist(&bufferSink{Buffer: &body}); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	id := f.Identity()
	sum := sha256.Sum256(body.Bytes())
	info := BackupInfo{Format: backupFormat, Version: 1, ClusterID: id.ClusterID, Epoch: id.Epoch,
		Index: f.AppliedIndex(), Taken: time.Now().UTC(), Size: int64(body.Len()), SHA256: hex.EncodeToString(sum[:])}
	head, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	return append(append(head, '\n'), body.Bytes()...), nil
}

// bufferSink is a raft.SnapshotSink into memory.
type bufferSink struct{ *bytes.Buffer }

func (bufferSink) ID() string    { return "backup" }
func (bufferSink) Cancel() error { return nil }
func (bufferSink) Close() error  { return nil }

// readBackup reads a backup file, checks its checksum and returns its state
// restored into an FSM, and the state's bytes.
func readBackup(r io.Reader) (BackupInfo, *fsm.FSM, []byte, error) {
	br := bufio.NewReader(io.LimitReader(r, MaxBackupSize+1))
	line, err := br.ReadBytes('\n')
	var info BackupInfo
	if err != nil || json.Unmarshal(line, &info) != nil || info.Format != backupFormat {
		return info, nil, nil, fmt.Errorf("not a fencelock backup (its first line is not a %s header): %w", backupFormat, fencelock.ErrInvalidArgument)
	}
	if info.Version != 1 {
		return info, nil, nil, fmt.Errorf("backup format version %d, this build reads 1: %w", info.Version, fencelock.ErrInvalidArgument)
	}
	body, err := io.ReadAll(br)
	if err != nil {
		return info, nil, nil, fmt.Errorf("read backup: %w", err)
	}
	sum := sha256.Sum256(body)
	if int64(len(body)) != info.Size || hex.EncodeToString(sum[:]) != info.SHA256 {
		return info, nil, nil, fmt.Errorf("backup is damaged: %d bytes with SHA-256 %x, its header says %d and %s: %w",
			len(body), sum, info.Size, info.SHA256, fencelock.ErrInvalidArgument)
	}
	f := fsm.New(0, nil)
	if err := f.Restore(io.NopCloser(bytes.NewReader(body))); err != nil {
		return info, nil, nil, fmt.Errorf("backup: %w: %w", fencelock.ErrInvalidArgument, err)
	}
	return info, f, body, nil
}

// InspectBackup reads a backup and says what is in it.
func InspectBackup(r io.Reader) (BackupInfo, error) {
	info, f, _, err := readBackup(r)
	if err != nil {
		return info, err
	}
	locks, _ := f.List("", "", 1<<30)
	info.Locks = len(locks)
	for _, l := range locks {
		if l.Holder != nil {
			info.Highest = max(info.Highest, l.Holder.Token)
		}
	}
	info.Keys = len(f.Identity().Keys)
	return info, nil
}

// RestoreConfig says where and how to restore a backup.
type RestoreConfig struct {
	DataDir  string
	NodeID   string
	RaftAddr string
	// Bootstrap lists the voters of the restored cluster; empty: this node
	// alone. Restore the same backup with the same list into every
	// voter's data dir.
	Bootstrap []Peer
	// Epoch is the restored cluster's token epoch; 0: the backup's + 1. It
	// must be above the backup's.
	Epoch uint64
	// UnsafeSameEpoch keeps the backup's epoch: tokens issued after the
	// backup are issued again. It exists for the fault harness's negative
	// control only, which must catch it.
	UnsafeSameEpoch bool
	// NewClusterID gives the restored cluster an id of its own (e.g. a
	// staging copy of production) and a signing key of its own (see
	// RestoreBackup), so resources that trust the old cluster refuse its
	// sequencers.
	NewClusterID string
}

// RestoreBackup seeds DataDir, which must hold no Raft state, with the
// backup's state in a new token epoch, as a Raft snapshot of a new cluster
// (cfg.Bootstrap, or this node alone). "fencelock serve --data-dir DIR"
// then runs it. It returns the backup's header with the new epoch.
//
// The state it writes depends only on the backup and on cfg's Epoch,
// UnsafeSameEpoch and NewClusterID: every voter restored from one backup
// with the same options holds the same state, byte for byte. Without
// NewClusterID the backup's id and signing keys are kept. With it, the
// only signing key is derived from the backup's state, the epoch and the
// new id (restoredKey), and counts as added at the backup's last command
// time. Anyone who holds the backup can derive the restored cluster's
// private key, as they can read the old cluster's keys in it: a backup is
// as secret as the keys of every cluster restored from it.
func RestoreBackup(r io.Reader, cfg RestoreConfig) (BackupInfo, error) {
	info, f, state, err := readBackup(r)
	if err != nil {
		return info, err
	}
	epoch := cfg.Epoch
	if epoch == 0 {
		epoch = info.Epoch + 1
	}
	switch {
	case cfg.UnsafeSameEpoch:
		if cfg.NewClusterID != "" {
			return info, fmt.Errorf("restore: a new cluster id with the same epoch: %w", fencelock.ErrInvalidArgument)
		}
	case epoch <= info.Epoch || epoch > fencelock.MaxTokenEpoch:
		return info, fmt.Errorf("restore: epoch %d must be above the backup's %d and at most %d: %w", epoch, info.Epoch, fencelock.MaxTokenEpoch, fencelock.ErrInvalidArgument)
	default:
		var key fsm.SigningKey // StartEpoch keeps the backup's keys without a new id
		if cfg.NewClusterID != "" {
			key = restoredKey(state, epoch, cfg.NewClusterID, f.LastNow())
		}
		if err := f.StartEpoch(epoch, cfg.NewClusterID, key); err != nil {
			return info, err
		}
	}
	if err := writeSeed(f, cfg); err != nil {
		return info, err
	}
	id := f.Identity()
	info.Epoch, info.ClusterID = id.Epoch, id.ClusterID
	return info, nil
}

// restoreKeyDomain separates the seeds restoredKey derives from any other
// use of SHA-256 over a backup's state.
const restoreKeyDomain = "fencelock restored cluster signing key v1"

// restoredKey returns the signing key of the cluster restored from the
// backup state state into epoch epoch as cluster clusterID, added at added
// (Unix nanoseconds). Its seed is SHA-256 over restoreKeyDomain and the
// three, each after its length; its id is the start of the SHA-256 of its
// public key. The same inputs give the same key. The seed is secret only
// while state is: it hashes the state itself, never the checksum that a
// backup's header shows.
func restoredKey(state []byte, epoch uint64, clusterID string, added int64) fsm.SigningKey {
	h := sha256.New()
	h.Write([]byte(restoreKeyDomain))
	for _, part := range [][]byte{state, binary.BigEndian.AppendUint64(nil, epoch), []byte(clusterID)} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(part))))
		h.Write(part)
	}
	seed := h.Sum(nil)
	id := sha256.Sum256(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
	return fsm.SigningKey{ID: hex.EncodeToString(id[:8]), Seed: seed, Added: added}
}

// writeSeed writes f's state as the Raft snapshot of a new cluster into
// cfg.DataDir.
func writeSeed(f *fsm.FSM, cfg RestoreConfig) error {
	if err := createDataDir(cfg.DataDir); err != nil {
		return err
	}
	if entries, err := os.ReadDir(cfg.DataDir); err != nil || len(entries) > 0 {
		return fmt.Errorf("restore into %s: the directory is not empty (restore into a new one): %w", cfg.DataDir, fencelock.ErrInvalidArgument)
	}
	snaps, err := raft.NewFileSnapshotStore(cfg.DataDir, 2, io.Discard)
	if err != nil {
		return fmt.Errorf("restore: open snapshot store: %w", err)
	}
	conf := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(cfg.RaftAddr)}}}
	if len(cfg.Bootstrap) > 0 {
		conf.Servers = nil
		for _, p := range cfg.Bootstrap {
			conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
	}
	// The new cluster's log starts at index 1: its tokens are the new
	// epoch's first, and a cluster that ran out of indexes gets them all
	// back.
	_, trans := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, 1, 1, conf, 1, trans)
	if err != nil {
		return fmt.Errorf("restore: create snapshot: %w", err)
	}
	snap, err := f.Snapshot()
	if err != nil {
		return errors.Join(err, sink.Cancel())
	}
	defer snap.Release()
	if err := snap.Persist(sink); err != nil {
		return fmt.Errorf("restore: write snapshot: %w", err)
	}
	return nil
}
