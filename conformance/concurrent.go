package conformance

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// concurrentWriters write at once with tokens drawn from 1..concurrentMaxToken,
// so that many collide (equal tokens) and many arrive after a higher one.
const (
	concurrentWriters  = 50
	concurrentMaxToken = 20
)

type outcome struct {
	token    fencelock.Token
	accepted bool
	highest  fencelock.Token // from the StaleTokenError of a refused write
}

// tokenOf returns the token a suite value was written with.
func tokenOf(tb T, value []byte) fencelock.Token {
	tb.Helper()
	s, _, _ := bytes.Cut(value, []byte("/"))
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		tb.Errorf("value %q was not written by the suite", value)
	}
	return fencelock.Token(v)
}

// watch reads key until done is closed and fails t if its value's token
// ever goes down.
func watch(t T, target Target, key string, done <-chan struct{}) {
	defer recoverTo(t)
	var last fencelock.Token
	for {
		select {
		case <-done:
			return
		default:
		}
		time.Sleep(time.Millisecond) // a remote resource is paid per request
		v, _, err := target.Resource.Get(t.Context(), key)
		if errors.Is(err, fencelock.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Errorf("reader: Get(%q) returned error %v", key, err)
			return
		}
		tok := tokenOf(t, v)
		if tok < last {
			t.Errorf("reader saw %q hold token %d after token %d: an older token overwrote a newer one", key, tok, last)
			return
		}
		last = tok
	}
}

// testConcurrent runs 50 writers over two domains (one key each) while one
// reader per key watches the stored value. The accepted tokens of a domain
// must form a non-decreasing sequence: no reader may see the value's token go
// down, and every writer must read back its own token or a higher one. At the
// end, the domain's highest token and the stored value must both come from
// the highest accepted token, and every refusal must name a token that was
// accepted.
func testConcurrent(t T, target Target) {
	ctx := t.Context()
	domains, keys := names(t, "domain", 2), names(t, "key", 2)

	var mu sync.Mutex
	outcomes := make([][]outcome, len(domains))
	done := make(chan struct{})

	var readers sync.WaitGroup
	for _, k := range keys {
		readers.Go(func() { watch(t, target, k, done) })
	}

	var writers sync.WaitGroup
	for g := range concurrentWriters {
		writers.Go(func() {
			defer recoverTo(t)
			i := g % len(domains)
			tok := fencelock.Token(1 + rand.IntN(concurrentMaxToken))
			_, err := target.Resource.Put(ctx, domains[i], tok, keys[i], valueOf(g, tok))
			o := outcome{token: tok, accepted: err == nil}
			var stale *fencelock.StaleTokenError
			switch {
			case err == nil:
				v, _, err := target.Resource.Get(ctx, keys[i])
				if err != nil {
					t.Errorf("writer %d: Get(%q) after an accepted write returned error %v", g, keys[i], err)
				} else if got := tokenOf(t, v); got < tok {
					t.Errorf("writer %d: after its write with token %d was accepted, %q holds token %d", g, tok, keys[i], got)
				}
			case errors.As(err, &stale):
				if stale.Domain != domains[i] || stale.Token != tok || stale.Highest <= tok {
					t.Errorf("writer %d: StaleTokenError is {Domain:%q Token:%d Highest:%d}, want domain %q, token %d and a higher Highest",
						g, stale.Domain, stale.Token, stale.Highest, domains[i], tok)
				}
				o.highest = stale.Highest
			default:
				t.Errorf("writer %d: write with token %d returned %v, want it accepted or a *fencelock.StaleTokenError", g, tok, err)
			}
			mu.Lock()
			outcomes[i] = append(outcomes[i], o)
			mu.Unlock()
		})
	}
	writers.Wait()
	close(done)
	readers.Wait()

	for i, d := range domains {
		accepted := map[fencelock.Token]bool{}
		var top fencelock.Token
		for _, o := range outcomes[i] {
			if o.accepted {
				accepted[o.token] = true
				top = max(top, o.token)
			}
		}
		if len(accepted) == 0 {
			t.Fatalf("domain %q accepted no write at all, want at least the first one", d)
		}
		for _, o := range outcomes[i] {
			if !o.accepted && (o.token >= top || !accepted[o.highest]) {
				t.Errorf("domain %q refused token %d citing highest %d; the highest accepted token is %d and the accepted set is %v",
					d, o.token, o.highest, top, accepted)
			}
		}
		checkHighest(t, target, d, top)
		v, _, err := target.Resource.Get(ctx, keys[i])
		if err != nil {
			t.Fatalf("Get(%q) at the end returned error %v", keys[i], err)
		}
		if got := tokenOf(t, v); got != top {
			t.Errorf("%q ends with the value of token %d, want the value of the highest accepted token %d", keys[i], got, top)
		}
	}
}

// recoverTo turns a panic of a case's goroutine into a failure of t.
func recoverTo(t T) {
	if p := recover(); p != nil {
		t.Errorf("panic: %v", p)
	}
}
