package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
)

func TestEvents_KeepTheNewestBounded(t *testing.T) {
	t.Parallel()
	var e events
	if got := e.recent(); len(got) != 0 {
		t.Fatalf("new ring: %d events", len(got))
	}
	for i := 0; i < maxEvents+10; i++ {
		e.add(Event{Kind: "grant", Lock: fmt.Sprint(i)})
	}
	got := e.recent()
	if len(got) != maxEvents {
		t.Fatalf("%d events kept, want %d", len(got), maxEvents)
	}
	if got[0].Lock != fmt.Sprint(maxEvents+9) || got[maxEvents-1].Lock != "10" {
		t.Errorf("kept %s..%s, want the newest first: %d..10", got[0].Lock, got[maxEvents-1].Lock, maxEvents+9)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Time.After(got[i-1].Time) {
			t.Fatalf("event %d is newer than event %d", i, i-1)
		}
	}
}

// TestRefused_CallerGoneIsNoRefusal: a call whose caller went away is counted
// by its own code and makes no event; a refusal makes one.
func TestRefused_CallerGoneIsNoRefusal(t *testing.T) {
	t.Parallel()
	s := openInProcess(t)
	before := len(s.events.recent())
	s.Refused("Acquire", fmt.Errorf("acquire %q: %w", "x", context.Canceled))
	if got := testutil.ToFloat64(s.metrics.rejected.WithLabelValues("Acquire", "canceled")); got != 1 {
		t.Errorf("rejected{Acquire,canceled} = %v, want 1", got)
	}
	if got := len(s.events.recent()); got != before {
		t.Errorf("a call whose caller left made %d events", got-before)
	}
	s.Refused("Acquire", fmt.Errorf("bad: %w", fencelock.ErrInvalidArgument))
	if got := s.events.recent(); len(got) != before+1 || got[0].Kind != "refusal" {
		t.Errorf("a refusal made events %+v, want one refusal", got)
	}
}

// TestRecord_AuditLinesNameTheGrantNotItsSecrets: a grant and its release
// are audit lines at level info with the kind, lock and token, and never
// the lease id or request id.
func TestRecord_AuditLinesNameTheGrantNotItsSecrets(t *testing.T) {
	t.Parallel()
	var out testproc.SyncBuffer
	s := openInProcessWith(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&out, nil)) })
	g, err := s.Acquire(t.Context(), AcquireRequest{Name: "audited", RequestID: "rid-secret", Holder: "worker-7", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(t.Context(), g.Name, g.LeaseID, g.Token); err != nil {
		t.Fatal(err)
	}
	log := out.String()
	for _, want := range []string{
		fmt.Sprintf("level=INFO msg=audit kind=grant lock=audited token=%d holder=worker-7", g.Token),
		fmt.Sprintf("level=INFO msg=audit kind=release lock=audited token=%d", g.Token),
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log without %q:\n%s", want, log)
		}
	}
	for _, secret := range []string{string(g.LeaseID), "rid-secret"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q:\n%s", secret, log)
		}
	}
}
