package server_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
)

// BenchmarkAcquireRelease measures acquire+release pairs per second against
// a real "fencelock serve" process on loopback, fsync on, and reports the
// pairs/s and the acquire latency percentiles. Compare the cells' pairs/s in
// one run: 64 clients on their own locks should be several times one client
// (Raft batches concurrent appends into few fsyncs).
//
//	go test -run '^$' -bench AcquireRelease -benchtime 3000x ./server/
func BenchmarkAcquireRelease(b *testing.B) {
	cells := []struct {
		name    string
		clients int
		oneLock bool
	}{
		{"clients=1", 1, false},
		{"clients=64/own-locks", 64, false},
		{"clients=64/one-lock", 64, true},
	}
	srv := testproc.StartServer(b)
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
