package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
)

// Permission is what an identity may do with locks under a prefix.
type Permission uint8

// The permissions of a policy.
const (
	PermRead  Permission = 1 << iota // Describe, List
	PermLock                         // Acquire, Renew, Release, CancelWait
	PermAdmin                        // membership, backups, keys, Raft addresses in Status
)

var permNames = map[string]Permission{"read": PermRead, "lock": PermLock, "admin": PermAdmin}

// AdminIdentity is the identity of the cluster's admin token: it may do
// everything.
const AdminIdentity = "admin"

// Anonymous is the identity of a caller that presented no credential.
const Anonymous = "anonymous"

// badToken marks a caller whose bearer token nobody issued.
const badToken = "\x00bad-token"

// ACL authenticates callers and says what each may do. A caller is the
// identity of its bearer token (tokens file: "IDENTITY SHA256-HEX-OF-TOKEN"
// per line), or else the Common Name of its client certificate, or else
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

// ParseACL reads a tokens file and a policy file.
func ParseACL(tokens, policy io.Reader) (*ACL, error) {
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

// active reports whether the ACL checks anything: without a tokens or a
// policy file everything is allowed.
func (a *ACL) active() bool { return a.tokens != nil || a.grants != nil }

// tokenIdentity returns the identity of a bearer token.
func (a *ACL) tokenIdentity(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	for h, id := range a.tokens { // constant time per entry: no early exit on a prefix
		if subtle.ConstantTimeCompare(h[:], sum[:]) == 1 {
			return id, true
		}
	}
	return "", false
}

// allows reports whether identity holds perm on name.
func (a *ACL) allows(identity string, perm Permission, name string) bool {
	if identity == AdminIdentity {
		return true
	}
	for _, g := range a.grants {
		if (g.identity == identity || g.identity == "*" && identity != Anonymous) && g.perms&perm != 0 && strings.HasPrefix(name, g.prefix) {
			return true
		}
	}
	return false
}

type identityKey struct{}

// identityOf returns the caller's identity in ctx (Anonymous if none).
func identityOf(ctx context.Context) string {
	if id, ok := ctx.Value(identityKey{}).(string); ok {
		return id
	}
	return Anonymous
}

// identify puts the caller's identity in the request's context: the admin
// token's, a token's of the ACL, or the client certificate's Common Name.
// A bearer token nobody issued is refused by every call that checks.
func (s *Server) identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := Anonymous
		if tok, ok := wire.AdminToken(r.Header); ok {
			switch known, isACL := s.acl.tokenIdentity(tok); {
			case s.cfg.AdminToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) == 1:
				id = AdminIdentity
			case isACL:
				id = known
			case s.acl.active():
				id = badToken
			}
		} else if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			id = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// allow checks that the caller in ctx holds perm on name; without an ACL
// everything is allowed. Errors: ErrUnauthenticated for an anonymous
// caller, ErrPermissionDenied for another.
func (s *Server) allow(ctx context.Context, perm Permission, name fencelock.LockName) error {
	if !s.acl.active() {
		return nil
	}
	id := identityOf(ctx)
	if s.acl.allows(id, perm, string(name)) {
		return nil
	}
	if id == badToken {
		return fmt.Errorf("%q: the bearer token is not one of this cluster's: %w", name, fencelock.ErrUnauthenticated)
	}
	if id == Anonymous {
		return fmt.Errorf("%q: this cluster wants a credential (a bearer token or a client certificate): %w", name, fencelock.ErrUnauthenticated)
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

// owner is the identity that owns the requests of the caller in ctx: ""
// without an ACL (request ids are then bearer secrets).
func (s *Server) owner(ctx context.Context) string {
	if !s.acl.active() {
		return ""
	}
	return identityOf(ctx)
}
