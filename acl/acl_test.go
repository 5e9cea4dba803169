package acl

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
)

func hashOf(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }

func testACL(t *testing.T) *ACL {
	t.Helper()
	a, err := Parse(strings.NewReader("# callers\nbilling "+hashOf("b-secret")+"\nops sha256:"+hashOf("o-secret")+"\n"),
		strings.NewReader("billing lock,read billing/\nops admin *\n* read public/\n"))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestParse(t *testing.T) {
	a := testACL(t)
	if id, ok := a.TokenIdentity("b-secret"); !ok || id != "billing" {
		t.Fatalf("token identity %q %v", id, ok)
	}
	if _, ok := a.TokenIdentity("b-secre"); ok {
		t.Fatal("a wrong token was known")
	}
	for _, tt := range []struct {
		id   string
		perm Permission
		name string
		want bool
	}{
		{"billing", Lock, "billing/42", true},
		{"billing", Lock, "hr/1", false},
		{"billing", Admin, "", false},
		{"ops", Admin, "", true},
		{"ops", Lock, "billing/42", false},
		{"someone", Read, "public/x", true},
		{Anonymous, Read, "public/x", false},
		{AdminIdentity, Lock, "anything", true},
	} {
		if got := a.Allows(tt.id, tt.perm, tt.name); got != tt.want {
			t.Errorf("allows(%s, %d, %q) = %v, want %v", tt.id, tt.perm, tt.name, got, tt.want)
		}
	}
	for _, bad := range []struct{ tokens, policy string }{
		{"billing nothex", ""}, {"billing", ""}, {"", "billing write billing/"}, {"", "billing lock"},
	} {
		if _, err := Parse(strings.NewReader(bad.tokens), strings.NewReader(bad.policy)); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("Parse(%q, %q) = %v, want ErrInvalidArgument", bad.tokens, bad.policy, err)
		}
	}
}

// TestMiddleware_identities: a certificate is its Common Name, else its
// first DNS name, never ""; one naming nobody, or "admin", and a bearer
// token nobody issued are refused even by a "*" line.
func TestMiddleware_identities(t *testing.T) {
	a := testACL(t)
	for _, tt := range []struct {
		what   string
		cert   *x509.Certificate
		bearer string
		want   error
	}{
		{"a Common Name", &x509.Certificate{Subject: pkix.Name{CommonName: "someone"}}, "", nil},
		{"DNS names only", &x509.Certificate{DNSNames: []string{"svc.internal"}}, "", nil},
		{"no name", &x509.Certificate{}, "", fencelock.ErrUnauthenticated},
		{"the admin's name", &x509.Certificate{Subject: pkix.Name{CommonName: AdminIdentity}}, "", fencelock.ErrUnauthenticated},
		{"a token nobody issued", nil, "not-issued", fencelock.ErrUnauthenticated},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tt.cert != nil {
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{tt.cert}}
		}
		if tt.bearer != "" {
			r.Header.Set("Authorization", "Bearer "+tt.bearer)
		}
		var got error
		a.Middleware("", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			if id := IdentityOf(r.Context()); id == "" {
				t.Errorf("%s: identity \"\"", tt.what)
			}
			got = a.Check(r.Context(), Read, "public/x") // "* read public/"
		})).ServeHTTP(httptest.NewRecorder(), r)
		if tt.want == nil && got != nil || tt.want != nil && !errors.Is(got, tt.want) {
			t.Errorf("%s: read public/x: %v, want %v", tt.what, got, tt.want)
		}
	}
}
