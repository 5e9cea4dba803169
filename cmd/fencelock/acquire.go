package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
)

// splitName parses flags that may come before or after the NAME argument and
// returns NAME and the remaining arguments.
func splitName(fs *flag.FlagSet, args []string) (string, []string, error) {
	if err := parse(fs, args); err != nil {
		return "", nil, err
	}
	if fs.NArg() == 0 {
		return "", nil, usageErr("%s: missing lock NAME (see fencelock %s --help)", fs.Name(), fs.Name())
	}
	name := fs.Arg(0)
	if err := parse(fs, fs.Args()[1:]); err != nil {
		return "", nil, err
	}
	return name, fs.Args(), nil
}

func runAcquire(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("acquire", "acquire NAME [flags]\n\n"+
		"Acquires lock NAME and prints the grant. Nothing renews the lease after\n"+
		"this command exits: call \"fencelock renew\" within the TTL, and\n"+
		"\"fencelock release\" when done. For a command, prefer \"fencelock lock\".", stderr)
	newClient := clientFlags(fs)
	ttl := fs.Duration("ttl", client.DefaultTTL, "lease TTL")
	wait := &waitFlag{}
	fs.Var(wait, "wait", "how long to wait for the lock: a duration, 0 to fail at once if held, or forever")
	holder := fs.String("holder", "", "label of the grant, shown by describe (default host/pid)")
	asJSON := fs.Bool("json", false, "print JSON")
	asEnv := fs.Bool("env", false, "print an export line for a shell: eval \"$(fencelock acquire NAME --env)\" sets FENCELOCK_LOCK, FENCELOCK_TOKEN, FENCELOCK_LEASE_ID (which renew and release read) and FENCELOCK_SEQUENCER")
	name, rest, err := splitName(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErr("acquire takes one NAME, got extra %q", rest)
	}
	if *asJSON && *asEnv {
		return usageErr("acquire: --json and --env exclude each other")
	}
	if *ttl <= 0 {
		return usageErr("--ttl %v: want a positive duration", *ttl)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := c.Acquire(ctx, name, acquireOptions(wait, *ttl, *holder)...)
	if err != nil {
		return err
	}
	g := grantJSON{Name: name, Token: l.Token(), LeaseID: l.LeaseID(), TTL: l.TTL().String(), Sequencer: l.Sequencer(), ClusterID: l.ClusterID()}
	switch {
	case *asJSON:
		return json.NewEncoder(stdout).Encode(g)
	case *asEnv:
		_, err := fmt.Fprintf(stdout, "export FENCELOCK_LOCK=%s FENCELOCK_TOKEN=%d FENCELOCK_LEASE_ID=%s FENCELOCK_SEQUENCER=%s\n",
			shellQuote(name), g.Token, shellQuote(string(g.LeaseID)), shellQuote(g.Sequencer))
		return err
	}
	fmt.Fprintf(stdout, "lock=%s token=%d lease_id=%s ttl=%s\n", g.Name, g.Token, g.LeaseID, g.TTL)
	return nil
}

// acquireOptions are the options of the lock and acquire commands: the
// wait, the TTL, the holder label unless it is "" (the client's default),
// and the grant's sequencer, which both hand on.
func acquireOptions(wait *waitFlag, ttl time.Duration, holder string) []client.Option {
	opts := append(wait.options(), client.WithTTL(ttl), client.WithSequencer())
	if holder != "" {
		opts = append(opts, client.WithHolder(holder))
	}
	return opts
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

type grantJSON struct {
	Name      string            `json:"name"`
	Token     fencelock.Token   `json:"token"`
	LeaseID   fencelock.LeaseID `json:"lease_id"`
	TTL       string            `json:"ttl"`
	Sequencer string            `json:"sequencer,omitempty"`
	ClusterID string            `json:"cluster_id,omitempty"`
}

// grantFlags adds --lease-id and --token, defaulting to the environment a
// "fencelock lock" command provides. The returned check, called after
// parsing, refuses a grant that neither names (a usage error).
func grantFlags(fs *flag.FlagSet) (*string, *uint64, func() error) {
	id := fs.String("lease-id", os.Getenv("FENCELOCK_LEASE_ID"), "the grant's lease id (env FENCELOCK_LEASE_ID)")
	var def uint64
	envTok := os.Getenv("FENCELOCK_TOKEN")
	t, envErr := fencelock.ParseToken(envTok)
	if envErr == nil {
		def = uint64(t)
	}
	tok := fs.Uint64("token", def, "the grant's fencing token (env FENCELOCK_TOKEN)")
	check := func() error {
		tokSet := false
		fs.Visit(func(f *flag.Flag) { tokSet = tokSet || f.Name == "token" })
		switch {
		case *id == "":
			return usageErr("%s: --lease-id (or FENCELOCK_LEASE_ID) is required: the lease id that acquire printed", fs.Name())
		case !tokSet && envTok != "" && envErr != nil:
			return usageErr("%s: FENCELOCK_TOKEN=%q is not a token: %v", fs.Name(), envTok, envErr)
		case *tok == 0:
			return usageErr("%s: --token (or FENCELOCK_TOKEN) is required: the fencing token that acquire printed", fs.Name())
		}
		return nil
	}
	return id, tok, check
}

func runRenew(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("renew", "renew NAME --lease-id ID --token N [flags]", stderr)
	newClient := clientFlags(fs)
	id, tok, checkGrant := grantFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	name, rest, err := splitName(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErr("renew takes one NAME, got extra %q", rest)
	}
	if err := checkGrant(); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ttl, err := c.Renew(ctx, name, fencelock.LeaseID(*id), fencelock.Token(*tok))
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]string{"name": name, "ttl": ttl.String()})
	}
	fmt.Fprintf(stdout, "lock=%s renewed ttl=%s\n", name, ttl)
	return nil
}

func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("release", "release NAME --lease-id ID --token N [flags]", stderr)
	newClient := clientFlags(fs)
	id, tok, checkGrant := grantFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	name, rest, err := splitName(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErr("release takes one NAME, got extra %q", rest)
	}
	if err := checkGrant(); err != nil {
		return err
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Release(ctx, name, fencelock.LeaseID(*id), fencelock.Token(*tok)); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"name": name, "released": true})
	}
	fmt.Fprintf(stdout, "lock=%s released\n", name)
	return nil
}
