package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keys", "keys [rotate] [flags]\n\n"+
		"Prints the cluster's id, token epoch and public signing keys: what a resource\n"+
		"that verifies sequencers trusts (fencelock store --sequencer-keys FILE takes\n"+
		"the --json form). A rotation is two \"keys rotate\": the first adds a pending\n"+
		"key (published, not signing: give resources the new keys), the second makes\n"+
		"it sign; sequencers of the key before stay valid, older keys are dropped.\n"+
		"With an admin token on the cluster set FENCELOCK_ADMIN_TOKEN; without one,\n"+
		"rotate works from the node's machine only.", stderr)
	newClient := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON (the form --sequencer-keys reads)")
	if err := parse(fs, args); err != nil {
		return err
	}
	rotate := false
	switch {
	case fs.NArg() == 1 && fs.Arg(0) == "rotate":
		rotate = true
		if err := parse(fs, fs.Args()[1:]); err != nil {
			return err
		}
	case fs.NArg() > 0:
		return usageErr("keys takes no arguments but rotate, got %q", fs.Args())
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	k, err := adminOf(c).Keys(ctx)
	if rotate {
		k, err = adminOf(c).RotateKey(ctx)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(k)
	}
	fmt.Fprintf(stdout, "cluster %s, epoch %d\n", k.ClusterID, k.Epoch)
	for _, key := range k.Keys {
		fmt.Fprintf(stdout, "key %s ed25519 %s %s\n", key.ID, base64.StdEncoding.EncodeToString(key.Public), k.Roles[key.ID])
	}
	return nil
}
