// Command fencebench runs the acquire+release benchmark against fencelock and
// its peers and writes a markdown table.
//
//	bench/peers.sh up /tmp/fb-peers
//	cd bench && go run ./cmd/fencebench --fencelock-bin /tmp/fencelock --peers-dir /tmp/fb-peers --out results.md
//	bench/peers.sh down /tmp/fb-peers
//
// bench/run.sh does all three. Progress goes to stderr.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/bench"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "floor-serve" { // the go-floor system's server: floor-serve ADDR LOG
		serveFloor(os.Args[2], os.Args[3])
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencebench:", err)
		os.Exit(1)
	}
}

func serveFloor(addr, log string) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		err = bench.ServeFloor(ln, log)
	}
	fmt.Fprintln(os.Stderr, "fencebench floor-serve:", err)
	os.Exit(1)
}

type options struct {
	duration, warmup, ttl, redisRetry, pause time.Duration
	clients                                  []int
	locks                                    []bool // OneLock values
	out, systems, peersDir, workDir          string
	cpuProfile                               string
	fencelockBin, fencelockAddr              string
	etcdAddr, redisAOFAddr, redisNoPAddr     string
	smoke, redisTwoStep                      bool
	fsyncN, runs, nodes, hold                int
	holdTTL, holdFor                         time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("fencebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "measured time per cell per system")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured run of the same cell before each measured one (0: none)")
	clients := fs.String("clients", "1,8,64", "comma-separated client counts")
	locks := fs.String("locks", "own,one", "comma-separated: own (each client its own lock), one (all on one lock)")
	fs.StringVar(&o.out, "out", "bench-results.md", "markdown file to write")
	fs.BoolVar(&o.smoke, "smoke", false, "very short run (200 ms per cell, no warm-up, 20 fsyncs) that checks the harness, not the numbers")
	fs.StringVar(&o.systems, "systems", "fencelock,fencelock-perworker,fencelock-tls,go-floor,etcd,redis-aof,redis-nopersist", "systems to run, the first is the one ratios are of; fencelock-perworker is the same server with a client per worker instead of one shared client; fencelock-tls the same with TLS everywhere and a policy (its own nodes); go-floor the floor of a lock service in Go (see bench/floor.go)")
	fs.StringVar(&o.peersDir, "peers-dir", "", "directory given to peers.sh up: reads peers.env (addresses) and *.pid (for server CPU)")
	fs.StringVar(&o.workDir, "work-dir", "", "directory for fencelock's data and the fsync probe (default: a new temporary directory, removed after)")
	fs.StringVar(&o.fencelockBin, "fencelock-bin", "", "fencelock binary to start as 'serve' (go build -o BIN ./cmd/fencelock)")
	fs.StringVar(&o.fencelockAddr, "fencelock-addr", "", "use a running fencelock at this address (comma-separated for a cluster) instead of starting one")
	fs.StringVar(&o.etcdAddr, "etcd", "", "etcd client address (default from --peers-dir)")
	fs.StringVar(&o.redisAOFAddr, "redis-aof", "", "Redis with appendonly yes + appendfsync always (default from --peers-dir)")
	fs.StringVar(&o.redisNoPAddr, "redis-nopersist", "", "Redis without persistence (default from --peers-dir)")
	fs.DurationVar(&o.ttl, "ttl", 10*time.Second, "lease TTL for every system")
	fs.DurationVar(&o.redisRetry, "redis-retry", time.Millisecond, "mean pause of a Redis client that found the lock held before it tries again (jittered ±50%)")
	fs.BoolVar(&o.redisTwoStep, "redis-two-step", false, "Redis acquire as two commands (SET NX PX, then INCR) instead of one Lua script")
	fs.DurationVar(&o.pause, "pause", 200*time.Millisecond, "idle time between two measured runs")
	fs.IntVar(&o.fsyncN, "fsync-samples", 200, "fsyncs for the machine's fsync latency")
	fs.IntVar(&o.hold, "hold", 10000, "locks to hold at once for the renewal cell (fencelock and etcd; 0 skips it)")
	fs.DurationVar(&o.holdTTL, "hold-ttl", 10*time.Second, "lease TTL of the held locks; clients renew at about TTL/3")
	fs.DurationVar(&o.holdFor, "hold-for", 15*time.Second, "measured window of the renewal cell, after every lock is held")
	fs.IntVar(&o.nodes, "nodes", 1, "fencelock nodes to start (1, 3 or 5; one Raft group); run.sh starts as many etcd members")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the load generator's CPU profile (all cells, the clients' side) to this file")
	fs.IntVar(&o.runs, "runs", 3, "measured runs per cell and system; the report gives the median (the runs of a cell take turns between systems)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// host:port, as the metrics scrape and the clients build URLs of them.
	o.fencelockAddr = strings.NewReplacer("http://", "", "https://", "").Replace(o.fencelockAddr)
	if o.smoke {
		o.duration, o.warmup, o.fsyncN, o.pause, o.runs = 200*time.Millisecond, 0, 20, 0, 1
		o.hold, o.holdTTL, o.holdFor = min(o.hold, 100), 2*time.Second, 1500*time.Millisecond
	}
	if o.nodes != 1 && o.nodes != 3 && o.nodes != 5 {
		return o, fmt.Errorf("--nodes: %d; use 1, 3 or 5", o.nodes)
	}
	if o.runs < 1 || o.runs > 100 {
		return o, fmt.Errorf("--runs: %d is not in 1..100", o.runs)
	}
	for _, s := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 4096 {
			return o, fmt.Errorf("--clients: %q is not a count in 1..4096", s)
		}
		o.clients = append(o.clients, n)
	}
	for _, s := range strings.Split(*locks, ",") {
		switch strings.TrimSpace(s) {
		case "own":
			o.locks = append(o.locks, false)
		case "one":
			o.locks = append(o.locks, true)
		default:
			return o, fmt.Errorf("--locks: %q is neither own nor one", s)
		}
	}
	if o.duration <= 0 {
		return o, errors.New("--duration must be positive")
	}
	return o, nil
}

