package conformance_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/fence"
)

// unfenced accepts every write: a resource that forgot the check.
type unfenced struct{ fence.MemoryResource }

func (u *unfenced) Put(ctx context.Context, _ string, _ fencelock.Token, key string, value []byte) (int64, error) {
	return u.MemoryResource.Put(ctx, "all", 1, key, value)
}

// panicky panics on every read.
type panicky struct{ fence.MemoryResource }

func (*panicky) Get(context.Context, string) ([]byte, int64, error) { panic("boom") }

func outcomes(rs []conformance.Result) map[string]int {
	n := map[string]int{}
	for _, r := range rs {
		n[r.Outcome]++
	}
	return n
}

func TestRun(t *testing.T) {
	var seen int
	rs := conformance.Run(t.Context(), conformance.Target{Resource: &fence.MemoryResource{}}, func(conformance.Result) { seen++ })
	if got := outcomes(rs); got[conformance.Fail] != 0 || got[conformance.Skip] != 1 || seen != len(rs) || len(rs) != len(conformance.Cases()) {
		t.Fatalf("memory resource: %v over %d results, progress called %d times; want all passed but the restart case: %+v", got, len(rs), seen, rs)
	}
	for _, r := range rs {
		if r.Outcome == conformance.Skip && !strings.Contains(r.Case, "restart") {
			t.Errorf("case %q skipped: %v", r.Case, r.Messages)
		}
	}
}

func TestRun_failsAResourceThatDoesNotFence(t *testing.T) {
	rs := conformance.Run(t.Context(), conformance.Target{Resource: &unfenced{}}, nil)
	failed := map[string]bool{}
	for _, r := range rs {
		if r.Outcome == conformance.Fail {
			failed[r.Case] = true
		}
	}
	for _, c := range []string{"34 then 33: 33 is refused and changes nothing", "token 0 is refused as missing", "concurrent writers with random tokens"} {
		if !failed[c] {
			t.Errorf("case %q passed against a resource that accepts every write", c)
		}
	}
}

func TestRun_panicFailsTheCase(t *testing.T) {
	rs := conformance.Run(t.Context(), conformance.Target{Resource: &panicky{}}, nil)
	if r := rs[0]; r.Outcome != conformance.Fail || !strings.Contains(strings.Join(r.Messages, " "), "panic: boom") {
		t.Fatalf("first case: %+v, want failed with the panic", r)
	}
}
