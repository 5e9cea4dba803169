package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock/server"
)

func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, snapshotUsage)
		if len(args) == 0 {
			return usageErr("snapshot: missing subcommand: save, inspect or restore")
		}
		return nil
	}
	switch args[0] {
	case "save":
		return runSnapshotSave(ctx, args[1:], stdout, stderr)
	case "inspect":
		return runSnapshotInspect(args[1:], stdout, stderr)
	case "restore":
		return runSnapshotRestore(args[1:], stdout, stderr)
	}
	return usageErr("snapshot: unknown subcommand %q: save, inspect or restore", args[0])
}

const snapshotUsage = `Usage: fencelock snapshot save FILE | inspect FILE | restore FILE --data-dir DIR

Backups of the whole state: the locks, their tokens, the cluster's id and
signing keys (keep a backup as secret as the keys: those of its cluster, and
of every cluster restored from it, derive from it).

  save FILE      take a backup on the leader (online) and write it to FILE
  inspect FILE   print what a backup holds: locks, highest token, epoch, cluster id
  restore FILE   seed a new data dir with a backup, in the next token epoch, so
                 that every new token is above every token of the old cluster;
                 then run "fencelock serve --data-dir DIR" (with its --listen and
                 --raft-addr), and grow the cluster with --join as usual

Run "fencelock snapshot SUBCOMMAND --help" for its flags.
`

func runSnapshotSave(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("snapshot save", "snapshot save FILE [flags]\n\n"+
		"Takes a backup on the leader and writes it to FILE (atomically: a temporary\n"+
		"file renamed when complete). Progress goes to stderr on a terminal. With an\n"+
		"admin token on the cluster, set FENCELOCK_ADMIN_TOKEN.", stderr)
	newClient := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print the backup's header as JSON")
	file, rest, err := splitName(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErr("snapshot save takes one FILE, got extra %q", rest)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	var buf bytes.Buffer
	progress := func(done, total int64) {}
	if isTerminal(stderr) {
		progress = func(done, total int64) { fmt.Fprintf(stderr, "\rbackup: %d of %d bytes", done, total) }
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := adminOf(c).Backup(ctx, &buf, progress); err != nil {
		return err
	}
	if isTerminal(stderr) {
		fmt.Fprintln(stderr)
	}
	info, err := server.InspectBackup(bytes.NewReader(buf.Bytes()))
	if err != nil {
		return fmt.Errorf("snapshot save: the backup received does not read back: %w", err)
	}
	if err := writeFileAtomic(file, buf.Bytes()); err != nil {
		return err
	}
	return printBackup(stdout, "saved "+file, info, *asJSON)
}

// writeFileAtomic writes b to a temporary file beside path, syncs it and
// renames it to path, so path is never half written.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil { // it holds the signing keys
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func printBackup(w io.Writer, what string, info server.BackupInfo, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(info)
	}
	_, err := fmt.Fprintf(w, "%s: cluster %s, epoch %d, index %d, taken %s, %d locks, highest token %d, %d signing keys\n",
		what, info.ClusterID, info.Epoch, info.Index, info.Taken.Format(time.RFC3339), info.Locks, info.Highest, info.Keys)
	return err
}

func runSnapshotInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("snapshot inspect", "snapshot inspect FILE [flags]\n\n"+
		"Prints what a backup holds: its cluster id, epoch, index, time, locks,\n"+
		"highest token and number of signing keys. Exit status 2 if FILE is not an\n"+
		"intact backup.", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	file, rest, err := splitName(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErr("snapshot inspect takes one FILE, got extra %q", rest)
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := server.InspectBackup(f)
	if err != nil {
		return err
	}
	return printBackup(stdout, file, info, *asJSON)
}

func runSnapshotRestore(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("snapshot restore", "snapshot restore FILE --data-dir DIR [flags]\n\n"+
		"Seeds DIR (new or empty) with the backup in FILE, as the first snapshot of a\n"+
		"new cluster in the next token epoch: its first token is above every token\n"+
		"the old cluster issued, also after the backup was taken. Then run\n"+
		"\"fencelock serve --data-dir DIR --node-id ID --raft-addr ADDR\" with the same\n"+
		"id and address. For several voters, restore the same FILE into each one's\n"+
		"DIR with the same --bootstrap, --epoch and --new-cluster-id (every voter\n"+
		"then holds the same state and signing keys), or restore one and --join the\n"+
		"others. With --new-cluster-id the new signing key derives from FILE, the\n"+
		"epoch and the id: whoever holds FILE can derive it.\n"+
		"Restore a backup once: restoring it (or an older one) again starts the same\n"+
		"epoch as the first restore; give --epoch above that cluster's (status shows it).", stderr)
	def := server.DefaultConfig()
	dataDir := fs.String("data-dir", "", "the new node's data directory (required; must be new or empty)")
	nodeID := fs.String("node-id", def.NodeID, "the new node's id, as it will serve")
	raftAddr := fs.String("raft-addr", def.RaftAddr, "the new node's Raft address, as it will serve")
	bootstrap := fs.String("bootstrap", "", "voters of the restored cluster, id=raft-addr,... (default: this node alone)")
	epoch := fs.Uint64("epoch", 0, "the restored cluster's token epoch (default: the backup's + 1)")
	newID := fs.String("new-cluster-id", "", "give the restored cluster this id instead of the backup's, and a signing key derived from FILE, the epoch and the id (a staging copy: resources that pin the old id refuse its sequencers)")
	sameEpoch := fs.Bool("unsafe-same-epoch", false, "UNSAFE: keep the backup's epoch, so tokens issued after the backup come back (for the fault harness's negative control only)")
	asJSON := fs.Bool("json", false, "print the restored cluster's header as JSON")
	file, rest, err := splitName(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 || *dataDir == "" {
		return usageErr("snapshot restore FILE --data-dir DIR: want one FILE and --data-dir")
	}
	cfg := server.RestoreConfig{DataDir: *dataDir, NodeID: *nodeID, RaftAddr: *raftAddr, Epoch: *epoch, NewClusterID: *newID, UnsafeSameEpoch: *sameEpoch}
	if *bootstrap != "" {
		pairs, err := parsePairs(*bootstrap, "--bootstrap")
		if err != nil {
			return err
		}
		for _, p := range pairs {
			cfg.Bootstrap = append(cfg.Bootstrap, server.Peer{ID: p[0], RaftAddr: p[1]})
		}
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := server.RestoreBackup(f, cfg)
	if err != nil {
		return err
	}
	return printBackup(stdout, "restored into "+*dataDir, info, *asJSON)
}