// readPeers reads DIR/peers.env and the pids of DIR/*.pid.
func readPeers(dir string) (addrs map[string]string, pids map[string][]int, err error) {
	addrs, pids = map[string]string{}, map[string][]int{}
	f, err := os.Open(filepath.Join(dir, "peers.env"))
	if err != nil {
		return nil, nil, fmt.Errorf("peers: %w (run bench/peers.sh up %s first)", err, dir)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			addrs[k] = v
		}
	}
	for _, name := range []string{"etcd", "etcd-1", "etcd-2", "etcd-3", "etcd-4", "etcd-5", "redis-aof", "redis-nopersist"} {
		if b, err := os.ReadFile(filepath.Join(dir, name+".pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				system, _, _ := strings.Cut(name, "-") // etcd-2 is a member of etcd
				if strings.HasPrefix(name, "redis") {
					system = name
				}
				pids[system] = append(pids[system], pid)
			}
		}
	}
	return addrs, pids, sc.Err()
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	br := &benchRun{o: o, logf: func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) },
		serverPID: map[string][]int{}, sysAddr: map[string]string{}, sysTLS: map[string]*tls.Config{},
		runID: strconv.FormatInt(time.Now().UnixNano(), 36)}
	pids := map[string][]int{}
	if o.peersDir != "" {
		addrs, p, err := readPeers(o.peersDir)
		if err != nil {
			return err
		}
		pids = p
		br.o.etcdAddr = cmp(o.etcdAddr, addrs["ETCD_ADDR"])
		br.o.redisAOFAddr = cmp(o.redisAOFAddr, addrs["REDIS_AOF_ADDR"])
		br.o.redisNoPAddr = cmp(o.redisNoPAddr, addrs["REDIS_NOPERSIST_ADDR"])
	}
	workDir := o.workDir
	if workDir == "" {
		workDir, err = os.MkdirTemp("", "fencebench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(workDir)
	} else if err := os.MkdirAll(workDir, 0o755); err != nil {
		return err
	}
	br.newReport(args, workDir)
	started := &startedNodes{} // the fencelock nodes this run started, shared by the fencelock systems of a kind
	defer started.stop()
	defer func() {
		for _, t := range br.targets {
			t.Close()
		}
	}()
	if err := br.openTargets(ctx, workDir, started, pids); err != nil {
		return err
	}
	// The renewal cell runs first, on fresh servers: after the matrix a
	// server may be snapshotting the entries the matrix wrote, which would
	// land in the renewal window.
	if err := br.runHolds(ctx); err != nil {
		return err
	}
	if err := br.runMatrix(ctx); err != nil {
		return err
	}
	br.rp.Machine.LoadAfter = bench.LoadAvg()
	if err := br.rp.WriteFile(o.out); err != nil {
		return err
	}
	br.logf("wrote %s", o.out)
	if br.failed {
		return errors.New("some run did no work (or held locks were never renewed), or broke token order or mutual exclusion (see the table)")
	}
	return nil
}

