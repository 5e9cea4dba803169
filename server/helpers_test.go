package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/testproc"
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
	testproc.Eventually(t, what, cond)
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

// TestMetrics_LogAppendsCountEveryEntry: fencelock_log_append_entries
// counts each entry of the node's log once, and one observation per sync.
func TestMetrics_LogAppendsCountEveryEntry(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 5 {
		g, err := s.Acquire(ctx, AcquireRequest{Name: "m", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := s.Apply(ctx, fsm.Release{Name: "m", LeaseID: g.LeaseID, Token: g.Token}); err != nil || res.Err != nil {
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
	t.Parallel()
	const api = "127.0.0.1:1"
	s := openInProcessWith(t, func(cfg *Config) { cfg.APIAddr = api })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eventually(t, "the leader's API address recorded", func() bool { _, ok := s.fsm.MemberAPI("n1"); return ok })
	if _, err := s.Apply(ctx, fsm.DropMember{NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.fsm.MemberAPI("n1"); ok {
		t.Fatal("the drop did not forget the address: the test checks nothing")
	}
	eventually(t, "the leader's API address recorded again", func() bool { a, _ := s.fsm.MemberAPI("n1"); return a == api })
}

// A waiting Acquire whose caller goes away after its entry was proposed but

// queueBehind takes lock name for a holder and returns its grant.
func queueBehind(t *testing.T, s *Server, name fencelock.LockName) fencelock.Grant {
	t.Helper()
	h, err := s.Acquire(context.Background(), AcquireRequest{Name: name, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestAcquire_CallerGoneIsTakenBackAfterTheGrace: a waiting Acquire whose
// caller goes away (before its entry committed, or while it waited) leaves
// its request queued for the grace, then the node takes it back: the
// holder's release grants nobody.
func TestAcquire_CallerGoneIsTakenBackAfterTheGrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after time.Duration // how long after the call starts the caller goes
	}{{"mid-commit", 0}, {"while waiting", 200 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			s := openInProcess(t)
			h := queueBehind(t, s, "l")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := s.Acquire(ctx, AcquireRequest{Name: "l", TTL: time.Minute, Wait: time.Minute, RequestID: "gone"})
				done <- err
			}()
			time.Sleep(tc.after)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) && !errors.Is(err, fencelock.ErrUnavailable) {
				t.Fatalf("acquire of a caller gone = %v", err)
			}
			gone := time.Now()
			eventually(t, "the request queued", func() bool { return s.fsm.Queued("l", "gone") || time.Since(gone) > callGrace/2 })
			deadline := time.Now().Add(callGrace + 10*time.Second)
			for s.fsm.Queued("l", "gone") {
				if time.Now().After(deadline) {
					t.Fatal("the request of a caller that went away is still queued after the grace")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if time.Since(gone) < callGrace/2 && tc.after > 0 {
				t.Errorf("taken back %v after the caller went, before the grace of %v", time.Since(gone), callGrace)
			}
			if err := s.Release(context.Background(), "l", h.LeaseID, h.Token); err != nil {
				t.Fatal(err)
			}
			if l, ok := s.fsm.Get("l"); ok && l.Holder != nil {
				t.Fatalf("after the release the lock is held by %+v, want free", *l.Holder)
			}
			if n := s.claims.len(); n != 0 {
				t.Errorf("%d claims left, want none", n)
			}
		})
	}
}

// aLeavesBeforeB holds lock l, queues request a and then b behind it, and
// ends a's call (its connection breaks). It returns the holder's grant and
// b's wait.
func aLeavesBeforeB(t *testing.T, s *Server) (fencelock.Grant, <-chan acquired) {
	t.Helper()
	h := queueBehind(t, s, "l")
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, AcquireRequest{Name: "l", TTL: time.Minute, Wait: time.Minute, RequestID: "a"})
		first <- err
	}()
	eventually(t, "a queued", func() bool { return s.fsm.Queued("l", "a") })
	b := waitFor(s, "l", "b")
	eventually(t, "b queued", func() bool { return s.fsm.Queued("l", "b") })
	cancel()
	<-first
	return h, b
}

// TestAcquire_RetryWithinTheGraceKeepsItsPlace: a caller whose call ended
// (a broken connection) and that comes back with the same request id within
// the grace keeps its place in line, ahead of those who queued after it.
func TestAcquire_RetryWithinTheGraceKeepsItsPlace(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	h, later := aLeavesBeforeB(t, s)
	again := waitFor(s, "l", "a")
	if err := s.Release(context.Background(), "l", h.LeaseID, h.Token); err != nil {
		t.Fatal(err)
	}
	got := <-again
	if got.err != nil {
		t.Fatalf("a's retry: %v", got.err)
	}
	if l, _ := s.fsm.Get("l"); l.Holder == nil || l.Holder.RequestID != "a" || len(l.Waiters) != 1 || l.Waiters[0].RequestID != "b" {
		t.Fatalf("lock after the release: %+v; want a holding and b waiting", l)
	}
	if err := s.Release(context.Background(), "l", got.g.LeaseID, got.g.Token); err != nil {
		t.Fatal(err)
	}
	if b := <-later; b.err != nil {
		t.Fatalf("b: %v", b.err)
	}
}

// TestAcquire_GrantToNobodyIsTakenBack: a request granted while no call
// waits for it is handed to a call that comes back within the grace, and
// otherwise its grant ends and the lock goes to the next in line.
func TestAcquire_GrantToNobodyIsTakenBack(t *testing.T) {
	t.Parallel()
	for _, back := range []bool{true, false} {
		t.Run(fmt.Sprintf("back=%v", back), func(t *testing.T) {
			s := openInProcess(t)
			h, next := aLeavesBeforeB(t, s)
			if err := s.Release(context.Background(), "l", h.LeaseID, h.Token); err != nil {
				t.Fatal(err)
			}
			granted, _ := s.fsm.Get("l")
			if granted.Holder == nil || granted.Holder.RequestID != "a" {
				t.Fatalf("after the release: %+v, want a granted", granted)
			}
			if back {
				got := <-waitFor(s, "l", "a")
				for errors.Is(got.err, fencelock.ErrUnavailable) { // ask again, as a client does
					time.Sleep(10 * time.Millisecond)
					got = <-waitFor(s, "l", "a")
				}
				if l, _ := s.fsm.Get("l"); l.Holder == nil || l.Holder.Detached {
					t.Fatalf("a came back, and its grant is still recorded as reaching nobody: %+v", l.Holder)
				}
				if got.err != nil || got.g.Token != granted.Holder.Token {
					t.Fatalf("a came back: %+v, %v; want its grant, token %d", got.g, got.err, granted.Holder.Token)
				}
				time.Sleep(callGrace + time.Second)
				if l, _ := s.fsm.Get("l"); l.Holder == nil || l.Holder.Token != got.g.Token {
					t.Fatalf("the grant handed to a was taken back: %+v", l)
				}
				return
			}
			eventually(t, "a's grant recorded as reaching nobody", func() bool {
				l, _ := s.fsm.Get("l")
				return l.Holder != nil && l.Holder.RequestID == "a" && l.Holder.Detached
			})
			b := <-next
			if b.err != nil {
				t.Fatalf("b, after a's grant to nobody was taken back: %v", b.err)
			}
		})
	}
}

// TestAcquire_WaitThatRunsOutLeavesTheQueue: a wait without keep_place
// that runs out answers LockHeld with the request already out of the queue;
// with keep_place it stays for the grace.
func TestAcquire_WaitThatRunsOutLeavesTheQueue(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	queueBehind(t, s, "l")
	ctx := context.Background()
	for _, keep := range []bool{false, true} {
		rid := fmt.Sprintf("keep-%v", keep)
		_, err := s.Acquire(ctx, AcquireRequest{Name: "l", TTL: time.Minute, Wait: 100 * time.Millisecond, RequestID: rid, KeepPlace: keep})
		if !errors.Is(err, fencelock.ErrLockHeld) {
			t.Fatalf("keep_place %v: %v, want ErrLockHeld", keep, err)
		}
		if q := s.fsm.Queued("l", rid); q != keep {
			t.Errorf("keep_place %v: queued %v after the answer", keep, q)
		}
	}
	eventually(t, "the kept place taken back", func() bool { return !s.fsm.Queued("l", "keep-true") })
}

// TestCancelWait_EndsTheCallsStillWaiting: a take-back from the client
// ends a call of an earlier attempt still waiting for the request.
func TestCancelWait_EndsTheCallsStillWaiting(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	queueBehind(t, s, "l")
	w := waitFor(s, "l", "r")
	eventually(t, "r queued", func() bool { return s.fsm.Queued("l", "r") })
	if err := s.CancelWait(context.Background(), "l", "r"); err != nil {
		t.Fatal(err)
	}
	if got := <-w; !errors.Is(got.err, fencelock.ErrUnavailable) {
		t.Fatalf("the waiting call after the cancel: %v, want unavailable (ask again)", got.err)
	}
	if s.fsm.Queued("l", "r") {
		t.Fatal("still queued after the cancel")
	}
}

// renewOne renews grant g alone.
func renewOne(ctx context.Context, s *Server, g fencelock.Grant) error {
	rs := []Renewal{{Name: g.Name, LeaseID: g.LeaseID, Token: g.Token}}
	s.Renew(ctx, rs)
	return rs[0].Err
}
