package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
)

// Config configures a verification run.
type Config struct {
	Binary    string        // the fencelock executable (it must have "serve", "store" and "verify worker")
	OutDir    string        // where histories, logs and visualisations go (one subdirectory per scenario)
	Duration  time.Duration // workload time per scenario
	Seed      uint64        // 0: derived from the clock (and printed)
	Nodes     int           // 0: each scenario's default
	Clients   int           // worker processes of the lock-set workload (the hold pair adds two)
	Locks     int           // distinct locks (and objects)
	TTL       time.Duration // lease TTL of the workload's grants
	OpTimeout time.Duration // per operation, in the worker
	Logger    *slog.Logger  // progress
	// Servers, when set, are the API addresses of an existing lock service
	// to verify instead of starting nodes: only the workload and the
	// client-side faults run (scenario 4 and, with the harness's own store,
	// the negative control); scenarios whose nemesis needs to kill,
	// partition or pause the servers are skipped with a note.
	Servers []string
	// NemesisExec, with Servers, is an executable that injects server
	// faults into the existing deployment, so that the server-fault
	// scenarios run there too (see nemesisexec.go for its protocol:
	// NemesisExec ACTION NODE-INDEX API-ADDR). Without it they are skipped.
	NemesisExec string
	// StoreURL, when set, is an existing fenced store to use instead of
	// starting one.
	StoreURL string
	// Resource is the fenced resource the workload writes: "" or
	// ResourceStore for the fenced object store (StoreURL, or one the
	// harness starts), or a spec handed to the workers' OpenFunc: for
	// "fencelock verify worker" (OpenResource) a postgres://, mysql://,
	// redis:// or s3:// URL. Its state outlives the run; the workload uses fresh domain
	// names each run.
	Resource string
	// Worker is the command that starts a worker process, with its leading
	// arguments; nil means Binary "verify" "worker". A program that
	// verifies its own Resource starts itself here and calls RunWorker
	// with its OpenFunc.
	Worker []string
	// TLS runs the harness's own nodes with HTTPS and client certificates
	// on the API and mutual TLS on Raft (a development CA made in the run's
	// directory); workers and the harness connect with a client
	// certificate. It does not apply to an existing deployment.
	TLS bool
}

// ResourceStore names the fenced object store in Config.Resource.
const ResourceStore = "store"

// External reports whether c verifies an existing deployment.
func (c Config) External() bool { return len(c.Servers) > 0 }

// storeResource reports whether the workload writes to the object store.
func (c Config) storeResource() bool { return c.Resource == "" || c.Resource == ResourceStore }

// workerCommand is the command line of a worker process.
func (c Config) workerCommand() []string {
	if len(c.Worker) > 0 {
		return c.Worker
	}
	return []string{c.Binary, "verify", "worker"}
}

// DefaultConfig returns the short-mode settings used by the tests and CI.
func DefaultConfig() Config {
	return Config{Duration: 12 * time.Second, Clients: 3, Locks: 2, TTL: time.Second,
		OpTimeout: 1500 * time.Millisecond, Logger: slog.Default()}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.Binary == "" || c.OutDir == "" {
		return errors.New("verify config: binary and output dir are required")
	}
	if c.StoreURL != "" && !c.storeResource() {
		return fmt.Errorf("verify config: a store URL (%s) and another resource (%s) given: choose one", c.StoreURL, Redact(c.Resource))
	}
	if c.NemesisExec != "" && !c.External() {
		return errors.New("verify config: a nemesis executable is for an existing deployment (Servers); without it the harness injects faults into its own nodes")
	}
	if len(c.Worker) == 0 && !builtinResource(c.Resource) {
		return fmt.Errorf("verify config: resource %q: want %s, a postgres://, mysql://, redis:// or s3:// URL, or your own worker command (Config.Worker) that opens it", Redact(c.Resource), ResourceStore)
	}
	if c.Duration < 2*time.Second || c.Clients < 1 || c.Locks < 1 || c.TTL < time.Second || c.OpTimeout <= 0 {
		return fmt.Errorf("verify config: want duration >= 2s, clients and locks >= 1, ttl >= 1s, op timeout > 0 (got %v, %d, %d, %v, %v)",
			c.Duration, c.Clients, c.Locks, c.TTL, c.OpTimeout)
	}
	return nil
}

