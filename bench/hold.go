package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RenewalCounter is a Target whose service counts the lease renewals it
// has served, read from its metrics.
type RenewalCounter interface {
	Target
	// Renewals returns the service's renewal count so far (all nodes).
	Renewals(ctx context.Context) (int64, error)
}

// HoldResult is what a service spent keeping many held locks alive.
type HoldResult struct {
	Target    string
	Locks     int
	TTL       time.Duration
	Elapsed   time.Duration // the measured window, after every lock was held
	Renewals  int64         // renewals the service counted in the window
	ServerCPU float64       // cores used by the service's processes in the window; -1 if unknown
	GenCPU    float64
}

// RenewalsPerSec is renewals per second of the window.
func (h HoldResult) RenewalsPerSec() float64 {
	if h.Elapsed <= 0 {
		return 0
	}
	return float64(h.Renewals) / h.Elapsed.Seconds()
}

// CPUPerRenewal is the service's CPU time per renewal, 0 if unknown.
func (h HoldResult) CPUPerRenewal() time.Duration {
	if h.Renewals <= 0 || h.ServerCPU < 0 {
		return 0
	}
	return time.Duration(h.ServerCPU * float64(h.Elapsed) / float64(h.Renewals))
}

// RunHold has t acquire n locks named prefix/0.. (one locker each, so one
// session or lease each, as n long-running holders would), keeps them held
// for d while their clients renew them, and measures the renewals the
// service counted and its CPU in that window. Then it releases them.
func RunHold(ctx context.Context, t RenewalCounter, n int, ttl, d time.Duration, prefix string, serverPIDs ...int) (HoldResult, error) {
	res := HoldResult{Target: t.Name(), Locks: n, TTL: ttl, ServerCPU: -1}
	lockers := make([]Locker, n)
	defer func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for _, l := range lockers {
			if l == nil {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				l.Release(rctx)
				l.Close()
			}()
		}
		wg.Wait()
	}()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			l, err := t.NewLocker(ctx, i)
			if err != nil {
				errs <- err
				return
			}
			if _, err := l.Acquire(ctx, fmt.Sprintf("%s/%d", prefix, i)); err != nil {
				l.Close()
				errs <- err
				return
			}
			lockers[i] = l
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return res, fmt.Errorf("acquire the locks to hold: %w", err)
	}
	r0, err := t.Renewals(ctx)
	if err != nil {
		return res, err
	}
	cpu0, srv0 := selfCPU(), procsCPU(serverPIDs)
	start := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	r1, err := t.Renewals(ctx)
	if err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	res.Renewals = r1 - r0
	res.GenCPU = (selfCPU() - cpu0).Seconds() / res.Elapsed.Seconds()
	if srv0 >= 0 {
		if srv1 := procsCPU(serverPIDs); srv1 >= 0 {
			res.ServerCPU = (srv1 - srv0).Seconds() / res.Elapsed.Seconds()
		}
	}
	return res, nil
}

// scrapeCounter sums the Prometheus counter metric over the /metrics pages
// of addrs (host:port).
func scrapeCounter(ctx context.Context, conf *tls.Config, addrs []string, metric string) (int64, error) {
	var sum int64
	hc, scheme := web(conf)
	for _, a := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+a+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, fmt.Errorf("read %s metrics: %w", a, err)
		}
		found := false
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			name, val, ok := strings.Cut(sc.Text(), " ")
			if ok && name == metric {
				f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil {
					resp.Body.Close()
					return 0, fmt.Errorf("%s on %s: %w", metric, a, err)
				}
				sum += int64(f)
				found = true
			}
		}
		resp.Body.Close()
		if !found {
			return 0, fmt.Errorf("%s does not report %s", a, metric)
		}
	}
	return sum, nil
}