// benchRun is one fencebench run: its systems, what it measured, and
// whether any run failed its checks.
type benchRun struct {
	o         options
	logf      func(format string, a ...any)
	rp        *bench.Report
	targets   []bench.Target
	serverPID map[string][]int // by system: the processes whose CPU is the server's
	sysAddr   map[string]string
	sysTLS    map[string]*tls.Config
	runID     string
	failed    bool
}

// newReport measures the machine and starts the report.
func (br *benchRun) newReport(args []string, workDir string) {
	o := br.o
	br.logf("measuring fsync latency in %s", workDir)
	rp := &bench.Report{
		Command: "fencebench " + strings.Join(args, " "), Started: time.Now(), PerCell: o.duration, Runs: o.runs,
		Machine: bench.DescribeMachine(workDir, o.fsyncN), DataDir: workDir,
	}
	br.logf("machine: %d CPUs, %s, fsync p50 %v p99 %v, load %s", rp.Machine.CPUs, rp.Machine.CPUModel,
		rp.Machine.FsyncP50, rp.Machine.FsyncP99, rp.Machine.LoadBefore)
	rp.Notes = append(rp.Notes, fmt.Sprintf("lease TTL %v everywhere; Redis clients that find the lock held retry after %v ±50%% (Redis has no wait queue); Redis acquire is %s",
		o.ttl, o.redisRetry, map[bool]string{false: "one Lua script (SET NX PX + INCR fence)", true: "two commands (SET NX PX, then INCR fence)"}[o.redisTwoStep]))
	rp.Notes = append(rp.Notes, "etcd: concurrency.Mutex, one session (lease) per client, one shared gRPC connection; token = Mutex.Header().Revision. fencelock: the client package, one shared client; Redis: go-redis, one pool")
	if o.warmup > 0 {
		rp.Notes = append(rp.Notes, fmt.Sprintf("each measured run is preceded by an unmeasured %v run of the same cell", o.warmup))
	}
	br.rp = rp
}

// openTargets opens every system of --systems, starting fencelock nodes
// as needed; pids are the peers' server processes by system.
func (br *benchRun) openTargets(ctx context.Context, workDir string, started *startedNodes, pids map[string][]int) error {
	for _, name := range strings.Split(br.o.systems, ",") {
		name = strings.TrimSpace(name)
		t, n, err := openTarget(ctx, name, br.o, workDir, started, br.rp, br.logf)
		if err != nil {
			return err
		}
		if n != nil {
			br.serverPID[name], br.sysAddr[name], br.sysTLS[name] = n.pids, n.addr, n.conf
		}
		br.targets = append(br.targets, t)
		br.rp.Targets = append(br.rp.Targets, name)
		if p, ok := pids[name]; ok {
			br.serverPID[name] = p
		}
	}
	return nil
}

// runHolds runs the renewal cell on every system that has keep-alives.
func (br *benchRun) runHolds(ctx context.Context) error {
	o := br.o
	if o.hold <= 0 {
		return nil
	}
	for _, t := range br.targets {
		var ht bench.RenewalCounter
		var err error
		switch {
		case bench.IsFencelock(t.Name()):
			ht, err = bench.NewFencelock(t.Name(), br.sysAddr[t.Name()], o.holdTTL, br.sysTLS[t.Name()])
		case t.Name() == "etcd":
			ht, err = bench.NewEtcd(ctx, o.etcdAddr, o.holdTTL)
		default:
			continue // Redis: the recipe has no keep-alive of its own
		}
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name(), err)
		}
		br.logf("%-16s holding %d locks (TTL %v) for %v", t.Name(), o.hold, o.holdTTL, o.holdFor)
		h, err := bench.RunHold(ctx, ht, o.hold, o.holdTTL, o.holdFor, fmt.Sprintf("fencebench/%s/hold/%s", br.runID, t.Name()), br.serverPID[t.Name()]...)
		ht.Close()
		if err != nil {
			return fmt.Errorf("%s, hold: %w", t.Name(), err)
		}
		br.logf("%-16s %d renewals in %v: %.0f/s, server CPU %.2f cores, %v per renewal",
			t.Name(), h.Renewals, h.Elapsed.Round(time.Millisecond), h.RenewalsPerSec(), h.ServerCPU, h.CPUPerRenewal())
		if h.Renewals <= 0 {
			br.failed = true
		}
		br.rp.Holds = append(br.rp.Holds, h)
	}
	return nil
}

