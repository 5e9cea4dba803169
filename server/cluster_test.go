package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
)

func clusterClient(tb testing.TB, endpoints []string, retry time.Duration) *client.Client {
	tb.Helper()
	cfg := client.DefaultConfig(endpoints...)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.RetryTimeout = retry
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// churn acquires and releases name n times and returns the highest token.
func churn(tb testing.TB, ctx context.Context, c *client.Client, name string, n int) fencelock.Token {
	tb.Helper()
	var last fencelock.Token
	for i := 0; i < n; i++ {
		l, err := c.Acquire(ctx, name, client.WithTTL(5*time.Second))
		if err != nil {
			tb.Fatalf("acquire %s: %v", name, err)
		}
		if l.Token() <= last {
			tb.Fatalf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			tb.Fatalf("release %s: %v", name, err)
		}
	}
	return last
}

func TestCluster_LeaderKill9KeepsLeasesAndTokensGrow(t *testing.T) {
	cl := testproc.StartCluster(t, 3)
	ctx := ctxFor(t, 90*time.Second)
	c := clusterClient(t, cl.Endpoints(), 30*time.Second)

	held, err := c.TryAcquire(ctx, "held", client.WithTTL(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	highest := max(held.Token(), churn(t, ctx, c, "work", 10))

	old := cl.Leader()
	cl.Nodes[old].Kill9()
	leader := cl.WaitLeader(old)
	t.Logf("leader %s killed; %s took over", testproc.NodeID(old), testproc.NodeID(leader))

	// The held lease survives the failover: re-armed with its full TTL, renewed
	// by the keep-alive against the new leader, never revoked early.
	time.Sleep(3 * time.Second)
	if err := held.Err(); err != nil {
		t.Fatalf("held lease lost across the failover: %v", err)
	}
	other := clusterClient(t, cl.Endpoints(), 30*time.Second)
	_, err = other.TryAcquire(ctx, "held", client.WithTTL(time.Second))
	var lh *fencelock.LockHeldError
	if !errors.As(err, &lh) || lh.Token != held.Token() {
		t.Fatalf("try-lock of the held lock after failover: got %v, want LockHeld with token %d", err, held.Token())
	}
	if next := churn(t, ctx, c, "work", 3); next <= highest {
		t.Errorf("token after failover %d is not above every acknowledged token (%d)", next, highest)
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("release the held lock on the new leader: %v", err)
	}
	cl.Nodes[old].Start() // rejoins and catches up
}

func TestCluster_SIGSTOPLeaderStepsDownAndNeverGrantsStale(t *testing.T) {
	cl := testproc.StartCluster(t, 3)
	ctx := ctxFor(t, 90*time.Second)
	c := clusterClient(t, cl.Endpoints(), 30*time.Second)
	before := churn(t, ctx, c, "work", 3)

	old := cl.Leader()
	if err := cl.Nodes[old].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	leader := cl.WaitLeader(old)
	z, err := c.TryAcquire(ctx, "z", client.WithTTL(20*time.Second))
	if err != nil {
		t.Fatalf("acquire on the new leader %s: %v", testproc.NodeID(leader), err)
	}
	if z.Token() <= before {
		t.Errorf("token on the new leader %d is not above %d", z.Token(), before)
	}
	time.Sleep(time.Second) // longer than the election timeout
	if err := cl.Nodes[old].Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The old leader, asked directly, never grants from its stale view: it
	// refuses, or redirects to the new leader, which knows z is held.
	direct := clusterClient(t, []string{cl.Nodes[old].Addr}, 10*time.Second)
	_, err = direct.TryAcquire(ctx, "z", client.WithTTL(time.Second))
	var lh *fencelock.LockHeldError
	if !errors.As(err, &lh) || lh.Token != z.Token() {
		t.Fatalf("try-lock of z through the resumed old leader: got %v, want LockHeld with token %d", err, z.Token())
	}
	waitFor(t, func() bool { return !cl.Nodes[old].IsReadyLeader() || cl.Leader() == old })
	// Clients end up on whichever node leads now.
	if next := churn(t, ctx, direct, "work", 2); next <= z.Token() {
		t.Errorf("token after the old leader resumed %d is not above %d", next, z.Token())
	}
}

func TestCluster_PartitionedLeaderCannotGrant(t *testing.T) {
	cl := testproc.StartCluster(t, 3)
	ctx := ctxFor(t, 90*time.Second)
	c := clusterClient(t, cl.Endpoints(), 30*time.Second)
	var grants []fencelock.Token
	grants = append(grants, churn(t, ctx, c, "p", 3))

	old := cl.Leader()
	cl.Isolate(old)
	minority := clusterClient(t, []string{cl.Nodes[old].Addr}, 3*time.Second)
	mctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	if l, err := minority.TryAcquire(mctx, "p", client.WithTTL(5*time.Second)); err == nil {
		t.Errorf("the isolated old leader granted token %d", l.Token())
	}
	cancel()
	leader := cl.WaitLeader(old)
	majority := clusterClient(t, []string{cl.Nodes[(old+1)%3].Addr, cl.Nodes[(old+2)%3].Addr}, 30*time.Second)
	grants = append(grants, churn(t, ctx, majority, "p", 3))
	t.Logf("majority leader %s granted while %s was isolated", testproc.NodeID(leader), testproc.NodeID(old))

	cl.Heal()
	grants = append(grants, churn(t, ctx, c, "p", 3))
	for i := 1; i < len(grants); i++ {
		if grants[i] <= grants[i-1] {
			t.Fatalf("tokens of p in grant order %v are not strictly increasing", grants)
		}
	}
}

func TestCluster_SnapshotCatchUpAndFullRestart(t *testing.T) {
	const trailing = 5
	cl := testproc.StartCluster(t, 3, "--snapshot-threshold", "16", "--trailing-logs", fmt.Sprint(trailing), "--snapshot-interval", "100ms")
	ctx := ctxFor(t, 120*time.Second)
	c := clusterClient(t, cl.Endpoints(), 30*time.Second)
	churn(t, ctx, c, "s", 3)

	leader := cl.Leader()
	lag := (leader + 1) % 3
	st, err := admin.New(c, "").Status(ctx, cl.Nodes[lag].Addr)
	if err != nil {
		t.Fatal(err)
	}
	lagApplied := st.AppliedIndex
	cl.Nodes[lag].Kill9()
	highest := churn(t, ctx, c, "s", 60)
	waitFor(t, func() bool {
		ls, err := admin.New(c, "").Status(ctx, cl.Nodes[leader].Addr)
		return err == nil && ls.LastSnapshotIndex > lagApplied+trailing+1
	})

	// The entries the lagging node lacks are compacted away: only
	// InstallSnapshot can bring it up to date.
	cl.Nodes[lag].Start()
	waitFor(t, func() bool {
		ls, err1 := admin.New(c, "").Status(ctx, cl.Nodes[leader].Addr)
		fs, err2 := admin.New(c, "").Status(ctx, cl.Nodes[lag].Addr)
		return err1 == nil && err2 == nil && fs.AppliedIndex >= ls.CommitIndex && fs.LastSnapshotIndex > lagApplied
	})
	// The node says so: a log line and a counter, by source.
	if got := testproc.Metric(t, cl.Nodes[lag].Addr, `fencelock_snapshot_restores_total{source="leader"}`); got < 1 {
		t.Errorf("lagging node: fencelock_snapshot_restores_total{source=\"leader\"} = %v after InstallSnapshot, want at least 1", got)
	}
	if !strings.Contains(cl.Nodes[lag].Log(), "installed snapshot from leader") {
		t.Errorf("lagging node: no \"installed snapshot from leader\" line in its log")
	}

	// Every node restarts from its own disk.
	held, err := c.TryAcquire(ctx, "kept", client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	highest = max(highest, held.Token())
	// Each node has a snapshot of its own before the restart (the lagging
	// one keeps the installed one). A follower takes its own on a timer, so
	// on a loaded machine the churn can end before that timer fires: wait.
	waitFor(t, func() bool {
		for _, s := range cl.Nodes {
			if st, err := admin.New(c, "").Status(ctx, s.Addr); err != nil || st.LastSnapshotIndex == 0 {
				return false
			}
		}
		return true
	})
	for _, s := range cl.Nodes {
		s.Kill9()
	}
	for _, s := range cl.Nodes {
		s.Start()
	}
	cl.WaitLeader(-1)
	for i, s := range cl.Nodes {
		// A restart restores the node's snapshot, and says it was local.
		if got := testproc.Metric(t, s.Addr, `fencelock_snapshot_restores_total{source="local"}`); got < 1 {
			t.Errorf("%s after a restart: fencelock_snapshot_restores_total{source=\"local\"} = %v, want at least 1", testproc.NodeID(i), got)
		}
	}
	if next := churn(t, ctx, c, "s", 2); next <= highest {
		t.Errorf("token after restarting every node %d is not above %d", next, highest)
	}
	other := clusterClient(t, cl.Endpoints(), 30*time.Second)
	if _, err := other.TryAcquire(ctx, "kept", client.WithTTL(time.Second)); !errors.Is(err, fencelock.ErrLockHeld) {
		t.Errorf("a lease held across a full restart: got %v, want ErrLockHeld", err)
	}
}

func TestCluster_MembershipAddRemoveIncludingLeader(t *testing.T) {
	cl := testproc.StartCluster(t, 3)
	ctx := ctxFor(t, 120*time.Second)
	c := clusterClient(t, cl.Endpoints(), 30*time.Second)
	highest := churn(t, ctx, c, "m", 2)

	// A fourth node joins through any member.
	n4 := &testproc.Server{Addr: testproc.FreeAddr(t), RaftAddr: testproc.FreeAddr(t), DataDir: t.TempDir(), Follower: true,
		Args: append([]string{"--node-id", "n4", "--join", cl.Nodes[0].Addr}, testproc.DefaultClusterFlags...)}
	n4 = testproc.AttachServer(t, n4)
	n4.Start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- log of n4:\n%s", n4.Log())
		}
	})
	waitFor(t, func() bool { // joined, and every member's API address recorded
		st, err := admin.New(c, "").Status(ctx, n4.Addr)
		if err != nil || len(st.Members) != 4 {
			return false
		}
		for _, m := range st.Members {
			if m.APIAddr == "" {
				return false
			}
		}
		return true
	})

	// Remove the leader itself; the others elect a new one.
	old := cl.Leader()
	if err := admin.New(c, "").RemoveMember(ctx, testproc.NodeID(old)); err != nil {
		t.Fatalf("remove the leader %s: %v", testproc.NodeID(old), err)
	}
	cl.Nodes[old].Kill9()
	c4 := clusterClient(t, append(cl.Endpoints(), n4.Addr), 30*time.Second)
	if next := churn(t, ctx, c4, "m", 2); next <= highest {
		t.Errorf("token after removing the leader %d is not above %d", next, highest)
	}
	st, err := anyStatusOf(ctx, c4, append(cl.Endpoints(), n4.Addr))
	if err != nil || len(st.Members) != 3 {
		t.Fatalf("members after removing the leader: %+v, %v; want 3", st.Members, err)
	}

	// With one of the three down, removing another would leave one voter of
	// two reachable: refused.
	var victim, target string
	for _, m := range st.Members {
		if !m.Leader && victim == "" {
			victim = m.ID
		} else if !m.Leader {
			target = m.ID
		}
	}
	for i, s := range cl.Nodes {
		if testproc.NodeID(i) == victim {
			s.Kill9()
		}
	}
	if victim == "n4" {
		n4.Kill9()
	}
	if err := admin.New(c4, "").RemoveMember(ctx, target); !errors.Is(err, fencelock.ErrPreconditionFailed) {
		t.Errorf("remove %s while %s is down: got %v, want a refusal (ErrPreconditionFailed)", target, victim, err)
	}
}

func anyStatusOf(ctx context.Context, c *client.Client, eps []string) (fencelock.NodeStatus, error) {
	var err error
	for _, e := range eps {
		var st fencelock.NodeStatus
		if st, err = admin.New(c, "").Status(ctx, e); err == nil && st.LeaderID != "" {
			return st, nil
		}
	}
	return fencelock.NodeStatus{}, err
}

func TestCluster_TokenSoakWhileLeaderIsKilled(t *testing.T) {
	cl := testproc.StartCluster(t, 3)
	ctx := ctxFor(t, 120*time.Second)
	type grant struct {
		lock  string
		token fencelock.Token
		at    time.Time
	}
	var mu sync.Mutex
	var grants []grant
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clusterClient(t, cl.Endpoints(), 30*time.Second)
			name := fmt.Sprintf("soak/%d", w%3)
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := c.Acquire(ctx, name, client.WithTTL(10*time.Second))
				if err != nil {
					continue // failover in progress; the retry budget ran out
				}
				mu.Lock()
				grants = append(grants, grant{name, l.Token(), time.Now()})
				mu.Unlock()
				_ = l.Release(ctx)
			}
		}()
	}
	for round := 0; round < 3; round++ {
		time.Sleep(2 * time.Second)
		old := cl.WaitLeader(-1)
		cl.Nodes[old].Kill9()
		cl.WaitLeader(old)
		cl.Nodes[old].Start()
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	per := map[string][]grant{}
	for _, g := range grants {
		per[g.lock] = append(per[g.lock], g)
	}
	for name, gs := range per {
		sort.Slice(gs, func(i, j int) bool { return gs[i].at.Before(gs[j].at) })
		for i := 1; i < len(gs); i++ {
			if gs[i].token <= gs[i-1].token {
				t.Fatalf("%s: grant %d has token %d after %d: duplicate or decrease", name, i, gs[i].token, gs[i-1].token)
			}
		}
	}
	if len(grants) < 30 {
		t.Errorf("only %d grants during the soak; the workload barely ran", len(grants))
	}
	t.Logf("%d grants over %d locks, 3 leader kills", len(grants), len(per))
}

