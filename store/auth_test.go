package store_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/store"
)

func token(name string) (tok, line string) {
	sum := sha256.Sum256([]byte(name + "-secret"))
	return name + "-secret", name + " " + hex.EncodeToString(sum[:])
}

// TestServer_WritesNeedACredential: with an ACL, a write or a fence raise
// in a domain needs lock on it, so nobody else can squat a domain's fence;
// Idempotency-Keys are the caller's own.
func TestServer_WritesNeedACredential(t *testing.T) {
	billingTok, billingLine := token("billing")
	otherTok, otherLine := token("other")
	a, err := acl.Parse(strings.NewReader(billingLine+"\n"+otherLine+"\n"), strings.NewReader("billing lock reports\nother lock *\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := store.DefaultConfig()
	cfg.ACL = a
	ts := startStore(t, cfg)
	anon := ts.client
	if err := anon.Check(t.Context(), "reports", 1<<52); !errors.Is(err, fencelock.ErrUnauthenticated) {
		t.Fatalf("a fence raise without a credential: %v, want ErrUnauthenticated", err)
	}
	billing, _ := store.NewClient(ts.http.URL, store.WithToken(billingTok))
	if _, err := billing.Put(t.Context(), "reports/a.pdf", 5, bytes.NewReader([]byte("x")), store.WithDomain("hr")); !errors.Is(err, fencelock.ErrPermissionDenied) {
		t.Fatalf("a write in a domain billing may not lock: %v, want ErrPermissionDenied", err)
	}
	if _, err := billing.Put(t.Context(), "reports/a.pdf", 5, bytes.NewReader([]byte("x")), store.WithDomain("reports"), store.WithIdempotencyKey("k1")); err != nil {
		t.Fatal(err)
	}
	other, _ := store.NewClient(ts.http.URL, store.WithToken(otherTok))
	if _, err := other.Put(t.Context(), "other.txt", 7, bytes.NewReader([]byte("y")), store.WithIdempotencyKey("k1")); err != nil {
		t.Fatalf("another caller's write with the same Idempotency-Key: %v, want its own write", err)
	}
	if h, _ := ts.srv.Highest(t.Context(), "reports"); h != 5 {
		t.Fatalf("highest of reports %d, want 5: nobody but billing raised it", h)
	}
}

// TestServer_RefusalsAddNoMetricSeries: refused writes to thousands of
// domains leave the metrics the same size.
func TestServer_RefusalsAddNoMetricSeries(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	size := func() int {
		resp, err := http.Get(ts.http.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return bytes.Count(b, []byte("\n"))
	}
	for i := range 3 { // every series the refusals use exists
		_ = ts.client.Check(t.Context(), fmt.Sprint("warm", i), 0)
		_ = ts.client.Check(t.Context(), "warm", 9)
		_ = ts.client.Check(t.Context(), "warm", 1)
	}
	before := size()
	for i := range 2000 {
		_ = ts.client.Check(t.Context(), fmt.Sprint("victim-", i), 0)
	}
	if after := size(); after != before {
		t.Fatalf("/metrics grew from %d to %d lines after 2,000 refusals in new domains", before, after)
	}
}
