package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/testproc"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// openInProcess starts a one-node server in this process and waits until
// it leads.
func openInProcess(t *testing.T) *Server { return openInProcessWith(t, nil) }

// openInProcessWith is openInProcess with tweak (if set) adjusting the
// config.
func openInProcessWith(t *testing.T, tweak func(*Config)) *Server {
	t.Helper()
	s := openNodeWith(t, tweak)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// openNodeWith is openInProcessWith without the wait for leadership (a node
// of a cluster, whose peers start after it).
func openNodeWith(t *testing.T, tweak func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr = testproc.FreeAddr(t)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type acquired struct {
	g   fencelock.Grant
	err error
}

// waitFor starts an Acquire of name by request rid that may wait a minute.
func waitFor(s *Server, name fencelock.LockName, rid string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		g, err := s.Acquire(ctx, AcquireRequest{Name: name, TTL: 10 * time.Second, Wait: time.Minute, RequestID: rid})
		ch <- acquired{g, err}
	}()
	return ch
}

// TestDeferrals_QueuingAcquireRidesWithTheNextEntry: an acquire that can
// only queue is held back until another entry is proposed, then goes ahead
// of it, in the order such acquires came; what does not queue (a free lock,
// the holder's own retry) is never held back.
func TestDeferrals_QueuingAcquireRidesWithTheNextEntry(t *testing.T) {
	s := openInProcess(t)
	s.deferrals.window = time.Hour // only the next entry sends them
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	a, err := s.Acquire(ctx, AcquireRequest{Name: "l", TTL: 10 * time.Second, Wait: time.Minute, RequestID: "a"})
	if err != nil {
		t.Fatalf("acquire of a free lock: %v", err)
	}
	if n := s.deferrals.n.Load(); n != 0 {
		t.Fatalf("an acquire of a free lock was held back (%d held)", n)
	}
	if again, err := s.Acquire(ctx, AcquireRequest{Name: "l", TTL: 10 * time.Second, Wait: time.Minute, RequestID: "a"}); err != nil || again.Token != a.Token {
		t.Fatalf("the holder's retry = %+v, %v; want its grant (token %d) at once", again, err, a.Token)
	}

	b := waitFor(s, "l", "b")
	eventually(t, "b's acquire held back", func() bool { return s.deferrals.n.Load() == 1 })
	c := waitFor(s, "l", "c")
	eventually(t, "c's acquire held back", func() bool { return s.deferrals.n.Load() == 2 })
	if s.fsm.Queued("l", "b") || s.fsm.Queued("l", "c") {
		t.Fatal("a held-back acquire was applied before any other entry")
	}

	// The release sends b's and c's entries first: b is granted by the
	// release, and c still waits behind it.
	res, err := s.Apply(ctx, fsm.Command{Op: fsm.OpRelease, Name: "l", LeaseID: a.LeaseID, Token: a.Token})
	if err != nil || res.Err != nil {
		t.Fatalf("release: %v %v", err, res.Err)
	}
	select {
	case got := <-b:
		if got.err != nil || got.g.Token <= a.Token {
			t.Fatalf("b = %+v, %v; want a grant above token %d", got.g, got.err, a.Token)
		}
	case <-c:
		t.Fatal("c was granted before b, which came first")
	case <-time.After(10 * time.Second):
		t.Fatal("b not granted within 10s of the release")
	}
	if n := s.deferrals.n.Load(); n != 0 {
		t.Fatalf("%d acquires still held back after the release", n)
	}
	if l, _ := s.fsm.Get("l"); len(l.Waiters) != 1 || l.Waiters[0].RequestID != "c" {
		t.Fatalf("queue after the release = %+v, want c alone", l.Waiters)
	}
}

// TestDeferrals_WindowEndsTheHold: with no other entry, a held-back acquire
// is proposed when the window ends, and joins the queue.
func TestDeferrals_WindowEndsTheHold(t *testing.T) {
	s := openInProcess(t)
	s.deferrals.window = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Acquire(ctx, AcquireRequest{Name: "l", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	b := waitFor(s, "l", "b")
	eventually(t, "b queued", func() bool { return s.fsm.Queued("l", "b") })
	if n := s.deferrals.n.Load(); n != 0 {
		t.Fatalf("%d acquires still held back after the window", n)
	}
	select {
	case got := <-b:
		t.Fatalf("b returned %+v, %v while the lock is held", got.g, got.err)
	default:
	}
}

// TestDeferrals_CallerThatLeavesWhileHeldBack: a caller whose context
// ends while its entry is still held back takes the entry back: it gets its
// context's error, and the entry is never proposed.
func TestDeferrals_CallerThatLeavesWhileHeldBack(t *testing.T) {
	s := openInProcess(t)
	s.deferrals.window = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := s.Acquire(ctx, AcquireRequest{Name: "l", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	_, err = s.Apply(short, acquireCommand(AcquireRequest{Name: "l", TTL: 10 * time.Second, Wait: time.Minute, RequestID: "b"}))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("apply whose context ended while held back = %v; want the deadline, not 'outcome unknown'", err)
	}
	if n := s.deferrals.n.Load(); n != 0 {
		t.Fatalf("%d entries still held after their caller left", n)
	}
	res, err := s.Apply(ctx, fsm.Command{Op: fsm.OpRelease, Name: "l", LeaseID: a.LeaseID, Token: a.Token})
	if err != nil || res.Err != nil {
		t.Fatalf("release: %v %v", err, res.Err)
	}
	if l, ok := s.fsm.Get("l"); ok && (l.Holder != nil || len(l.Waiters) > 0) {
		t.Fatalf("lock after the release = %+v; want it free: b's entry was taken back", l)
	}
}

// TestDeferrals_BatchSendsWhatItHeldBack: a batch that proposes an entry
// sends the acquires it held back after it with it, not after the window.
func TestDeferrals_BatchSendsWhatItHeldBack(t *testing.T) {
	s := openInProcess(t)
	s.deferrals.window = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mine, err := s.Acquire(ctx, AcquireRequest{Name: "mine", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, AcquireRequest{Name: "theirs", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	items := []*fencelockv1.BatchItem{
		{Op: &fencelockv1.BatchItem_Release{Release: &fencelockv1.ReleaseRequest{Name: "mine", LeaseId: string(mine.LeaseID), Token: uint64(mine.Token)}}},
		{Op: &fencelockv1.BatchItem_Acquire{Acquire: &fencelockv1.AcquireRequest{Name: "theirs", Ttl: durationpb.New(10 * time.Second), Wait: durationpb.New(time.Minute), RequestId: "q"}}},
	}
	bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
	defer bcancel()
	resp, err := (*api)(s).batch(bctx, items)
	if err != nil {
		t.Fatalf("batch of a release and a queuing acquire: %v", err)
	}
	if resp.Results[0].GetRelease() == nil || resp.Results[1].GetQueued() == nil {
		t.Fatalf("batch results = %v; want released, then queued", resp.Results)
	}
}

// TestMetrics_LogAppendsCountEveryEntry: fencelock_log_append_entries
// counts each entry of the node's log once, and one observation per sync.
func TestMetrics_LogAppendsCountEveryEntry(t *testing.T) {
	s := openInProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 5 {
		g, err := s.Acquire(ctx, AcquireRequest{Name: "m", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := s.Apply(ctx, fsm.Command{Op: fsm.OpRelease, Name: "m", LeaseID: g.LeaseID, Token: g.Token}); err != nil || res.Err != nil {
			t.Fatalf("release: %v %v", err, res.Err)
		}
	}
	families, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fencelock_log_append_entries" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if last := s.raft.LastIndex(); h.GetSampleSum() != float64(last) || h.GetSampleCount() == 0 || h.GetSampleCount() > last {
			t.Fatalf("appends: %d holding %v entries; want 1..%d appends holding all %d entries of the log", h.GetSampleCount(), h.GetSampleSum(), last, last)
		}
		return
	}
	t.Fatal("no fencelock_log_append_entries metric")
}

// A leader whose API address is missing from the replicated state (its
// record on becoming ready failed) records it again.
func TestServer_LeaderRecordsItsAPIAddressAgain(t *testing.T) {
	const api = "127.0.0.1:1"
	s := openInProcessWith(t, func(cfg *Config) { cfg.APIAddr = api })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eventually(t, "the leader's API address recorded", func() bool { _, ok := s.fsm.MemberAPI("n1"); return ok })
	if _, err := s.Apply(ctx, fsm.Command{Op: fsm.OpDropMember, Name: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.fsm.MemberAPI("n1"); ok {
		t.Fatal("the drop did not forget the address: the test checks nothing")
	}
	eventually(t, "the leader's API address recorded again", func() bool { a, _ := s.fsm.MemberAPI("n1"); return a == api })
}

// A waiting Acquire whose caller goes away after its entry was proposed but
// before it applied leaves a request queued with nobody waiting: it is
// dropped after the claim window, as one a Batch queued would be, instead
// of being granted to nobody when the lock is released.
func TestAcquire_CallerGoneMidCommitIsNotGrantedToNobody(t *testing.T) {
	s := openInProcess(t)
	s.deferrals.window = time.Hour
	bg := context.Background()
	h, err := s.Acquire(bg, AcquireRequest{Name: "l", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, AcquireRequest{Name: "l", TTL: time.Minute, Wait: time.Minute, RequestID: "gone"})
		done <- err
	}()
	eventually(t, "the acquire held back", func() bool { return s.deferrals.n.Load() == 1 })
	s.deferrals.flush() // proposed now
	cancel()            // the caller goes away before its entry commits
	<-done
	eventually(t, "the request queued", func() bool { return s.fsm.Queued("l", "gone") })
	deadline := time.Now().Add(claimWindow + claimRecheck + 10*time.Second)
	for s.fsm.Queued("l", "gone") {
		if time.Now().After(deadline) {
			t.Fatal("the request of a caller that went away is still queued after the claim window")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.Release(bg, "l", h.LeaseID, h.Token); err != nil {
		t.Fatal(err)
	}
	if l, ok := s.fsm.Get("l"); ok && l.Holder != nil {
		t.Fatalf("after the release the lock is held by %+v, want free", *l.Holder)
	}
}
