package main

import (
	"context"
	"encoding/json"
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
	fs := newFlags("verify", verifyHelp(names), stderr)
	def := verify.DefaultConfig()
	cfg := def
	fs.DurationVar(&cfg.Duration, "duration", def.Duration, "workload time per scenario (the default is the short CI mode; soak with e.g. 5m)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed of the fault schedule (0: from the clock; always printed)")
	scen := fs.String("scenario", "all", "scenarios to run, comma-separated names or numbers, or all")
	fs.IntVar(&cfg.Nodes, "nodes", 0, "lock service nodes (0: each scenario's default; partition scenarios need at least 3)")
	fs.IntVar(&cfg.Clients, "clients", def.Clients, "client processes on the shared locks (two more take turns holding a lock of their own)")
	fs.IntVar(&cfg.Locks, "locks", def.Locks, "distinct locks (and store objects)")
	fs.DurationVar(&cfg.TTL, "ttl", def.TTL, "lease TTL of the workload's grants (at least 1s)")
	fs.DurationVar(&cfg.OpTimeout, "op-timeout", def.OpTimeout, "how long a client retries one operation before it counts as unknown (info)")
	servers := fs.String("servers", "", "verify an existing lock service: its API addresses host:port, comma-separated (no nodes are started)")
	fs.StringVar(&cfg.StoreURL, "store", "", "with --servers: an existing fenced store URL to use instead of starting one")
	fs.StringVar(&cfg.NemesisExec, "nemesis-exec", "", "with --servers: a program that kills, starts, pauses, resumes, isolates and heals your servers, so that scenarios 1, 2, 3 and 5 run against them (see docs/VERIFICATION.md)")
	fs.BoolVar(&cfg.TLS, "tls", false, "run the harness's nodes with HTTPS, client certificates and mutual TLS on Raft (a development CA in the output directory)")
	fs.StringVar(&cfg.Resource, "resource", verify.ResourceStore, "the fenced resource the workload writes: store (the object store), or a postgres://DSN, mysql://DSN (go-sql-driver form, with a database), redis://ADDR or s3://BUCKET/PREFIX?endpoint=URL URL (existing servers and buckets; tables and keys named fencelock_verify_* / fencelock:verify:*)")
	out := fs.String("out", "", "output directory for histories, logs and visualisations (default: a new temp dir)")
	asJSON := fs.Bool("json", false, "print each scenario's result as a JSON line instead of the table")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("verify takes no arguments, got %q", fs.Args())
	}
	if err := checkVerifyTargets(&cfg, *servers); err != nil {
		return err
	}
	which, err := pickScenarios(*scen, names)
	if err != nil {
		return err
	}
	if err := prepareVerify(&cfg, *out, stderr); err != nil {
		return err
	}
	printVerifyTarget(stderr, cfg)
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	results, err := verify.Run(ctx, cfg, which...)
	if perr := printResults(stdout, stderr, cfg, *scen, results, *asJSON); perr != nil && err == nil {
		err = perr
	}
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

// verifyHelp is the help of "fencelock verify"; names are the scenarios.
func verifyHelp(names []string) string {
	return "verify [flags]\n\n" +
		"Proves the fencing claim under faults, Jepsen-style: starts real lock\n" +
		"service nodes, the fenced store and client processes on 127.0.0.1, runs a\n" +
		"lock-set workload (acquire, fence, read, append with the token, release)\n" +
		"while a nemesis kills, partitions and freezes processes, records the\n" +
		"history and checks it (token order, porcupine linearizability, no lost or\n" +
		"stale write at the store, every lease ended before the lock was granted\n" +
		"again, the faults really bit). The negative controls turn fencing off, or\n" +
		"hold leases past their deadline, and must be caught. Exit status 1 if any\n" +
		"scenario fails.\n" +
		"With --servers it verifies your own running cluster instead: the workload\n" +
		"and the client-side faults (scenario 4, and the negative control unless\n" +
		"--store is given) run against it; scenarios that kill, partition or pause\n" +
		"servers run only with --nemesis-exec, a program of yours that does that to\n" +
		"your servers (run as: PROGRAM kill|start|pause|resume|isolate|heal INDEX\n" +
		"API-ADDR; exit status 3 = not supported), and are skipped with a note\n" +
		"otherwise. Use a cluster you can spare: the workload creates locks and\n" +
		"objects named verify-<seed>-*.\n" +
		"With --resource the workload writes to PostgreSQL, MySQL/MariaDB, Redis or an\n" +
		"S3 bucket, fenced by the postgres, mysql, redis and s3 packages, instead of\n" +
		"the object store.\n" +
		"Scenarios: " + strings.Join(names, ", ") + "."
}

// pickScenarios returns the scenarios --scenario names (none: all).
func pickScenarios(scen string, names []string) ([]string, error) {
	var which []string
	if scen == "all" || scen == "" {
		return nil, nil
	}
	for _, n := range strings.Split(scen, ",") {
		n = strings.TrimSpace(n)
		if _, ok := verify.Lookup(n); !ok {
			return nil, usageErr("verify: unknown scenario %q: want one of %s, or all", n, strings.Join(names, ", "))
		}
		which = append(which, n)
	}
	return which, nil
}