// Result is the outcome of one scenario.
type Result struct {
	Scenario      string        `json:"scenario"`
	Resource      string        `json:"resource"` // the fenced resource (password redacted)
	Seed          uint64        `json:"seed"`
	Nodes         int           `json:"nodes"`
	Duration      time.Duration `json:"duration"`
	Ops           int           `json:"ops"` // completed client operations
	OK            int           `json:"ok"`
	Fail          int           `json:"fail"`
	Info          int           `json:"info"`
	Grants        int           `json:"grants"`
	Faults        int           `json:"faults"`         // faults the nemesis injected
	LeaderChanges int           `json:"leader_changes"` // new leaders observed
	Snapshots     int           `json:"snapshots"`      // snapshot index advances observed
	// LocalRestores and InstalledSnapshots count snapshot restores on the
	// nodes: a node restarting from its own snapshot, and a follower that
	// the leader brought up to date with InstallSnapshot. From the nodes'
	// logs when the harness runs them; from their /metrics (polled, so a
	// lower bound) on an existing deployment.
	LocalRestores      int `json:"local_restores"`
	InstalledSnapshots int `json:"installed_snapshots"`
	LeasesLost         int `json:"leases_lost"`    // renews/releases refused: the grant had ended
	StaleRejected      int `json:"stale_rejected"` // writes and fence raises refused for a stale token
	MemberChanges      int `json:"member_changes"` // completed membership changes (removals, re-joins)
	Restores           int `json:"restores"`       // backups restored into a wiped node (scenario 7)
	RestoreFailures    int `json:"restore_failures,omitempty"`
	Refusals           int `json:"refusals"` // removals refused because they would break quorum (expected)
	// Handovers counts the lease hand-overs the lease checker checked;
	// HandoversLost those after a lease that ended other than by Release.
	Handovers     int     `json:"handovers"`
	HandoversLost int     `json:"handovers_lost"`
	Checks        []Check `json:"checks"`
	// Skipped says why the scenario did not run (against an existing
	// deployment, a nemesis that needs the harness's own processes).
	Skipped string `json:"skipped,omitempty"`
	Bit     Check  `json:"faults_bit"` // did the faults really bite
	// Expected is "valid", or "violation" for a negative control.
	Expected string `json:"expected"`
	Pass     bool   `json:"pass"`
	Verdict  string `json:"verdict"`
	Dir      string `json:"dir"`
}

// env is what a running scenario's workload and nemesis share.
type env struct {
	cfg   Config
	sc    Scenario
	dir   string
	h     *History
	cl    *cluster
	store *storeProc
	// resource is the spec the workers open: the store's URL, or
	// Config.Resource.
	resource string
	prefix   string // of lock names and store objects
	rng      *rand.Rand
	rngMu    sync.Mutex
	faults   atomic.Int64
	// members counts completed membership changes (a removal, a re-join);
	// refusals counts removals the service refused to protect its quorum.
	members  atomic.Int64
	refusals atomic.Int64
	restores atomic.Int64
	// restoreFailures counts restores that failed: the node then started
	// empty, a new cluster in epoch 0, which proves nothing.
	restoreFailures atomic.Int64
	// rewinds are the history times at which the node was killed to be
	// restored from a backup (LeaseOptions.Rewinds).
	rewinds   []time.Duration
	rewindsMu sync.Mutex
	log       *slog.Logger
	tls       *tlsRun // Config.TLS; nil: plain
	workLog   io.Writer
	// admin asks nodes for their status (status).
	admin     *client.Client
	adminOnce sync.Once
}

func (e *env) intn(n int) int {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.IntN(n)
}

// between returns a duration in [lo, hi), drawn from the run's seed.
func (e *env) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(e.intn(int(hi-lo)))
}

// rewound records that the service is being put back to a backup now.
func (e *env) rewound() {
	e.rewindsMu.Lock()
	defer e.rewindsMu.Unlock()
	e.rewinds = append(e.rewinds, e.h.Now())
}