// TestCluster_WaiterFollowsLeaderChange: a waiter queued on a leader that
// is cut off from the others (so it never hears of the grant) is sent to
// the new leader as soon as the old one steps down (not_leader), keeps its
// place under its request id, and gets the lock when the holder releases,
// not when its wait on the old leader would have run out.
func TestCluster_WaiterFollowsLeaderChange(t *testing.T) {
	cl := testproc.StartCluster(t, 3)
	ctx := ctxFor(t, 120*time.Second)
	c := clusterClient(t, cl.Endpoints(), 30*time.Second)
	holder, err := c.Acquire(ctx, "handover", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *client.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 90*time.Second) // its wait on the old leader would last this long
		defer cancel()
		l, err := c.Acquire(wctx, "handover", client.WithTTL(5*time.Second))
		got <- result{l, err, time.Now()}
	}()
	waitFor(t, func() bool {
		li, err := c.Describe(ctx, "handover")
		return err == nil && len(li.Waiters) == 1
	})

	old := cl.Leader()
	cl.Isolate(old) // its Raft links hang; clients still reach its API
	defer cl.Heal()
	cl.WaitLeader(old)
	waitFor(t, func() bool { // the waiter is queued at the new leader
		li, err := c.Describe(ctx, "handover")
		return err == nil && len(li.Waiters) == 1
	})
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("release after the leader change: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the waiter got %v, want the lock", r.err)
		}
		if r.l.Token() <= holder.Token() {
			t.Fatalf("the waiter's token %d is not above the holder's %d", r.l.Token(), holder.Token())
		}
		t.Logf("granted %v after the release", r.at.Sub(released).Round(time.Millisecond))
		r.l.Release(ctx)
	case <-time.After(15 * time.Second):
		t.Fatalf("the waiter was not granted within 15 s of the release: it still waits on the old leader")
	}
}

