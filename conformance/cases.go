package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

// T is what a case reports to. A *testing.T satisfies it; Run brings one of
// its own.
type T interface {
	Helper()
	Name() string
	Context() context.Context
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any) // ends the case as failed
	Skip(args ...any)                  // ends the case as skipped
}

// Target is one fenced resource under test.
type Target struct {
	// Resource is the resource: its fence, fenced writes and reads. A
	// resource that cannot read or raise highest tokens on their own (an
	// HTTP service without fence endpoints) returns errors wrapping
	// errors.ErrUnsupported from Check and Highest: the cases then skip
	// those checks.
	Resource fence.Resource

	// Restart stops the resource and starts it again on the same durable
	// state, returning the Target to use from then on. Nil means the
	// resource keeps nothing across a restart; the restart case is skipped.
	Restart func(t T) Target
}

// Case is one case of the suite.
type Case struct {
	Name string
	Run  func(t T, target Target)
}

// Cases returns the suite's cases, in order. Each uses domains and keys of
// its own (named after t.Name() and a random number), so they may share one
// resource, and run again on it.
func Cases() []Case {
	var cs []Case
	for _, tc := range sequenceCases {
		cs = append(cs, Case{tc.name, func(t T, target Target) { runSequence(t, target, tc) }})
	}
	return append(cs,
		Case{"check raises the bar without writing", testCheck},
		Case{"unknown domain has highest 0", testUnknownDomain},
		Case{"restart keeps the highest token", testRestart},
		Case{"concurrent writers with random tokens", testConcurrent},
	)
}

type write struct {
	domain  int // index into the case's domains
	key     int // index into the case's keys
	token   fencelock.Token
	wantErr error // nil, fencelock.ErrStaleToken or fencelock.ErrMissingToken
}

type sequenceCase struct {
	name        string
	writes      []write
	wantHighest []fencelock.Token // per domain, after all writes
	wantValue   []int             // per key: index of the write whose value it must hold, -1 for none
}

var sequenceCases = []sequenceCase{
	{
		name:        "33 then 34 are both accepted",
		writes:      []write{{token: 33}, {token: 34}},
		wantHighest: []fencelock.Token{34},
		wantValue:   []int{1},
	},
	{
		name:        "34 then 33: 33 is refused and changes nothing",
		writes:      []write{{token: 34}, {token: 33, wantErr: fencelock.ErrStaleToken}},
		wantHighest: []fencelock.Token{34},
		wantValue:   []int{0},
	},
	{
		name:        "equal token is accepted again",
		writes:      []write{{token: 34}, {token: 34}},
		wantHighest: []fencelock.Token{34},
		wantValue:   []int{1},
	},
	{
		name:        "token 0 is refused as missing",
		writes:      []write{{token: 0, wantErr: fencelock.ErrMissingToken}},
		wantHighest: []fencelock.Token{0},
		wantValue:   []int{-1},
	},
	{
		name:        "token 0 is refused after an accepted write",
		writes:      []write{{token: 7}, {token: 0, wantErr: fencelock.ErrMissingToken}},
		wantHighest: []fencelock.Token{7},
		wantValue:   []int{0},
	},
	{
		// The service's highest tokens (2^53 - 1, the last epoch's) are
		// compared as integers, not rounded: one below is refused.
		name:        "tokens at the ceiling compare exactly",
		writes:      []write{{token: fencelock.MaxToken}, {token: fencelock.MaxToken - 1, wantErr: fencelock.ErrStaleToken}, {token: fencelock.MaxToken}},
		wantHighest: []fencelock.Token{fencelock.MaxToken},
		wantValue:   []int{2},
	},
	{
		name: "a domain fences every key in it",
		writes: []write{
			{key: 0, token: 34},
			{key: 1, token: 33, wantErr: fencelock.ErrStaleToken},
		},
		wantHighest: []fencelock.Token{34},
		wantValue:   []int{0, -1},
	},
	{
		name: "domains are independent",
		writes: []write{
			{domain: 0, key: 0, token: 34},
			{domain: 1, key: 1, token: 33},
		},
		wantHighest: []fencelock.Token{34, 33},
		wantValue:   []int{0, 1},
	},
}

// names returns n domain or key names unique to tb.
func names(tb T, kind string, n int) []string {
	tb.Helper()
	base := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, tb.Name())
	id := rand.Uint64()
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("fencelocktest/%s-%x/%s%d", base, id, kind, i)
	}
	return out
}

func valueOf(writeIndex int, token fencelock.Token) []byte {
	return fmt.Appendf(nil, "%d/w%d", token, writeIndex)
}

func runSequence(t T, target Target, tc sequenceCase) {
	t.Helper()
	ctx := t.Context()
	domains := names(t, "domain", len(tc.wantHighest))
	keys := names(t, "key", len(tc.wantValue))
	versions := make([]int64, len(keys)) // per key: the version of its last accepted write
	for i, w := range tc.writes {
		what := fmt.Sprintf("write %d (token %d)", i, w.token)
		v, err := target.Resource.Put(ctx, domains[w.domain], w.token, keys[w.key], valueOf(i, w.token))
		checkWriteErr(t, what, err, w.wantErr, domains[w.domain], w.token)
		if err == nil {
			checkVersion(t, what, versions[w.key], v)
			versions[w.key] = v
		}
	}
	for i, d := range domains {
		checkHighest(t, target, d, tc.wantHighest[i])
	}
	for i, k := range keys {
		var want []byte
		if j := tc.wantValue[i]; j >= 0 {
			want = valueOf(j, tc.writes[j].token)
		}
		if got := checkValue(t, target, k, want); got != versions[i] {
			t.Fatalf("Get(%q) returned version %d, want %d, the version of its last accepted write", k, got, versions[i])
		}
	}
}

