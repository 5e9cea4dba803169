// Package acl authenticates the callers of a node or a fenced store and
// says what each may do: a bearer token (a tokens file keeps its SHA-256)
// or a client certificate names an identity, and a policy grants
// identities read, lock and admin on lock-name (or fence-domain) prefixes,
// as etcd's RBAC on key ranges and Consul's key_prefix rules do.
package acl

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fencelock/fencelock"
)

// Permission is what an identity may do with locks under a prefix.
type Permission uint8

// The permissions of a policy.
const (
	Read  Permission = 1 << iota // Describe, List, CheckSequencer; the store: GET and HEAD of objects (by key) and fences (by domain)
	Lock                         // Acquire, Renew, Release, CancelWait; the store: writes (on the key and the domain) and fence raises
	Admin                        // membership, backups, keys, Raft addresses in Status, the audit trail, profiles
)

var permNames = map[string]Permission{"read": Read, "lock": Lock, "admin": Admin}

// AdminIdentity is the identity of the cluster's admin token: it may do
// everything.
const AdminIdentity = "admin"

// Anonymous is the identity of a caller that presented no credential.
const Anonymous = "anonymous"

// badToken marks a caller whose bearer token nobody issued, and badCert
// one whose client certificate names nobody: every check refuses them.
const (
	badToken = "\x00bad-token"
	badCert  = "\x00bad-certificate"
)

// ACL authenticates callers and says what each may do. A caller is the
// identity of its bearer token (tokens file: "IDENTITY SHA256-HEX-OF-TOKEN"
// per line), or else its client certificate's (CertIdentity), or else
// Anonymous. The policy ("IDENTITY PERMISSION[,PERMISSION] PREFIX" per line;
// PREFIX "*" for every name, IDENTITY "*" for every caller but Anonymous)
// grants permissions on lock names starting with PREFIX.
type ACL struct {
	tokens map[[sha256.Size]byte]string
	grants []aclGrant
}

type aclGrant struct {
	identity string
	perms    Permission
	prefix   string
}

// lines returns the non-empty, non-comment lines of r, split into fields.
func lines(r io.Reader) ([][]string, error) {
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(r, 16<<20))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, strings.Fields(l))
	}
	return out, sc.Err()
}

// Parse reads a tokens file and a policy file.
func Parse(tokens, policy io.Reader) (*ACL, error) {
	a := &ACL{tokens: map[[sha256.Size]byte]string{}}
	tl, err := lines(tokens)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	for i, f := range tl {
		h, err := hex.DecodeString(strings.TrimPrefix(f[len(f)-1], "sha256:"))
		if len(f) != 2 || err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("tokens line %d: want IDENTITY SHA256-HEX (\"fencelock token new NAME\" prints one): %w", i+1, fencelock.ErrInvalidArgument)
		}
		a.tokens[[sha256.Size]byte(h)] = f[0]
	}
	pl, err := lines(policy)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	for i, f := range pl {
		g := aclGrant{}
		if len(f) == 3 {
			g.identity, g.prefix = f[0], f[2]
			for _, p := range strings.Split(f[1], ",") {
				g.perms |= permNames[p]
				if permNames[p] == 0 {
					g.perms = 0
					break
				}
			}
		}
		if g.perms == 0 {
			return nil, fmt.Errorf("policy line %d: want IDENTITY read|lock|admin[,...] PREFIX (PREFIX * for every name): %w", i+1, fencelock.ErrInvalidArgument)
		}
		if g.prefix == "*" {
			g.prefix = ""
		}
		a.grants = append(a.grants, g)
	}
	return a, nil
}

// Active reports whether the ACL checks anything: without a tokens or a
// policy file everything is allowed.
func (a *ACL) Active() bool { return a.tokens != nil || a.grants != nil }

// TokenIdentity returns the identity of a bearer token.
func (a *ACL) TokenIdentity(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	for h, id := range a.tokens { // constant time per entry: no early exit on a prefix
		if subtle.ConstantTimeCompare(h[:], sum[:]) == 1 {
			return id, true
		}
	}
	return "", false
}