// TestCluster_GrantToNobodyIsTakenBackAfterATakeover: a waiter (TTL 60 s)
// is killed, the holder releases, so the dead waiter is granted, and the
// leader dies within the 3 s grace. The new leader takes that grant back:
// the lock is free within the grace and 5 s of the election, not after
// the dead waiter's 60 s.
func TestCluster_GrantToNobodyIsTakenBackAfterATakeover(t *testing.T) {
	cl := testproc.StartCluster(t, 3)
	ctx := ctxFor(t, 2*time.Minute)
	c := clusterClient(t, cl.Endpoints(), 30*time.Second)
	holder, err := c.Acquire(ctx, "handover", client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	bin := testproc.Build(t, "github.com/fencelock/fencelock/internal/testproc/waiters")
	waiter := exec.Command(bin, "-addr", strings.Join(cl.Endpoints(), ","), "-lock", "handover", "-n", "1", "-ttl", "60s")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = waiter.Process.Kill(); _ = waiter.Wait() }()
	waitFor(t, func() bool { li, err := c.Describe(ctx, "handover"); return err == nil && li.WaiterCount == 1 })
	_ = waiter.Process.Signal(syscall.SIGKILL)
	// The node sees the killed waiter's connection end (a reset, on
	// loopback at once) before the release: a grant written into a
	// connection whose end the node has not seen yet counts as delivered.
	time.Sleep(500 * time.Millisecond)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	li, err := c.Describe(ctx, "handover")
	if err != nil || li.Holder != "doomed" {
		t.Fatalf("after the release: %+v, %v; want the killed waiter granted (the test would not bite)", li, err)
	}
	time.Sleep(time.Second) // within the grace
	old := cl.Leader()
	cl.Nodes[old].Kill9()
	cl.WaitLeader(old)
	elected := time.Now()
	for {
		_, err := c.Describe(ctx, "handover")
		if errors.Is(err, fencelock.ErrNotFound) {
			t.Logf("free %v after the new leader was elected", time.Since(elected).Round(10*time.Millisecond))
			return
		}
		if time.Since(elected) > 3*time.Second+5*time.Second {
			t.Fatalf("the grant to the killed waiter still holds the lock %v after the new leader was elected: %v", time.Since(elected), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
