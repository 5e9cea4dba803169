package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Cell is one point of the matrix: how many clients, and whether they all
// contend for one lock or each uses its own.
type Cell struct {
	Clients int
	OneLock bool
}

func (c Cell) String() string {
	switch {
	case c.Clients == 1:
		return "1 client" // its own lock and the one lock are the same cell
	case c.OneLock:
		return fmt.Sprintf("%d clients, one lock", c.Clients)
	default:
		return fmt.Sprintf("%d clients, own locks", c.Clients)
	}
}

// Result is what one target did in one cell.
type Result struct {
	Target  string
	Cell    Cell
	Elapsed time.Duration
	Pairs   int // completed acquire+release pairs
	P50     time.Duration
	P99     time.Duration
	// MinGrants and MaxGrants are the fewest and most grants one client
	// got; fairness is MaxGrants/MinGrants.
	MinGrants, MaxGrants int
	// TokenViolations counts grants whose token was not above the previous
	// grant's token on the same lock; Overlaps counts grants made while
	// another client still held the same lock. Both must be 0.
	TokenViolations, Overlaps int
	Errors                    int
	FirstErr                  error
	// GenCPU and ServerCPU are CPU cores used on average during the cell
	// by this process (the load generator) and by the server process (-1
	// when its pid is unknown).
	GenCPU, ServerCPU float64
	// Syncs is the number of log syncs on the service's nodes during the
	// cell (SyncCounter targets), -1 when unknown.
	Syncs int64
	// Runs are the pairs/s of every measured run of this cell and target,
	// in order, when the result is the median of several.
	Runs []float64
}

// Median returns the run with the median pairs/s (the lower middle one for
// an even count), with Runs set to every run's pairs/s.
func Median(runs []Result) Result {
	if len(runs) == 0 {
		return Result{}
	}
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b Result) int {
		switch {
		case a.PairsPerSec() < b.PairsPerSec():
			return -1
		case a.PairsPerSec() > b.PairsPerSec():
			return 1
		}
		return 0
	})
	m := sorted[(len(sorted)-1)/2]
	m.Runs = nil
	for _, r := range runs {
		m.Runs = append(m.Runs, r.PairsPerSec())
	}
	return m
}

// PairsPerSec is completed pairs per second of wall time.
func (r Result) PairsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Pairs) / r.Elapsed.Seconds()
}

// Fairness is max/min grants per client; +Inf if some client got none.
func (r Result) Fairness() float64 {
	if r.MinGrants == 0 {
		return inf
	}
	return float64(r.MaxGrants) / float64(r.MinGrants)
}

var inf = func() float64 { var z float64; return 1 / z }()

// OK reports whether the cell did work and kept mutual exclusion and token order.
func (r Result) OK() bool { return r.Pairs > 0 && r.TokenViolations == 0 && r.Overlaps == 0 }

// lockLog records the tokens of one lock in grant order: a holder appends
// while it holds the lock, so appends are ordered as the grants were.
type lockLog struct {
	holders atomic.Int32
	mu      sync.Mutex
	last    uint64
	n       int

	violations, overlaps int
}

func (l *lockLog) enter(tok uint64) {
	if l.holders.Add(1) != 1 {
		l.mu.Lock()
		l.overlaps++
		l.mu.Unlock()
	}
	l.mu.Lock()
	if l.n > 0 && tok <= l.last {
		l.violations++
	}
	l.last, l.n = tok, l.n+1
	l.mu.Unlock()
}

func (l *lockLog) exit() { l.holders.Add(-1) }

