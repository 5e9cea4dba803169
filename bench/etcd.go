package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// Etcd is the Target of an etcd service through clientv3's
// concurrency.Mutex. All lockers share one client connection; each has its
// own session (lease), as separate processes would.
//
// The fencing token is the revision in Mutex.Header() after Lock: the lock
// key's create revision when the lock was free, and for a waiter the
// revision of the read that confirmed its key is first. Both strictly
// increase in grant order (a release, a delete, comes between two grants);
// the waiter's exact key revision would cost one more read per grant.
type Etcd struct {
	cli   *clientv3.Client
	addrs []string
	ttl   int // session TTL in seconds
}

// NewEtcd connects to the etcd at addr (host:port, or a comma-separated
// list for a cluster).
func NewEtcd(ctx context.Context, addr string, ttl time.Duration) (*Etcd, error) {
	eps := strings.Split(addr, ",")
	addr = eps[0]
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps, DialTimeout: 5 * time.Second, Context: ctx, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Status(sctx, addr); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd at %s: %w", addr, err)
	}
	return &Etcd{cli: cli, addrs: eps, ttl: max(1, int(ttl/time.Second))}, nil
}

// Renewals sums etcd_debugging_lease_renewed_total over the members.
func (e *Etcd) Renewals(ctx context.Context) (int64, error) {
	return scrapeCounter(ctx, nil, e.addrs, "etcd_debugging_lease_renewed_total")
}

func (e *Etcd) Name() string { return "etcd" }
func (e *Etcd) Close() error { return e.cli.Close() }

func (e *Etcd) NewLocker(ctx context.Context, _ int) (Locker, error) {
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(e.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	return &etcdLocker{s: s}, nil
}

type etcdLocker struct {
	s *concurrency.Session
	m *concurrency.Mutex
}

func (l *etcdLocker) Acquire(ctx context.Context, name string) (uint64, error) {
	m := concurrency.NewMutex(l.s, "/fencebench/"+name)
	if err := m.Lock(ctx); err != nil {
		return 0, err
	}
	l.m = m
	return uint64(m.Header().Revision), nil
}

func (l *etcdLocker) Release(ctx context.Context) error {
	m := l.m
	l.m = nil
	return m.Unlock(ctx)
}

func (l *etcdLocker) Close() error { return l.s.Close() }