// runMatrix runs every cell --runs times, the systems taking turns, and
// adds each system's median to the report.
func (br *benchRun) runMatrix(ctx context.Context) error {
	var cells []bench.Cell
	for _, n := range br.o.clients {
		for _, one := range br.o.locks {
			c := bench.Cell{Clients: n, OneLock: one && n > 1}
			if !containsCell(cells, c) {
				cells = append(cells, c)
			}
		}
	}
	for ci, c := range cells {
		runs := make([][]bench.Result, len(br.targets))
		for run := range br.o.runs {
			for ti, t := range br.targets {
				r, err := br.runOne(ctx, t, c, fmt.Sprintf("fencebench/%s/%d/%d/%s", br.runID, ci, run, t.Name()))
				if err != nil {
					return err
				}
				runs[ti] = append(runs[ti], r)
				br.logf("%-22s %-18s run %d/%d %8.0f pairs/s  p50 %-10v p99 %-10v grants %d..%d  errors %d  tokens-bad %d overlaps %d  cpu gen %.2f srv %.2f",
					c, t.Name(), run+1, br.o.runs, r.PairsPerSec(), r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond),
					r.MinGrants, r.MaxGrants, r.Errors, r.TokenViolations, r.Overlaps, r.GenCPU, r.ServerCPU)
				if r.FirstErr != nil {
					br.logf("  first error: %v", r.FirstErr)
				}
				if !r.OK() {
					br.failed = true
				}
				if br.o.pause > 0 {
					time.Sleep(br.o.pause)
				}
			}
		}
		for ti := range br.targets {
			br.rp.Results = append(br.rp.Results, bench.Median(runs[ti]))
		}
	}
	return nil
}