// RunCell runs the acquire+release loop of cell against t for d. Lock names
// start with prefix, which must be new for every call. serverPIDs are the
// service's processes (every node), for the server CPU figure; none or 0
// if unknown.
func RunCell(ctx context.Context, t Target, cell Cell, d time.Duration, prefix string, serverPIDs ...int) (Result, error) {
	res := Result{Target: t.Name(), Cell: cell, ServerCPU: -1, Syncs: -1}
	workers := make([]*cellWorker, cell.Clients)
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.l.Close()
			}
		}
	}()
	shared := &lockLog{}
	for i := range workers {
		l, err := t.NewLocker(ctx, i)
		if err != nil {
			return res, err
		}
		workers[i] = &cellWorker{l: l, log: &lockLog{}, name: prefix + "/" + strconv.Itoa(i)}
		if cell.OneLock {
			workers[i].log, workers[i].name = shared, prefix+"/one"
		}
	}

	syncs0 := countSyncs(ctx, t)
	cpu0, srv0 := selfCPU(), procsCPU(serverPIDs)
	start := time.Now()
	deadline := start.Add(d)
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.loop(ctx, actx, deadline) })
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.GenCPU = (selfCPU() - cpu0).Seconds() / res.Elapsed.Seconds()
	if srv0 >= 0 {
		if srv1 := procsCPU(serverPIDs); srv1 >= 0 {
			res.ServerCPU = (srv1 - srv0).Seconds() / res.Elapsed.Seconds()
		}
	}
	if syncs0 >= 0 {
		if syncs1 := countSyncs(ctx, t); syncs1 >= 0 {
			res.Syncs = syncs1 - syncs0
		}
	}
	res.add(workers)
	return res, nil
}

// cellWorker is one client of a cell and what it saw.
type cellWorker struct {
	l        Locker
	log      *lockLog
	name     string // the lock it takes
	lat      []time.Duration
	grants   int
	errs     int
	firstErr error
}

// loop acquires and releases w's lock until deadline (actx ends then).
func (w *cellWorker) loop(ctx, actx context.Context, deadline time.Time) {
	fail := func(err error) {
		w.errs++
		if w.firstErr == nil {
			w.firstErr = err
		}
		time.Sleep(10 * time.Millisecond) // no hot loop on a failing service
	}
	for time.Now().Before(deadline) {
		t0 := time.Now()
		tok, err := w.l.Acquire(actx, w.name)
		if err != nil {
			if actx.Err() != nil || !time.Now().Before(deadline) {
				// The cell is over; a cancelled wait is not an error,
				// nor a wait that ran out with the cell (a client may
				// bound its wait by the context's deadline and answer
				// "held" a moment before the context says it is done).
				return
			}
			fail(fmt.Errorf("acquire: %w", err))
			continue
		}
		w.lat = append(w.lat, time.Since(t0))
		w.log.enter(tok)
		w.log.exit()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = w.l.Release(rctx)
		rcancel()
		if err != nil {
			fail(fmt.Errorf("release: %w", err))
			continue
		}
		w.grants++
	}
}

// add sums the workers' figures into res: pairs, errors, grants per
// client, latency percentiles, token violations and overlaps.
func (res *Result) add(workers []*cellWorker) {
	var all []time.Duration
	res.MinGrants = -1
	seen := map[*lockLog]bool{}
	for _, w := range workers {
		all = append(all, w.lat...)
		res.Pairs += w.grants
		res.Errors += w.errs
		if res.FirstErr == nil {
			res.FirstErr = w.firstErr
		}
		if res.MinGrants < 0 || w.grants < res.MinGrants {
			res.MinGrants = w.grants
		}
		res.MaxGrants = max(res.MaxGrants, w.grants)
		if !seen[w.log] {
			seen[w.log] = true
			res.TokenViolations += w.log.violations
			res.Overlaps += w.log.overlaps
		}
	}
	slices.Sort(all)
	if len(all) > 0 {
		res.P50 = all[len(all)/2]
		res.P99 = all[min(len(all)-1, len(all)*99/100)]
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procsCPU returns the CPU time of all pids together, or -1 if any is
// unknown (or there are none).
func procsCPU(pids []int) time.Duration {
	if len(pids) == 0 {
		return -1
	}
	var sum time.Duration
	for _, pid := range pids {
		c := procCPU(pid)
		if c < 0 {
			return -1
		}
		sum += c
	}
	return sum
}

// procCPU returns the user+system CPU time of pid from /proc, or -1.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the ")" that ends the command name: state is field 3,
	// utime 14 and stime 15 (1-based), in clock ticks (USER_HZ = 100).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return -1
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// countSyncs returns t's log syncs so far, or -1 if t does not count them
// (or the count cannot be read).
func countSyncs(ctx context.Context, t Target) int64 {
	sc, ok := t.(SyncCounter)
	if !ok {
		return -1
	}
	n, err := sc.Syncs(ctx)
	if err != nil {
		return -1
	}
	return n
}
