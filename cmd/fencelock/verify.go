package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencelock/fencelock/verify"
)

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "worker" {
		return runVerifyWorker(ctx, args[1:], stdout, stderr)
	}
	var names []string
	for _, s := range verify.Scenarios() {
		names = append(names, s.Number+"="+s.Name)
	}
	fs := newFlags("verify", "verify [flags]\n\n"+
		"Proves the fencing claim under faults, Jepsen-style: starts real lock\n"+
		"service nodes, the fenced store and client processes on 127.0.0.1, runs a\n"+
		"lock-set workload (acquire, fence, read, append with the token, release)\n"+
		"while a nemesis kills, partitions and freezes processes, records the\n"+
		"history and checks it (token order, porcupine linearizability, no lost or\n"+
		"stale write at the store, the faults really bit). The negative control\n"+
		"turns fencing off and must be caught. Exit status 1 if any scenario fails.\n"+
		"With --servers it verifies your own running cluster instead: the workload\n"+
		"and the client-side faults (scenario 4, and the negative control unless\n"+
		"--store is given) run against it; scenarios that kill, partition or pause\n"+
		"servers are skipped with a note. Use a cluster you can spare: the workload\n"+
		"creates locks and objects named verify-<seed>-*.\n"+
		"Scenarios: "+strings.Join(names, ", ")+".", stderr)
	def := verify.DefaultConfig()
	cfg := def
	fs.DurationVar(&cfg.Duration, "duration", def.Duration, "workload time per scenario (the default is the short CI mode; soak with e.g. 5m)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed of the fault schedule (0: from the clock; always printed)")
	scen := fs.String("scenario", "all", "scenarios to run, comma-separated names or numbers, or all")
	fs.IntVar(&cfg.Nodes, "nodes", 0, "lock service nodes (0: each scenario's default; partition scenarios need at least 3)")
	fs.IntVar(&cfg.Clients, "clients", def.Clients, "client processes")
	fs.IntVar(&cfg.Locks, "locks", def.Locks, "distinct locks (and store objects)")
	fs.DurationVar(&cfg.TTL, "ttl", def.TTL, "lease TTL of the workload's grants (at least 1s)")
	fs.DurationVar(&cfg.OpTimeout, "op-timeout", def.OpTimeout, "how long a client retries one operation before it counts as unknown (info)")
	servers := fs.String("servers", "", "verify an existing lock service: its API addresses host:port, comma-separated (no nodes are started)")
	fs.StringVar(&cfg.StoreURL, "store", "", "with --servers: an existing fenced store URL to use instead of starting one")
	out := fs.String("out", "", "output directory for histories, logs and visualisations (default: a new temp dir)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("verify takes no arguments, got %q", fs.Args())
	}
	for _, s := range strings.Split(*servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if strings.HasPrefix(s, "https://") {
				return usageErr("verify --servers: %q: the harness puts a plain TCP proxy between each client and each server; give host:port", s)
			}
			cfg.Servers = append(cfg.Servers, strings.TrimSuffix(strings.TrimPrefix(s, "http://"), "/"))
		}
	}
	if cfg.StoreURL != "" && !cfg.External() {
		return usageErr("verify --store needs --servers (without them the harness starts its own store)")
	}
	var which []string
	if *scen != "all" && *scen != "" {
		for _, n := range strings.Split(*scen, ",") {
			n = strings.TrimSpace(n)
			if _, ok := verify.Lookup(n); !ok {
				return usageErr("verify: unknown scenario %q: want one of %s, or all", n, strings.Join(names, ", "))
			}
			which = append(which, n)
		}
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("verify: find own executable: %w", err)
	}
	cfg.Binary = bin
	if *out == "" {
		if *out, err = os.MkdirTemp("", "fencelock-verify-"); err != nil {
			return err
		}
	}
	cfg.OutDir, _ = filepath.Abs(*out)
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano() % 1e9)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fmt.Fprintf(stderr, "fencelock verify: seed %d, %v per scenario, output in %s\n", cfg.Seed, cfg.Duration, cfg.OutDir)
	if cfg.External() {
		store := "a store started by the harness"
		if cfg.StoreURL != "" {
			store = cfg.StoreURL
		}
		fmt.Fprintf(stderr, "fencelock verify: against your servers %s and %s; server-side nemeses (kill, partition, pause, snapshot, membership) are skipped\n",
			strings.Join(cfg.Servers, ","), store)
	}
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	results, err := verify.Run(ctx, cfg, which...)
	verify.WriteTable(stdout, results)
	rerun := ""
	if cfg.External() {
		rerun = " --servers " + strings.Join(cfg.Servers, ",")
		if cfg.StoreURL != "" {
			rerun += " --store " + cfg.StoreURL
		}
	}
	fmt.Fprintf(stdout, "\nhistories, logs and visualisations: %s\nrerun with: fencelock verify --seed %d --duration %v --scenario %s%s\n",
		cfg.OutDir, cfg.Seed, cfg.Duration, *scen, rerun)
	if err != nil {
		return err
	}
	for _, r := range results {
		if !r.Pass {
			return exitError{1}
		}
	}
	return nil
}

// runVerifyWorker is a client process of "fencelock verify" (started by it).
func runVerifyWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("verify worker", "verify worker --server ADDRS --store URL\n\n"+
		"A client process of \"fencelock verify\"; verify starts it. It reads one JSON\n"+
		"operation per line on stdin and answers one JSON line each on stdout.", stderr)
	server := fs.String("server", "", "lock service endpoints, comma-separated")
	storeURL := fs.String("store", "", "fenced store URL")
	opTimeout := fs.Duration("op-timeout", 3*time.Second, "timeout of one operation")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *server == "" || *storeURL == "" {
		return usageErr("verify worker needs --server and --store")
	}
	err := verify.RunWorker(ctx, verify.WorkerConfig{
		Endpoints: strings.Split(*server, ","), StoreURL: *storeURL, OpTimeout: *opTimeout,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, os.Stdin, stdout)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