// runOne runs cell c once on t, after its warm-up.
func (br *benchRun) runOne(ctx context.Context, t bench.Target, c bench.Cell, prefix string) (bench.Result, error) {
	if br.o.warmup > 0 {
		if _, err := bench.RunCell(ctx, t, c, br.o.warmup, prefix+"/warm"); err != nil {
			return bench.Result{}, fmt.Errorf("%s, %s: warm-up: %w", t.Name(), c, err)
		}
	}
	if ctx.Err() != nil {
		return bench.Result{}, ctx.Err()
	}
	r, err := bench.RunCell(ctx, t, c, br.o.duration, prefix, br.serverPID[t.Name()]...)
	if err != nil {
		return bench.Result{}, fmt.Errorf("%s, %s: %w", t.Name(), c, err)
	}
	return r, nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func containsCell(cs []bench.Cell, c bench.Cell) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// nodes is a set of fencelock nodes the fencelock systems of one kind
// (plain, or TLS) share.
type nodes struct {
	addr string
	pids []int
	conf *tls.Config
	srvs []*bench.Server
}

// startedNodes holds the plain and the TLS nodes, started on first use,
// and the floor's server.
type startedNodes struct {
	plain, tls *nodes
	floor      *bench.FloorServer
}

func (s *startedNodes) stop() {
	if s.floor != nil {
		s.floor.Stop()
	}
	for _, n := range []*nodes{s.plain, s.tls} {
		if n != nil {
			for _, srv := range n.srvs {
				srv.Stop()
			}
		}
	}
}

// get returns the nodes of a kind, starting them (or, for plain, using
// --fencelock-addr) the first time.
func (s *startedNodes) get(ctx context.Context, o options, workDir string, tlsRun bool, rp *bench.Report, logf func(string, ...any)) (*nodes, error) {
	slot := &s.plain
	if tlsRun {
		slot = &s.tls
	}
	if *slot != nil {
		return *slot, nil
	}
	if !tlsRun && o.fencelockAddr != "" {
		*slot = &nodes{addr: o.fencelockAddr}
		return *slot, nil
	}
	if o.fencelockBin == "" {
		return nil, errors.New("fencelock: give --fencelock-bin (go build -o BIN ./cmd/fencelock) or --fencelock-addr")
	}
	n := &nodes{}
	var tf *bench.TLSFiles
	dir := filepath.Join(workDir, "fencelock")
	if tlsRun {
		dir = filepath.Join(workDir, "fencelock-tls")
		f, err := bench.MakeTLS(o.fencelockBin, filepath.Join(workDir, "tls"))
		if err != nil {
			return nil, err
		}
		if n.conf, err = f.Client(); err != nil {
			return nil, err
		}
		tf = &f
		rp.Notes = append(rp.Notes, "fencelock-tls: the same server with HTTPS and client certificates on the API, mutual TLS on Raft and a policy every call checks (TLS 1.3 between nodes; one shared client)")
	}
	logf("starting %d × %s serve (TLS: %v)", o.nodes, o.fencelockBin, tlsRun)
	srvs, err := bench.StartServers(ctx, o.fencelockBin, dir, o.nodes, tf)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, srv := range srvs {
		addrs = append(addrs, srv.Addr)
		n.pids = append(n.pids, srv.PID())
	}
	n.addr, n.srvs = strings.Join(addrs, ","), srvs
	if !tlsRun && o.nodes == 1 {
		rp.Notes = append(rp.Notes, "fencelock: one node, `fencelock serve` as built from this tree, Raft log fsync on (the default), `--procs 1` (Go code on one thread, as Redis runs commands on one)")
	} else if !tlsRun {
		rp.Notes = append(rp.Notes, fmt.Sprintf("fencelock: %d nodes (one Raft group) on this machine, `fencelock serve` as built from this tree, fsync on, `--procs 1` each; the client is given every node; server CPU is all nodes together", o.nodes))
	}
	*slot = n
	return n, nil
}

// openTarget opens the benchmark target of system name; for a fencelock
// system it also returns the nodes it runs on.
func openTarget(ctx context.Context, name string, o options, workDir string, started *startedNodes, rp *bench.Report, logf func(string, ...any)) (bench.Target, *nodes, error) {
	var t bench.Target
	var err error
	switch {
	case bench.IsFencelock(name):
		n, nerr := started.get(ctx, o, workDir, name == bench.FencelockTLSSystem, rp, logf)
		if nerr != nil {
			return nil, nil, nerr
		}
		t, err = bench.NewFencelock(name, n.addr, o.ttl, n.conf)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		return t, n, nil
	case name == bench.FloorSystem:
		return openFloor(started, workDir, o, rp)
	case name == "etcd":
		if o.etcdAddr == "" {
			return nil, nil, errors.New("etcd: give --etcd or --peers-dir")
		}
		t, err = bench.NewEtcd(ctx, o.etcdAddr, o.ttl)
		if n := len(strings.Split(o.etcdAddr, ",")); n > 1 {
			rp.Notes = append(rp.Notes, fmt.Sprintf("etcd: %d members (one cluster) on this machine, the client given every member; server CPU is all members together", n))
		}
	case name == "redis-aof" || name == "redis-nopersist":
		addr := o.redisAOFAddr
		if name == "redis-nopersist" {
			addr = o.redisNoPAddr
		}
		if addr == "" {
			return nil, nil, fmt.Errorf("%s: give --%s or --peers-dir", name, name)
		}
		maxClients := 0
		for _, c := range o.clients {
			maxClients = max(maxClients, c)
		}
		t, err = bench.NewRedis(ctx, name, addr, o.ttl, o.redisRetry, maxClients+8, o.redisTwoStep)
		if o.nodes > 1 && name == "redis-aof" {
			rp.Notes = append(rp.Notes, "Redis stays one server: its replication is asynchronous, so there is no replicated Redis setup with the same durability to compare")
		}
	default:
		return nil, nil, fmt.Errorf("--systems: unknown system %q", name)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil, nil
}

// openFloor starts the floor's server (this program, floor-serve) and
// returns its Target and process.
func openFloor(started *startedNodes, workDir string, o options, rp *bench.Report) (bench.Target, *nodes, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	srv, err := bench.StartFloor(bin, filepath.Join(workDir, "floor"))
	if err != nil {
		return nil, nil, err
	}
	started.floor = srv
	rp.Notes = append(rp.Notes, "go-floor: not a lock service but the floor of one written in Go: a lock table in memory, every change written to a log with one fdatasync per batch (as fencelock's node), a WebSocket per client, on one thread; no consensus, leases, queue, protobuf or authentication; a client that finds the lock held retries as Redis's does")
	return bench.NewFloor(srv.Addr, o.redisRetry), &nodes{addr: srv.Addr, pids: []int{srv.PID()}}, nil
}