// nemesis records a fault event.
func (e *env) nemesis(details string) {
	e.h.Add(Op{Process: NemesisProcess, Type: Info, F: FNemesis, Details: details})
	e.log.Info("nemesis", "scenario", e.sc.Name, "t", e.h.Now().Round(10*time.Millisecond), "fault", details)
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Run runs the named scenarios (all of Scenarios() if names is empty) one
// after the other and returns their results. An error means the harness
// itself could not run (a process did not start), not a violation.
func Run(ctx context.Context, cfg Config, names ...string) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	var todo []Scenario
	if len(names) == 0 {
		todo = Scenarios()
	}
	for _, n := range names {
		sc, ok := Lookup(n)
		if !ok {
			return nil, fmt.Errorf("verify: unknown scenario %q", n)
		}
		todo = append(todo, sc)
	}
	var out []Result
	for i, sc := range todo {
		r, err := runScenario(ctx, cfg, sc, cfg.Seed+uint64(i))
		if err != nil {
			return out, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		out = append(out, r)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	return out, nil
}

// skipReason says why sc cannot run with cfg ("" if it can).
func skipReason(cfg Config, sc Scenario) string {
	if !cfg.External() || sc.nemesis == nil {
		return ""
	}
	switch {
	case len(sc.hook) == 0:
		return "its nemesis wipes servers' data dirs and re-joins them, which the nemesis hook does not cover: it needs the harness's own nodes"
	case cfg.NemesisExec == "":
		return "its nemesis kills, partitions or pauses the lock servers: give --nemesis-exec (Config.NemesisExec) to let the harness do that to your servers"
	case len(cfg.Servers) < sc.MinNodes:
		return fmt.Sprintf("it needs at least %d servers, got %d", sc.MinNodes, len(cfg.Servers))
	}
	return ""
}

func skipped(cfg Config, sc Scenario, seed uint64, nodes int, why string) Result {
	cfg.Logger.Warn("scenario skipped against an existing deployment", "scenario", sc.Name, "why", why)
	return Result{Scenario: sc.Name, Resource: resourceName(cfg), Seed: seed, Nodes: nodes, Expected: "skipped", Skipped: why, Pass: true,
		Verdict: "SKIPPED: " + why}
}

// resourceName is the resource of cfg, printable.
func resourceName(cfg Config) string {
	if cfg.storeResource() {
		return ResourceStore
	}
	return Redact(cfg.Resource)
}

// openCluster starts the run's nodes (with TLS if asked), or reaches the
// existing deployment and its nemesis hook. A hook that cannot do what the
// scenario needs makes skip the reason; closeHook closes the hook's log.
func (e *env) openCluster(ctx context.Context, nodes int) (cl *cluster, skip string, closeHook func(), err error) {
	cfg, sc := e.cfg, e.sc
	closeHook = func() {}
	if !cfg.External() {
		if cfg.TLS {
			if e.tls, err = newTLSRun(e.dir); err != nil {
				return nil, "", closeHook, err
			}
		}
		cl, err = startCluster(ctx, cfg.Binary, e.dir, nodes, sc.ServerFlags, e.tls)
		return cl, "", closeHook, err
	}
	var h *hook
	if cfg.NemesisExec != "" {
		hl, err := os.Create(filepath.Join(e.dir, "nemesis-exec.log"))
		if err != nil {
			return nil, "", closeHook, err
		}
		closeHook = func() { hl.Close() }
		h = &hook{path: cfg.NemesisExec, log: hl}
	}
	cl = externalCluster(cfg.Servers, h)
	if h != nil && sc.nemesis != nil {
		// Does the hook do what this nemesis needs? And begin whole.
		err := cl.probe(ctx, sc.hook)
		if errors.Is(err, errUnsupported) {
			return cl, "the nemesis hook does not support " + strings.Join(sc.hook, ", ") + ": " + err.Error(), closeHook, nil
		}
		if err != nil {
			return nil, "", closeHook, err
		}
	}
	return cl, "", closeHook, nil
}

func runScenario(ctx context.Context, cfg Config, sc Scenario, seed uint64) (Result, error) {
	nodes := sc.Nodes
	if cfg.Nodes > 0 {
		nodes = max(cfg.Nodes, sc.MinNodes)
	}
	if cfg.External() {
		nodes = len(cfg.Servers)
	}
	if why := skipReason(cfg, sc); why != "" {
		return skipped(cfg, sc, seed, nodes, why), nil
	}
	dir := filepath.Join(cfg.OutDir, sc.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, err
	}
	log := cfg.Logger
	log.Info("scenario starting", "scenario", sc.Name, "seed", seed, "nodes", nodes, "duration", cfg.Duration, "dir", dir)
	e := &env{cfg: cfg, sc: sc, dir: dir, h: NewHistory(), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), log: log,
		prefix: "verify-"}
	if cfg.External() || !cfg.storeResource() || cfg.StoreURL != "" {
		// An existing deployment, store or database keeps its locks, fences
		// and objects across runs: fresh names make this run's history the
		// whole story.
		e.prefix = fmt.Sprintf("verify-%d-%d-", seed, time.Now().UnixNano()%1e6)
	}
	defer func() {
		if e.admin != nil {
			e.admin.Close()
		}
	}()
	wl, err := os.Create(filepath.Join(dir, "workers.log"))
	if err != nil {
		return Result{}, err
	}
	defer wl.Close()
	e.workLog = &lockedWriter{w: wl}

	cl, skip, closeHook, err := e.openCluster(ctx, nodes)
	if err != nil {
		return Result{}, err
	}
	defer closeHook()
	if skip != "" {
		return skipped(cfg, sc, seed, nodes, skip), nil
	}
	defer cl.close()
	e.cl = cl
	st := &storeProc{url: cfg.StoreURL}
	if cfg.storeResource() && cfg.StoreURL == "" {
		if st, err = startStore(ctx, cfg.Binary, dir); err != nil {
			return Result{}, err
		}
	}
	defer st.close()
	e.store = st
	e.resource = cfg.Resource
	if cfg.storeResource() {
		e.resource = st.url
	}

	start := time.Now()
	obs := &observer{}
	defer obs.close()
	if err := e.play(ctx, obs); err != nil {
		return Result{}, err
	}
	obs.poll(ctx, e) // a last look: snapshot indexes after healing
	elapsed := time.Since(start)

	r, err := e.judgeRun(nodes, seed, elapsed, obs)
	if err != nil {
		return Result{}, err
	}
	log.Info("scenario done", "scenario", sc.Name, "verdict", r.Verdict, "ops", r.Ops, "elapsed", r.Duration)
	return r, nil
}

// play runs the workload (the client slots and the hold pair), the
// nemesis and the observer for the run's duration, then heals every
// fault, restarts what is down and reads the final objects.
func (e *env) play(ctx context.Context, obs *observer) error {
	runCtx, cancel := context.WithTimeout(ctx, e.cfg.Duration)
	defer cancel()
	obs.poll(ctx, e) // the state before any fault
	var wg sync.WaitGroup
	wg.Go(func() { obs.run(runCtx, e) })
	wg.Go(func() { e.sc.Nemesis(runCtx, e) })
	var workErr error
	var errMu sync.Mutex
	for p := 0; p < e.cfg.Clients+holdPair; p++ {
		run := runClient
		if p >= e.cfg.Clients {
			run = runHolder
		}
		wg.Go(func() {
			if err := run(runCtx, e, p); err != nil {
				errMu.Lock()
				workErr = errors.Join(workErr, err)
				errMu.Unlock()
			}
		})
	}
	wg.Wait()
	if workErr != nil {
		return workErr
	}
	// Heal everything, then read the final objects.
	if err := e.cl.heal(); err != nil {
		return fmt.Errorf("heal after the run: %w", err)
	}
	for _, nd := range e.cl.nodes {
		if !nd.running() {
			if err := nd.start(ctx); err != nil {
				return err
			}
		}
	}
	return finalReads(ctx, e)
}

// judgeRun writes the history, runs the checkers on it and returns the
// run's Result, also written to result.json.
func (e *env) judgeRun(nodes int, seed uint64, elapsed time.Duration, obs *observer) (Result, error) {
	cfg, sc, dir, cl := e.cfg, e.sc, e.dir, e.cl
	ops := e.h.Ops()
	if err := WriteFile(filepath.Join(dir, "history.jsonl"), ops); err != nil {
		return Result{}, err
	}
	r := Result{Scenario: sc.Name, Resource: resourceName(cfg), Seed: seed, Nodes: nodes, Duration: elapsed.Round(100 * time.Millisecond), Dir: dir,
		Faults: int(e.faults.Load()), MemberChanges: int(e.members.Load()), Refusals: int(e.refusals.Load()), Restores: int(e.restores.Load()),
		RestoreFailures: int(e.restoreFailures.Load()), LeaderChanges: obs.leaderChanges(), Snapshots: obs.snapshots, Expected: "valid"}
	if cl.external() {
		r.LocalRestores, r.InstalledSnapshots = obs.restores()
	} else {
		r.LocalRestores, r.InstalledSnapshots = cl.restoresFromLogs()
	}
	countOps(ops, &r)
	e.rewindsMu.Lock()
	lease, st := checkLeases(ops, LeaseOptions{Context: !sc.pausesClients(), Rewinds: e.rewinds})
	e.rewindsMu.Unlock()
	r.Handovers, r.HandoversLost = st.checked, st.lost
	r.Checks = []Check{CheckTokens(ops), CheckStore(ops), lease}
	if !sc.rewinds {
		r.Checks = slices.Insert(r.Checks, 1, CheckLinearizable(ops, 60*time.Second, filepath.Join(dir, "linearizability.html")))
	}
	r.Bit = sc.Bit(r)
	judge(&r, sc)
	b, _ := json.MarshalIndent(r, "", "  ")
	_ = os.WriteFile(filepath.Join(dir, "result.json"), append(b, '\n'), 0o644)
	return r, nil
}

func countOps(ops []Op, r *Result) {
	for _, p := range Pairs(ops) {
		r.Ops++
		switch p.Result() {
		case OK:
			r.OK++
			if p.Invoke.F == FAcquire {
				r.Grants++
			}
		case Fail:
			r.Fail++
			switch p.Invoke.F {
			case FRenew, FRelease:
				if p.Complete.Code != "" {
					r.LeasesLost++
				}
			case FWrite, FFence:
				r.StaleRejected++
			}
		default:
			r.Info++
		}
	}
}

// judge sets Pass and Verdict. A normal scenario passes when every checker
// is valid and the faults bit; a negative control passes when the store
// checker found the violation it must find.
func judge(r *Result, sc Scenario) {
	valid := true
	for _, c := range r.Checks {
		valid = valid && c.Valid
	}
	if sc.Caught != "" {
		r.Expected = "violation"
		detected := false
		for _, c := range r.Checks {
			detected = detected || (c.Name == sc.Caught && !c.Valid)
		}
		r.Pass = detected && r.Bit.Valid
		switch {
		case !r.Bit.Valid:
			r.Verdict = "FAIL: the faults did not bite"
		case detected:
			r.Verdict = "PASS: violation detected (expected)"
		default:
			r.Verdict = "FAIL: violation NOT detected"
		}
		return
	}
	r.Pass = valid && r.Bit.Valid
	switch {
	case !valid:
		r.Verdict = "FAIL: violation"
	case !r.Bit.Valid:
		r.Verdict = "FAIL: the faults did not bite"
	default:
		r.Verdict = "PASS"
		for _, c := range r.Checks {
			if c.Unknown {
				r.Verdict = "PASS (linearizability unknown: timed out)"
			}
		}
	}
}

// finalReads reads every object once more after the run, retrying for a
// while, and records them as FFinal events.
func finalReads(ctx context.Context, e *env) error {
	w, err := startWorker(e, 1000)
	if err != nil {
		return err
	}
	defer w.close()
	for l := 0; l <= e.holdLock(); l++ {
		lock := e.lockName(l)
		var last error
		for try := 0; try < 10 && ctx.Err() == nil; try++ {
			r, err := w.call(request{F: FFinal, Lock: lock}, e.cfg.OpTimeout+2*time.Second)
			if err == nil && r.Type == OK {
				e.h.Add(Op{Process: -2, Type: OK, F: FFinal, Lock: lock, Value: r.Value, ETag: r.ETag})
				last = nil
				break
			}
			last = fmt.Errorf("final read of %s: %v %s", lock, err, r.Error)
			time.Sleep(200 * time.Millisecond)
		}
		if last != nil {
			return last
		}
	}
	return nil
}

func (e *env) lockName(i int) string { return fmt.Sprintf("%s%d", e.prefix, i) }

// observer polls every node's status to count leader changes and
// snapshots, and on an existing deployment also its /metrics, for the
// snapshot restores.
type observer struct {
	mu        sync.Mutex
	terms     map[uint64]bool // terms in which a leader was seen
	snapIdx   map[string]uint64
	snapshots int
	// restored holds, per node and process (start time), the highest
	// fencelock_snapshot_restores_total seen (local, leader) and, for a
	// process that was running before the scenario began, its counts at
	// the first poll, which belong to earlier scenarios.
	restored map[string]map[string]*restoreCounts
	polled   bool // the first poll is done
	c        *client.Client
}

type restoreCounts struct{ base, seen [2]float64 }

func (o *observer) run(ctx context.Context, e *env) {
	for sleep(ctx, 200*time.Millisecond) {
		o.poll(ctx, e)
	}
}

func (o *observer) poll(ctx context.Context, e *env) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.c == nil {
		cfg := client.DefaultConfig(e.cl.endpoints()...)
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.TLS = e.tls.clientTLS()
		c, err := client.NewFromConfig(cfg)
		if err != nil {
			return
		}
		o.c = c
		o.terms = map[uint64]bool{}
		o.snapIdx = map[string]uint64{}
		o.restored = map[string]map[string]*restoreCounts{}
	}
	for _, nd := range e.cl.nodes {
		if !nd.running() {
			continue
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 300*time.Millisecond)
		st, err := admin.New(o.c, "").Status(sctx, nd.addr)
		cancel()
		if err != nil {
			continue
		}
		if st.State == "leader" || st.LeaderID == st.ID && st.ID != "" {
			o.terms[st.Term] = true
		}
		if st.LastSnapshotIndex > o.snapIdx[nd.id] {
			if o.polled { // not a snapshot taken before the scenario
				o.snapshots++
			}
			o.snapIdx[nd.id] = st.LastSnapshotIndex
		}
		if nd.external {
			o.scrapeRestores(ctx, nd)
		}
	}
	o.polled = true
}

