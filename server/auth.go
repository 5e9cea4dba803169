package server

import (
	"context"
	"fmt"
	"net"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
)

// allow checks that the caller in ctx holds perm on name (Config.ACL).
func (s *Server) allow(ctx context.Context, perm acl.Permission, name fencelock.LockName) error {
	return s.acl.Check(ctx, perm, string(name))
}

// owner is the identity that owns the requests of the caller in ctx: ""
// without an ACL (request ids are then bearer secrets).
func (s *Server) owner(ctx context.Context) string {
	if !s.acl.Active() {
		return ""
	}
	return acl.IdentityOf(ctx)
}

// RequireAdmin checks a caller of an admin-only surface (backups, signing
// keys, the audit trail, Raft addresses, profiles), whose network address
// is peer: with an ACL it needs admin (the admin token counts); with only
// an admin token, that token; with neither, it must call from this machine
// (a loopback address). Errors: ErrUnauthenticated, ErrPermissionDenied.
func (s *Server) RequireAdmin(ctx context.Context, peer string) error {
	switch {
	case s.acl.Active():
		return s.allow(ctx, acl.Admin, "")
	case s.cfg.AdminToken != "":
		if acl.IdentityOf(ctx) == acl.AdminIdentity {
			return nil
		}
		return fmt.Errorf("the cluster's admin token is needed (Authorization: Bearer ...): %w", fencelock.ErrUnauthenticated)
	case isLoopback(peer):
		return nil
	}
	return fmt.Errorf("without an admin token (serve --admin-token-file) or a policy, admin surfaces answer this machine only: %w", fencelock.ErrUnauthenticated)
}

// isLoopback reports whether a host:port address is a loopback one.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
