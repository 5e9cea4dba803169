package server

import (
	"context"

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