// checkVersion checks that an accepted write of a key created a version
// above the key's previous one, or that the resource numbers no versions.
func checkVersion(tb T, what string, prev, got int64) {
	tb.Helper()
	if got != 0 && got <= prev || got == 0 && prev != 0 {
		tb.Fatalf("%s created version %d after version %d; want a higher version, or 0 for every write", what, got, prev)
	}
}

func checkWriteErr(tb T, what string, err, wantErr error, domain string, token fencelock.Token) {
	tb.Helper()
	switch {
	case wantErr == nil && err != nil:
		tb.Fatalf("%s returned %v, want it accepted", what, err)
	case wantErr != nil && !errors.Is(err, wantErr):
		tb.Fatalf("%s returned %v, want an error wrapping %q", what, err, wantErr)
	case errors.Is(wantErr, fencelock.ErrStaleToken):
		var stale *fencelock.StaleTokenError
		if !errors.As(err, &stale) {
			tb.Fatalf("%s returned %T (%v), want a *fencelock.StaleTokenError", what, err, err)
		}
		if stale.Domain != domain || stale.Token != token || stale.Highest <= token {
			tb.Fatalf("%s: StaleTokenError is {Domain:%q Token:%d Highest:%d}, want domain %q, token %d and a higher Highest",
				what, stale.Domain, stale.Token, stale.Highest, domain, token)
		}
	}
}

func checkHighest(tb T, target Target, domain string, want fencelock.Token) {
	tb.Helper()
	got, err := target.Resource.Highest(tb.Context(), domain)
	if errors.Is(err, errors.ErrUnsupported) {
		return
	}
	if err != nil {
		tb.Fatalf("Highest(%q) returned error %v", domain, err)
	}
	if got != want {
		tb.Fatalf("Highest(%q) = %d, want %d", domain, got, want)
	}
}

// checkValue checks key's value (want nil: none) and returns its version.
func checkValue(tb T, target Target, key string, want []byte) int64 {
	tb.Helper()
	got, version, err := target.Resource.Get(tb.Context(), key)
	ok := err == nil
	switch {
	case err != nil && !errors.Is(err, fencelock.ErrNotFound):
		tb.Fatalf("Get(%q) returned error %v", key, err)
	case want == nil && ok:
		tb.Fatalf("Get(%q) = %q, want no value: a refused write must store nothing", key, got)
	case want != nil && !ok:
		tb.Fatalf("Get(%q) found no value, want %q", key, want)
	case want != nil && string(got) != string(want):
		tb.Fatalf("Get(%q) = %q, want %q", key, got, want)
	}
	return version
}

func testCheck(t T, target Target) {
	ctx := t.Context()
	d, k := names(t, "domain", 1)[0], names(t, "key", 1)[0]
	err := target.Resource.Check(ctx, d, 40)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip("skipping: the resource cannot raise a domain's token on its own (" + err.Error() + ")")
		return
	}
	if err != nil {
		t.Fatalf("Check(%q, 40) returned %v, want it accepted", d, err)
	}
	checkHighest(t, target, d, 40)
	checkValue(t, target, k, nil)
	_, err = target.Resource.Put(ctx, d, 39, k, valueOf(0, 39))
	checkWriteErr(t, "write with token 39 after Check(40)", err, fencelock.ErrStaleToken, d, 39)
	checkWriteErr(t, "Check(0)", target.Resource.Check(ctx, d, 0), fencelock.ErrMissingToken, d, 0)
	checkWriteErr(t, "Check(39)", target.Resource.Check(ctx, d, 39), fencelock.ErrStaleToken, d, 39)
	if _, err := target.Resource.Put(ctx, d, 40, k, valueOf(1, 40)); err != nil {
		t.Fatalf("write with token 40 after Check(40) returned %v, want it accepted", err)
	}
	checkValue(t, target, k, valueOf(1, 40))
}

func testUnknownDomain(t T, target Target) {
	_, err := target.Resource.Highest(t.Context(), names(t, "domain", 1)[0])
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip("skipping: the resource cannot read a domain's token on its own (" + err.Error() + ")")
		return
	}
	checkHighest(t, target, names(t, "domain", 1)[0], 0)
}

func testRestart(t T, target Target) {
	if target.Restart == nil {
		t.Skip("skipping: no way to restart this resource was given (Target.Restart is nil)")
		return
	}
	ctx := t.Context()
	d, k := names(t, "domain", 1)[0], names(t, "key", 1)[0]
	if _, err := target.Resource.Put(ctx, d, 34, k, valueOf(0, 34)); err != nil {
		t.Fatalf("write with token 34 returned %v, want it accepted", err)
	}
	target = target.Restart(t)
	checkHighest(t, target, d, 34)
	_, err := target.Resource.Put(ctx, d, 33, k, valueOf(1, 33))
	checkWriteErr(t, "write with token 33 after the restart", err, fencelock.ErrStaleToken, d, 33)
	checkValue(t, target, k, valueOf(0, 34))
}