// Allows reports whether identity holds perm on name.
func (a *ACL) Allows(identity string, perm Permission, name string) bool {
	if identity == AdminIdentity {
		return true
	}
	for _, g := range a.grants {
		if (g.identity == identity || g.identity == "*" && named(identity)) && g.perms&perm != 0 && strings.HasPrefix(name, g.prefix) {
			return true
		}
	}
	return false
}

// named reports whether identity is a caller's name: not Anonymous, nor
// one of the marks of a credential nobody issued.
func named(identity string) bool {
	return identity != Anonymous && identity != badToken && identity != badCert
}

// CertIdentity returns the identity a client certificate names: its Common
// Name, or without one its first DNS name, or its first URI, or its first
// email address. A certificate that names none of them, or whose name is
// AdminIdentity or Anonymous, has no identity (ok false): its caller is
// refused by every check of an active ACL.
func CertIdentity(c *x509.Certificate) (id string, ok bool) {
	switch {
	case c.Subject.CommonName != "":
		id = c.Subject.CommonName
	case len(c.DNSNames) > 0:
		id = c.DNSNames[0]
	case len(c.URIs) > 0:
		id = c.URIs[0].String()
	case len(c.EmailAddresses) > 0:
		id = c.EmailAddresses[0]
	}
	if id == "" || id == AdminIdentity || id == Anonymous {
		return "", false
	}
	return id, true
}

type identityKey struct{}

// WithIdentity returns ctx carrying the caller's identity.
func WithIdentity(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityOf returns the caller's identity in ctx (Anonymous if none).
func IdentityOf(ctx context.Context) string {
	if id, ok := ctx.Value(identityKey{}).(string); ok {
		return id
	}
	return Anonymous
}

// Middleware puts the caller's identity in each request's context
// (IdentityOf): the admin token's (AdminIdentity; adminToken may be ""), a
// token's of a, or the client certificate's (CertIdentity). A bearer token
// nobody issued, or a certificate without an identity, makes a caller
// every check refuses.
func (a *ACL) Middleware(adminToken string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := Anonymous
		if tok, ok := bearer(r.Header); ok {
			switch known, isACL := a.TokenIdentity(tok); {
			case adminToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(adminToken)) == 1:
				id = AdminIdentity
			case isACL:
				id = known
			case a.Active():
				id = badToken
			}
		} else if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			id = badCert
			if name, ok := CertIdentity(r.TLS.PeerCertificates[0]); ok {
				id = name
			}
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// bearer returns the bearer token of a request's headers, if any.
func bearer(h http.Header) (string, bool) {
	return strings.CutPrefix(h.Get("Authorization"), "Bearer ")
}

// Check checks that the caller in ctx holds perm on name; an ACL that is
// not Active allows everything. Errors: ErrUnauthenticated for an anonymous
// caller (or one with a token nobody issued), ErrPermissionDenied for
// another.
func (a *ACL) Check(ctx context.Context, perm Permission, name string) error {
	if !a.Active() {
		return nil
	}
	id := IdentityOf(ctx)
	if a.Allows(id, perm, name) {
		return nil
	}
	if id == badToken {
		return fmt.Errorf("%q: the bearer token is not one of those issued: %w", name, fencelock.ErrUnauthenticated)
	}
	if id == badCert {
		return fmt.Errorf("%q: the client certificate names no identity (a Common Name, DNS name, URI or email address; not %q or %q): %w",
			name, AdminIdentity, Anonymous, fencelock.ErrUnauthenticated)
	}
	if id == Anonymous {
		return fmt.Errorf("%q: a credential is needed (a bearer token or a client certificate): %w", name, fencelock.ErrUnauthenticated)
	}
	return fmt.Errorf("%s may not %s %q: %w", id, permWord(perm), name, fencelock.ErrPermissionDenied)
}

func permWord(p Permission) string {
	for k, v := range permNames {
		if v == p {
			return k
		}
	}
	return "do that to"
}
