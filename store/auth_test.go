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

// TestServer_ACLChecksKeyAndDomain: with a policy, a write needs lock on the
// object's key as well as on its fence domain, and a read needs read on the
// key (or, for a fence, on the domain).
func TestServer_ACLChecksKeyAndDomain(t *testing.T) {
	billingTok, billingLine := token("billing")
	hrTok, hrLine := token("hr")
	auditTok, auditLine := token("audit")
	a, err := acl.Parse(strings.NewReader(billingLine+"\n"+hrLine+"\n"+auditLine+"\n"),
		strings.NewReader("billing lock billing/\nhr lock hr/\naudit read hr/\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := store.DefaultConfig()
	cfg.ACL = a
	ts := startStore(t, cfg)
	as := func(tok string, kv ...string) http.Header {
		h := hdr(kv...)
		if tok != "" {
			h.Set("Authorization", "Bearer "+tok)
		}
		return h
	}
	steps := []struct {
		name       string
		method     string
		path       string
		header     http.Header
		wantStatus int
	}{
		{"billing writes hr's key in its own domain", "PUT", "/v1/objects/hr/payroll.csv", as(billingTok, "Fencing-Token", "5", "Fencing-Domain", "billing/x"), 403},
		{"the refused write created nothing", "GET", "/v1/objects/hr/payroll.csv", as(auditTok), 404},
		{"the refused write raised no fence", "GET", "/v1/fences/billing/x", as(billingTok), 403},
		{"hr writes its key", "PUT", "/v1/objects/hr/payroll.csv", as(hrTok, "Fencing-Token", "7", "Fencing-Domain", "hr/payroll"), 200},
		{"hr overwrites its key", "PUT", "/v1/objects/hr/payroll.csv", as(hrTok, "Fencing-Token", "8", "Fencing-Domain", "hr/payroll"), 200},
		{"hr writes a key in billing's domain", "PUT", "/v1/objects/hr/other.csv", as(hrTok, "Fencing-Token", "8", "Fencing-Domain", "billing/x"), 403},
		{"billing deletes hr's key", "DELETE", "/v1/objects/hr/payroll.csv", as(billingTok, "Fencing-Token", "9", "Fencing-Domain", "billing/x"), 403},
		{"billing raises hr's fence", "POST", "/v1/fences/hr/payroll", as(billingTok, "Fencing-Token", "9"), 403},
		{"billing reads hr's key", "GET", "/v1/objects/hr/payroll.csv", as(billingTok), 403},
		{"billing reads hr's key with HEAD", "HEAD", "/v1/objects/hr/payroll.csv", as(billingTok), 403},
		{"billing reads hr's fence", "GET", "/v1/fences/hr/payroll", as(billingTok), 403},
		{"hr, with lock only, reads its key", "GET", "/v1/objects/hr/payroll.csv", as(hrTok), 403},
		{"an anonymous caller reads hr's key", "GET", "/v1/objects/hr/payroll.csv", nil, 401},
		{"audit reads hr's key", "GET", "/v1/objects/hr/payroll.csv", as(auditTok), 200},
		{"audit reads hr's key with HEAD", "HEAD", "/v1/objects/hr/payroll.csv", as(auditTok), 200},
		{"audit reads hr's fence", "GET", "/v1/fences/hr/payroll", as(auditTok), 200},
		{"audit writes hr's key", "PUT", "/v1/objects/hr/payroll.csv", as(auditTok, "Fencing-Token", "9", "Fencing-Domain", "hr/payroll"), 403},
		{"hr deletes its key", "DELETE", "/v1/objects/hr/payroll.csv", as(hrTok, "Fencing-Token", "9", "Fencing-Domain", "hr/payroll"), 204},
	}
	for _, st := range steps {
		resp, body := ts.do(t, st.method, st.path, st.header, nil)
		if resp.StatusCode != st.wantStatus {
			t.Errorf("%s: %s %s answered %d %s, want %d", st.name, st.method, st.path, resp.StatusCode, body, st.wantStatus)
		}
	}
	if h, _ := ts.srv.Highest(t.Context(), "billing/x"); h != 0 {
		t.Errorf("highest of billing/x is %d, want 0: every write in it was refused", h)
	}
}

// TestServer_WithoutPolicyAllowsAll: without a policy, any caller reads and
// writes any key in any domain.
func TestServer_WithoutPolicyAllowsAll(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	resp, body := ts.do(t, "PUT", "/v1/objects/hr/payroll.csv", hdr("Fencing-Token", "5", "Fencing-Domain", "billing/x"), []byte("pay"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT hr/payroll.csv in domain billing/x answered %d %s, want 200", resp.StatusCode, body)
	}
	for _, path := range []string{"/v1/objects/hr/payroll.csv", "/v1/fences/billing/x"} {
		if resp, body := ts.do(t, "GET", path, nil, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s answered %d %s, want 200", path, resp.StatusCode, body)
		}
	}
}
