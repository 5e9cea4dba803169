package fence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

func TestRefused_CountsRefusalsByAdapterAndReason(t *testing.T) {
	stale := func() float64 { return testutil.ToFloat64(fence.Refusals.WithLabelValues("memory", "stale")) }
	missing := func() float64 { return testutil.ToFloat64(fence.Refusals.WithLabelValues("memory", "missing_token")) }
	s0, m0 := stale(), missing()
	m := fence.NewMemory()
	ctx := context.Background()
	if err := m.Check(ctx, "d", 5); err != nil {
		t.Fatal(err)
	}
	if err := m.Check(ctx, "d", 4); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("Check(4) after 5 = %v, want a stale token", err)
	}
	if err := m.Check(ctx, "d", 0); !errors.Is(err, fencelock.ErrMissingToken) {
		t.Fatalf("Check(0) = %v, want a missing token", err)
	}
	if stale()-s0 != 1 || missing()-m0 != 1 {
		t.Errorf("refusals counted: stale +%v, missing +%v; want +1 each", stale()-s0, missing()-m0)
	}
	other := errors.New("disk full")
	if err := fence.Refused("memory", other); err != other {
		t.Errorf("Refused changed a non-refusal error")
	}
	if stale()-s0 != 1 {
		t.Errorf("a non-refusal error was counted")
	}
}
