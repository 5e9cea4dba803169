package server_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/testproc"
)

// BenchmarkAcquireRelease measures acquire+release pairs per second against
// a real "fencelock serve" process on loopback, fsync on, and reports the
// pairs/s and the acquire latency percentiles. Compare the cells' pairs/s in
// one run: 64 clients on their own locks should be several times one client
// (Raft batches concurrent appends into few fsyncs). The node runs as in
// bench/: Go code on one thread, warnings only in its log.
//
//	go test -run '^$' -bench AcquireRelease -benchtime 10000x ./server/
func BenchmarkAcquireRelease(b *testing.B) {
	cells := []struct {
		name    string
		clients int
		oneLock bool
	}{
		{"clients=1", 1, false},
		{"clients=8/own-locks", 8, false},
		{"clients=64/own-locks", 64, false},
		{"clients=64/one-lock", 64, true},
	}
	srv := testproc.StartServer(b, "--procs", "1", "--log-level", "warn")
	for _, cell := range cells {
		b.Run(cell.name, func(b *testing.B) {
			c := newClient(b, srv.Addr)
			ctx := context.Background()
			lat := make([][]time.Duration, cell.clients)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var firstErr error
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < cell.clients; w++ {
				n := b.N / cell.clients
				if w < b.N%cell.clients {
					n++
				}
				name := fmt.Sprintf("bench/%s/%d", cell.name, w)
				if cell.oneLock {
					name = "bench/" + cell.name
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < n; i++ {
						t0 := time.Now()
						l, err := c.Acquire(ctx, name, client.WithTTL(10*time.Second))
						if err == nil {
							lat[w] = append(lat[w], time.Since(t0))
							err = l.Release(ctx)
						}
						if err != nil {
							mu.Lock()
							firstErr = err
							mu.Unlock()
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if firstErr != nil {
				b.Fatal(firstErr)
			}
			var all []time.Duration
			minN, maxN := b.N, 0
			for _, l := range lat {
				all = append(all, l...)
				minN, maxN = min(minN, len(l)), max(maxN, len(l))
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pairs/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-acquire-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-acquire-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkRenew holds 10,000 locks and renews them round-robin with 32
// concurrent callers. It reports renewals/s, the server's CPU per renewal
// (from /proc), and fails if the Raft log grew: renewals are leader-memory
// bookkeeping and must not touch the disk.
//
//	go test -run '^$' -bench Renew -benchtime 50000x ./server/
func BenchmarkRenew(b *testing.B) {
	const held, callers = 10000, 32
	srv := testproc.StartServer(b)
	c := newClient(b, srv.Addr)
	ctx := context.Background()
	type grant struct {
		name  string
		id    fencelock.LeaseID
		token fencelock.Token
	}
	grants := make([]grant, held)
	var wg sync.WaitGroup
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < held; i += callers {
				g := rawAcquire(b, srv.Addr, fmt.Sprintf("renew/%d", i), "", 10*time.Minute)
				grants[i] = grant{g.Name, fencelock.LeaseID(g.LeaseId), fencelock.Token(g.Token)}
			}
		}()
	}
	wg.Wait()
	before, err := admin.New(c, "").Status(ctx, srv.Addr)
	if err != nil {
		b.Fatal(err)
	}
	cpu0, err := srv.CPUTime()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	var failed atomic.Int64
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += callers {
				g := grants[i%held]
				if _, err := c.Renew(ctx, g.name, g.id, g.token); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu1, _ := srv.CPUTime()
	after, err := admin.New(c, "").Status(ctx, srv.Addr)
	if err != nil {
		b.Fatal(err)
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d renewals failed", n)
	}
	if after.LastLogIndex != before.LastLogIndex {
		b.Fatalf("the Raft log grew from index %d to %d during %d renewals: renewals touched the disk",
			before.LastLogIndex, after.LastLogIndex, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "renewals/s")
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "server-cpu-µs/renewal")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkApplyInProcess measures acquire+release pairs per second through
// Server.Apply in the same process: Raft, the log store with fsync on, and
// the FSM, without the API's transport. Compared with AcquireRelease in the
// same run it shows what HTTP, Connect and a second process cost.
//
//	go test -run '^$' -bench ApplyInProcess -benchtime 10000x ./server/
func BenchmarkApplyInProcess(b *testing.B) {
	s := fencelocktest.StartNode(b).Server
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, workers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", workers), func(b *testing.B) {
			var wg sync.WaitGroup
			var failed atomic.Value
			start := time.Now()
			for w := 0; w < workers; w++ {
				n := b.N / workers
				if w < b.N%workers {
					n++
				}
				name := fencelock.LockName(fmt.Sprintf("inproc/%d/%d", workers, w))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < n; i++ {
						res, err := s.Apply(ctx, fsm.Acquire{Name: name, LeaseID: fencelock.NewLeaseID(), TTL: int64(10 * time.Second)})
						if err == nil && res.Grant == nil {
							err = fmt.Errorf("no grant: %+v", res)
						}
						if err == nil {
							res, err = s.Apply(ctx, fsm.Release{Name: name, LeaseID: res.Grant.LeaseID, Token: res.Grant.Token})
						}
						if err == nil {
							err = res.Err
						}
						if err != nil {
							failed.Store(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
