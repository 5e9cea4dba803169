package fencelocktest

import (
	"testing"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/fence"
)

// Target is one fenced resource under test, as RunFenceSuite sees it.
type Target struct {
	// Resource is the resource: its fence, fenced writes and reads.
	Resource fence.Resource

	// Restart stops the resource and starts it again on the same durable
	// state, returning the Target to use from then on. Nil means the
	// resource keeps nothing across a restart; the restart case is skipped.
	Restart func(tb testing.TB) Target
}

// RunFenceSuite runs the shared fence cases (package conformance) as
// subtests of t. open returns a Target for one subtest; it may return the
// same resource every time, since each subtest uses domains and keys no
// other subtest uses, and it should register its cleanup with tb.Cleanup.
func RunFenceSuite(t *testing.T, open func(tb testing.TB) Target) {
	t.Helper()
	for _, c := range conformance.Cases() {
		t.Run(c.Name, func(t *testing.T) { c.Run(t, convert(t, open(t))) })
	}
}

func convert(tb testing.TB, target Target) conformance.Target {
	ct := conformance.Target{Resource: target.Resource}
	if target.Restart != nil {
		ct.Restart = func(conformance.T) conformance.Target { return convert(tb, target.Restart(tb)) }
	}
	return ct
}
