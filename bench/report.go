package bench

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Machine describes where a run happened.
type Machine struct {
	CPUs       int
	CPUModel   string
	LoadBefore string // /proc/loadavg at the start
	LoadAfter  string
	FsyncP50   time.Duration // 4 KiB write + fsync in the data directory's file system
	FsyncP99   time.Duration
	GoVersion  string
}

// DescribeMachine reads the CPU count and model and measures fsync latency
// with n writes of 4 KiB, each followed by fsync, in a file under dir.
func DescribeMachine(dir string, n int) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadBefore: LoadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	m.FsyncP50, m.FsyncP99 = fsyncLatency(dir, n)
	return m
}

// LoadAvg returns the 1, 5 and 15 minute load averages.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func fsyncLatency(dir string, n int) (p50, p99 time.Duration) {
	f, err := os.CreateTemp(dir, "fsync-*")
	if err != nil || n <= 0 {
		return 0, 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var d []time.Duration
	for range n {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, 0
		}
		if err := f.Sync(); err != nil {
			return 0, 0
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	return d[len(d)/2], d[min(len(d)-1, len(d)*99/100)]
}

// Report is one run's results, in the order they were measured.
type Report struct {
	Command string
	Started time.Time
	PerCell time.Duration
	Runs    int // measured runs per cell and system; results are their median
	Machine Machine
	Targets []string // column order; the first is the one the ratios are of
	Results []Result
	Holds   []HoldResult // the renewal cell
	Notes   []string
	DataDir string
}

func (rp *Report) find(target string, c Cell) (Result, bool) {
	for _, r := range rp.Results {
		if r.Target == target && r.Cell == c {
			return r, true
		}
	}
	return Result{}, false
}

func (rp *Report) cells() []Cell {
	var cs []Cell
	for _, r := range rp.Results {
		if !slices.Contains(cs, r.Cell) {
			cs = append(cs, r.Cell)
		}
	}
	return cs
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func fairness(r Result) string {
	if !r.Cell.OneLock || r.Cell.Clients == 1 {
		return "–"
	}
	f := r.Fairness()
	if math.IsInf(f, 1) {
		return fmt.Sprintf("∞ (%d/%d)", r.MaxGrants, r.MinGrants)
	}
	return fmt.Sprintf("%.2f (%d/%d)", f, r.MaxGrants, r.MinGrants)
}

func tokens(r Result) string {
	switch {
	case r.TokenViolations == 0 && r.Overlaps == 0:
		return "ok"
	default:
		return fmt.Sprintf("**FAIL**: %d out of order, %d overlaps", r.TokenViolations, r.Overlaps)
	}
}

func syncsPerPair(r Result) string {
	if r.Syncs < 0 || r.Pairs == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(r.Syncs)/float64(r.Pairs))
}

func cpu(c float64) string {
	if c < 0 {
		return "?"
	}
	return fmt.Sprintf("%.2f", c)
}

// WriteMarkdown writes the report as markdown: the run, the machine, a
// summary of pairs/s with the ratio of the first target to each other one,
// and the full detail per cell.
func (rp *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	rp.writeHeader(&b)
	rp.writeSummary(&b)
	rp.writeDetail(&b)
	rp.writeRenewals(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHeader writes the run and the machine.
func (rp *Report) writeHeader(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	m := rp.Machine
	p("# fencelock benchmark: acquire+release against its peers\n\n")
	p("- command: `%s`\n", rp.Command)
	if rp.Runs > 1 {
		p("- started: %s; %v per cell per system; **median of %d runs** (the runs of a cell take turns between systems; every run's pairs/s is in the detail table)\n",
			rp.Started.UTC().Format(time.RFC3339), rp.PerCell, rp.Runs)
	} else {
		p("- started: %s; %v per cell per system; one run (not a median)\n", rp.Started.UTC().Format(time.RFC3339), rp.PerCell)
	}
	p("- machine: %d CPUs, %s; %s\n", m.CPUs, m.CPUModel, m.GoVersion)
	p("- fsync (4 KiB write + fsync, %s): p50 %s, p99 %s\n", rp.DataDir, ms(m.FsyncP50), ms(m.FsyncP99))
	p("- load average (1/5/15 min) before: %s, after: %s — the load generator and all servers share these CPUs, and other work may run on the machine\n", m.LoadBefore, m.LoadAfter)
	for _, n := range rp.Notes {
		p("- %s\n", n)
	}
}

// writeSummary writes the pairs/s table with the ratio of the first target
// to each other one.
func (rp *Report) writeSummary(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	first := rp.Targets[0]
	p("\n## Pairs/s and the ratio %s / peer\n\n", first)
	p("| cell | %s |", first)
	for _, t := range rp.Targets[1:] {
		p(" %s | ratio |", t)
	}
	p("\n|---|---:|")
	for range rp.Targets[1:] {
		p("---:|---:|")
	}
	p("\n")
	for _, c := range rp.cells() {
		base, ok := rp.find(first, c)
		p("| %s | ", c)
		if ok {
			p("%.0f |", base.PairsPerSec())
		} else {
			p("– |")
		}
		for _, t := range rp.Targets[1:] {
			r, rok := rp.find(t, c)
			switch {
			case !rok:
				p(" – | – |")
			case !ok || r.PairsPerSec() == 0:
				p(" %.0f | – |", r.PairsPerSec())
			default:
				p(" %.0f | %.2f× |", r.PairsPerSec(), base.PairsPerSec()/r.PairsPerSec())
			}
		}
		p("\n")
	}
}

// writeDetail writes every figure of every cell and system.
func (rp *Report) writeDetail(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("\n## Detail\n\n")
	p("Acquire latency is from the call to the grant, so in one-lock cells it includes the wait in line. ")
	p("Fairness is max/min grants per client (one-lock cells). Tokens: every grant's token was above the previous grant's on the same lock, and no grant overlapped another. ")
	p("CPU is cores used on average: gen = the load generator (this process, all clients), server = the service's process. ")
	p("Syncs/pair: the service's log syncs (disk flushes, every node) per acquire+release pair, where the service counts them.\n\n")
	p("| cell | system | pairs/s | runs | acquire p50 | acquire p99 | fairness (max/min) | tokens | errors | gen CPU | server CPU | syncs/pair |\n")
	p("|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|\n")
	for _, c := range rp.cells() {
		for _, t := range rp.Targets {
			r, ok := rp.find(t, c)
			if !ok {
				continue
			}
			errs := fmt.Sprint(r.Errors)
			if r.FirstErr != nil {
				errs += fmt.Sprintf(" (first: %s)", strings.ReplaceAll(r.FirstErr.Error(), "|", "/"))
			}
			runs := "–"
			if len(r.Runs) > 1 {
				var rs []string
				for _, x := range r.Runs {
					rs = append(rs, fmt.Sprintf("%.0f", x))
				}
				runs = strings.Join(rs, ", ")
			}
			p("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c, t, r.PairsPerSec(), runs, ms(r.P50), ms(r.P99),
				fairness(r), tokens(r), errs, cpu(r.GenCPU), cpu(r.ServerCPU), syncsPerPair(r))
		}
	}
}

// writeRenewals writes the renewal cell, if it ran.
func (rp *Report) writeRenewals(b *strings.Builder) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	if len(rp.Holds) == 0 {
		return
	}
	h0 := rp.Holds[0]
	p("\n## Renewals: %d held locks, TTL %v\n\n", h0.Locks, h0.TTL)
	p("Each system holds %d locks at once, one client session (lease) per lock, all through one client connection object; ", h0.Locks)
	p("the clients renew on their own schedule (about TTL/3). Renewals are the service's own count (its metrics), in a window of %v after every lock is held.\n\n", h0.Elapsed.Round(time.Second))
	p("| system | renewals/s | server CPU (cores) | server CPU per renewal | gen CPU |\n|---|---:|---:|---:|---:|\n")
	for _, h := range rp.Holds {
		per := "?"
		if d := h.CPUPerRenewal(); d > 0 {
			per = fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
		}
		p("| %s | %.0f | %s | %s | %s |\n", h.Target, h.RenewalsPerSec(), cpu(h.ServerCPU), per, cpu(h.GenCPU))
	}
}

// WriteFile writes the markdown report to path.
func (rp *Report) WriteFile(path string) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rp.WriteMarkdown(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