// scrapeRestores reads a node's snapshot restore counters. They start at
// 0 in every process, so they are kept per process start time.
func (o *observer) scrapeRestores(ctx context.Context, nd *node) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, "http://"+nd.addr+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return
	}
	m := parseMetrics(b)
	now := [2]float64{m[`fencelock_snapshot_restores_total{source="local"}`], m[`fencelock_snapshot_restores_total{source="leader"}`]}
	start := strconv.FormatFloat(m["process_start_time_seconds"], 'f', -1, 64)
	if o.restored[nd.id] == nil {
		o.restored[nd.id] = map[string]*restoreCounts{}
	}
	v := o.restored[nd.id][start]
	if v == nil {
		v = &restoreCounts{}
		if !o.polled {
			v.base = now // running before this scenario
		}
		o.restored[nd.id][start] = v
	}
	v.seen = [2]float64{max(v.seen[0], now[0]), max(v.seen[1], now[1])}
}

// parseMetrics reads Prometheus text exposition: series (name with
// labels, as written) to value.
func parseMetrics(b []byte) map[string]float64 {
	m := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// restores sums the restore counters over every node and process seen.
func (o *observer) restores() (local, installed int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, procs := range o.restored {
		for _, v := range procs {
			local += int(v.seen[0] - v.base[0])
			installed += int(v.seen[1] - v.base[1])
		}
	}
	return local, installed
}

func (o *observer) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.c != nil {
		o.c.Close()
	}
}

func (o *observer) leaderChanges() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return max(len(o.terms)-1, 0)
}

// status asks node i for its status.
func (e *env) status(ctx context.Context, i int) (fencelock.NodeStatus, bool) {
	e.adminOnce.Do(func() {
		cfg := client.DefaultConfig(e.cl.endpoints()...)
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.TLS = e.tls.clientTLS()
		e.admin, _ = client.NewFromConfig(cfg)
	})
	if e.admin == nil {
		return fencelock.NodeStatus{}, false
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	st, err := admin.New(e.admin, "").Status(sctx, e.cl.nodes[i].addr)
	return st, err == nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
