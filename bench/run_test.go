package bench

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// memTarget is an in-process lock service; broken makes it hand out tokens
// that go down and grant without excluding anyone.
type memTarget struct {
	broken bool
	mu     sync.Mutex
	held   map[string]bool
	next   uint64
}

func (m *memTarget) Name() string { return "mem" }
func (m *memTarget) Close() error { return nil }
func (m *memTarget) NewLocker(context.Context, int) (Locker, error) {
	return &memLocker{m: m}, nil
}

type memLocker struct {
	m    *memTarget
	name string
}

func (l *memLocker) Acquire(ctx context.Context, name string) (uint64, error) {
	for {
		l.m.mu.Lock()
		if !l.m.held[name] || l.m.broken {
			l.m.held[name] = true
			l.m.next++
			tok := l.m.next
			if l.m.broken {
				tok = 1_000_000 - tok
			}
			l.m.mu.Unlock()
			l.name = name
			if l.m.broken {
				time.Sleep(50 * time.Microsecond) // let holders overlap
			}
			return tok, nil
		}
		l.m.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Microsecond):
		}
	}
}

func (l *memLocker) Release(context.Context) error {
	l.m.mu.Lock()
	delete(l.m.held, l.name)
	l.m.mu.Unlock()
	return nil
}
func (l *memLocker) Close() error { return nil }

func TestRunCell(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken bool
		cell   Cell
	}{
		{"own locks", false, Cell{Clients: 4}},
		{"one lock", false, Cell{Clients: 4, OneLock: true}},
		{"broken one lock", true, Cell{Clients: 4, OneLock: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := RunCell(context.Background(), &memTarget{broken: tc.broken, held: map[string]bool{}}, tc.cell, 50*time.Millisecond, "t", 0)
			if err != nil {
				t.Fatal(err)
			}
			if r.Pairs == 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Errors != 0 {
				t.Fatalf("got %+v, want pairs, latencies and no errors", r)
			}
			if got := r.TokenViolations > 0; got != tc.broken {
				t.Errorf("violations %d; want > 0: %v", r.TokenViolations, tc.broken)
			}
			if r.OK() == tc.broken {
				t.Errorf("OK() = %v, want %v", r.OK(), !tc.broken)
			}
			rp := &Report{Targets: []string{"mem", "mem2"}, Results: []Result{r}, PerCell: time.Second}
			r2 := r
			r2.Target, r2.Elapsed = "mem2", 2*r.Elapsed
			rp.Results = append(rp.Results, r2)
			var b strings.Builder
			if err := rp.WriteMarkdown(&b); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), "| "+tc.cell.String()+" | ") || !strings.Contains(b.String(), "2.00×") {
				t.Errorf("markdown lacks the cell row or the ratio:\n%s", b.String())
			}
		})
	}
}

func TestLockLog(t *testing.T) {
	var l lockLog
	l.enter(5)
	l.enter(6) // a second holder before the first left
	l.exit()
	l.exit()
	l.enter(6) // not above the last token
	l.exit()
	if l.overlaps != 1 || l.violations != 1 {
		t.Errorf("overlaps %d, violations %d; want 1, 1", l.overlaps, l.violations)
	}
}

func TestMedian(t *testing.T) {
	runs := []Result{
		{Pairs: 300, Elapsed: time.Second, P50: 3},
		{Pairs: 100, Elapsed: time.Second, P50: 1},
		{Pairs: 200, Elapsed: time.Second, P50: 2},
	}
	m := Median(runs)
	if m.Pairs != 200 || m.P50 != 2 {
		t.Fatalf("Median of 300, 100, 200 pairs/s = %d pairs (p50 %v), want the 200 run whole", m.Pairs, m.P50)
	}
	if want := []float64{300, 100, 200}; !slices.Equal(m.Runs, want) {
		t.Fatalf("Median's Runs = %v, want every run in order %v", m.Runs, want)
	}
	if m := Median(runs[:2]); m.Pairs != 100 {
		t.Fatalf("Median of two runs = %d pairs, want the lower one", m.Pairs)
	}
}

// syncingTarget is memTarget that counts two syncs per grant, as a service
// that syncs each acquire and each release would.
type syncingTarget struct{ *memTarget }

func (s syncingTarget) Syncs(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return 2 * int64(s.next), nil
}

func TestRunCell_CountsSyncsPerPair(t *testing.T) {
	target := syncingTarget{&memTarget{held: map[string]bool{}}}
	r, err := RunCell(context.Background(), target, Cell{Clients: 4}, 50*time.Millisecond, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Pairs == 0 || r.Syncs != 2*int64(r.Pairs) {
		t.Fatalf("%d pairs, %d syncs; want two syncs per pair", r.Pairs, r.Syncs)
	}
	rp := &Report{Targets: []string{"mem"}, Results: []Result{r}, PerCell: time.Second}
	var b strings.Builder
	if err := rp.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), " | 2.00 |\n") {
		t.Errorf("markdown lacks syncs/pair 2.00:\n%s", b.String())
	}
	plain, err := RunCell(context.Background(), &memTarget{held: map[string]bool{}}, Cell{Clients: 1}, 20*time.Millisecond, "u", 0)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Syncs != -1 {
		t.Fatalf("a target that does not count syncs reported %d", plain.Syncs)
	}
}

// TestStartServers_NodeThatExitsIsReported: nodes that exit before they are
// ready (here a binary that exits at once) end StartServers with an error
// after its retries, instead of leaving it waiting.
func TestStartServers_NodeThatExitsIsReported(t *testing.T) {
	bin, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1) on this machine:", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := StartServers(ctx, bin, t.TempDir(), 3, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errExitedEarly) {
			t.Fatalf("StartServers with nodes that exit = %v, want errExitedEarly", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("StartServers still waiting 20 s after its nodes exited")
	}
}

// The floor excludes and orders like a lock service, or its figures would
// not be a floor of one: one client and four on one lock keep token order
// and exclusion, and a release by a client that holds nothing is refused.
func TestFloor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go ServeFloor(ln, filepath.Join(t.TempDir(), "floor.log"))
	f := NewFloor(ln.Addr().String(), time.Millisecond)
	ctx := context.Background()
	for _, cell := range []Cell{{Clients: 1}, {Clients: 4, OneLock: true}} {
		res, err := RunCell(ctx, f, cell, 300*time.Millisecond, "floor-test/"+cell.String())
		if err != nil {
			t.Fatal(err)
		}
		if !res.OK() || res.Errors > 0 || res.Pairs < 10 {
			t.Errorf("%v: %d pairs, %d token violations, %d overlaps, %d errors (%v)",
				cell, res.Pairs, res.TokenViolations, res.Overlaps, res.Errors, res.FirstErr)
		}
	}
	a, err := f.NewLocker(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := f.NewLocker(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.Acquire(ctx, "floor-test/x"); err != nil {
		t.Fatal(err)
	}
	b.(*floorLocker).name = "floor-test/x"
	if err := b.Release(ctx); err == nil {
		t.Error("a release by a client that does not hold the lock succeeded")
	}
	if err := a.Release(ctx); err != nil {
		t.Error(err)
	}
}
