package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
)

func TestMetrics_GaugesAndHistogramsFollowTheLocks(t *testing.T) {
	t.Parallel()
	srv := testproc.StartServer(t)
	c := newClient(t, srv.Addr)
	ctx := context.Background()
	for series, want := range map[string]float64{"fencelock_raft_leader": 1, `fencelock_raft_state{state="leader"}`: 1,
		`fencelock_raft_state{state="follower"}`: 0, "fencelock_locks_held": 0, "fencelock_waiters": 0} {
		if got := testproc.Metric(t, srv.Addr, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if testproc.Metric(t, srv.Addr, "fencelock_raft_term") < 1 || testproc.Metric(t, srv.Addr, "fencelock_leader_changes_total") < 0 {
		t.Errorf("term or leader changes missing")
	}
	held, err := c.Acquire(ctx, "m/a", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "m/a", client.WithTTL(10*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	for testproc.Metric(t, srv.Addr, "fencelock_waiters") != 1 {
		time.Sleep(20 * time.Millisecond)
	}
	if got := testproc.Metric(t, srv.Addr, "fencelock_locks_held"); got != 1 {
		t.Errorf("fencelock_locks_held = %v with one lock held, want 1", got)
	}
	time.Sleep(100 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := testproc.Metric(t, srv.Addr, "fencelock_lock_hold_seconds_count"); got != 2 {
		t.Errorf("fencelock_lock_hold_seconds_count = %v after two grants ended, want 2", got)
	}
	if got := testproc.Metric(t, srv.Addr, "fencelock_lock_wait_seconds_count"); got != 2 {
		t.Errorf("fencelock_lock_wait_seconds_count = %v after two grants, want 2", got)
	}
	if got := testproc.Metric(t, srv.Addr, `fencelock_lock_wait_seconds_bucket{le="0"}`); got != 1 {
		t.Errorf("grants that did not wait = %v, want 1 (the second waited)", got)
	}
	if got := testproc.Metric(t, srv.Addr, "fencelock_lock_hold_seconds_sum"); got < 0.1 {
		t.Errorf("hold time sum = %v s, want at least the 0.1 s the first grant was held", got)
	}
}

// A restart replays the log: its grants are no new events, and no new
// samples of the hold and wait histograms.
func TestEvents_ARestartDoesNotReplayThem(t *testing.T) {
	srv := testproc.StartServer(t)
	c := newClient(t, srv.Addr)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		l, err := c.Acquire(ctx, "replay/a", client.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := testproc.Metric(t, srv.Addr, "fencelock_lock_wait_seconds_count"); got != 3 {
		t.Fatalf("wait samples before the restart = %v, want 3", got)
	}
	srv.Kill9()
	srv.Start()
	if got := testproc.Metric(t, srv.Addr, "fencelock_lock_wait_seconds_count"); got != 0 {
		t.Errorf("wait samples after a restart = %v, want 0: the replayed log counted again", got)
	}
	resp, err := http.Get("http://" + srv.Addr + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if s := strings.TrimSpace(string(body)); s != "[]" {
		t.Errorf("events after a restart: %s, want none", s)
	}
}