// prepareVerify fills in what the flags leave to the run: the binary the
// harness starts (this one), the output directory (out, or a new one), a
// seed from the clock, and the logger; it prints the seed.
func prepareVerify(cfg *verify.Config, out string, stderr io.Writer) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("verify: find own executable: %w", err)
	}
	cfg.Binary = bin
	if out == "" {
		if out, err = os.MkdirTemp("", "fencelock-verify-"); err != nil {
			return err
		}
	}
	cfg.OutDir, _ = filepath.Abs(out)
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano() % 1e9)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fmt.Fprintf(stderr, "fencelock verify: seed %d, %v per scenario, output in %s\n", cfg.Seed, cfg.Duration, cfg.OutDir)
	return nil
}

// checkVerifyTargets sets cfg.Servers from --servers and checks that the
// flags naming the servers, store, nemesis program and resource fit together.
func checkVerifyTargets(cfg *verify.Config, servers string) error {
	for _, s := range strings.Split(servers, ",") {
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
	if cfg.NemesisExec != "" && !cfg.External() {
		return usageErr("verify --nemesis-exec needs --servers (without them the harness faults its own nodes)")
	}
	if cfg.NemesisExec != "" {
		p, err := filepath.Abs(cfg.NemesisExec)
		if err != nil {
			return usageErr("verify --nemesis-exec %q: %v", cfg.NemesisExec, err)
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return usageErr("verify --nemesis-exec %q: want an executable file", cfg.NemesisExec)
		}
		cfg.NemesisExec = p
	}
	if cfg.StoreURL != "" && cfg.Resource != verify.ResourceStore {
		return usageErr("verify: --store and --resource %s: choose one resource", verify.Redact(cfg.Resource))
	}
	return nil
}

// printVerifyTarget says what the run verifies: whose servers, which resource
// and which faults are skipped.
func printVerifyTarget(stderr io.Writer, cfg verify.Config) {
	resource := "a store started by the harness"
	switch {
	case cfg.StoreURL != "":
		resource = cfg.StoreURL
	case cfg.Resource != verify.ResourceStore:
		resource = verify.Redact(cfg.Resource)
	}
	switch {
	case cfg.External() && cfg.NemesisExec != "":
		fmt.Fprintf(stderr, "fencelock verify: against your servers %s and %s; server faults through %s; membership changes (6) are skipped\n",
			strings.Join(cfg.Servers, ","), resource, cfg.NemesisExec)
	case cfg.External():
		fmt.Fprintf(stderr, "fencelock verify: against your servers %s and %s; server-side nemeses (kill, partition, pause, snapshot, membership) are skipped without --nemesis-exec\n",
			strings.Join(cfg.Servers, ","), resource)
	default:
		fmt.Fprintf(stderr, "fencelock verify: resource: %s\n", resource)
	}
}

// runVerifyWorker is a client process of "fencelock verify" (started by it).
func runVerifyWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("verify worker", "verify worker\n\n"+
		"A client process of \"fencelock verify\"; verify starts it. It reads a setup\n"+
		"line (lock service endpoints, resource, operation timeout), then one JSON\n"+
		"operation per line on stdin, and answers one JSON line each on stdout.", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("verify worker takes no arguments (verify sends its setup on stdin), got %q", fs.Args())
	}
	err := verify.RunWorker(ctx, verify.WorkerConfig{
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, os.Stdin, stdout)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// printResults prints the results (the table, or JSON lines with --json)
// and how to find and rerun them (on stderr with --json).
func printResults(stdout, stderr io.Writer, cfg verify.Config, scen string, results []verify.Result, asJSON bool) error {
	notes := stdout
	if asJSON {
		notes = stderr
		enc := json.NewEncoder(stdout)
		for _, r := range results {
			// Durations as every command prints them.
			if err := enc.Encode(struct {
				verify.Result
				Duration string `json:"duration"`
			}{r, r.Duration.String()}); err != nil {
				return err
			}
		}
	} else {
		verify.WriteTable(stdout, results)
	}
	rerun := ""
	if cfg.External() {
		rerun = " --servers " + strings.Join(cfg.Servers, ",")
		if cfg.StoreURL != "" {
			rerun += " --store " + cfg.StoreURL
		}
		if cfg.NemesisExec != "" {
			rerun += " --nemesis-exec " + cfg.NemesisExec
		}
	}
	if cfg.Resource != verify.ResourceStore {
		rerun += " --resource " + verify.Redact(cfg.Resource)
	}
	_, err := fmt.Fprintf(notes, "\nhistories, logs and visualisations: %s\nrerun with: fencelock verify --seed %d --duration %v --scenario %s%s\n",
		cfg.OutDir, cfg.Seed, cfg.Duration, scen, rerun)
	return err
}
