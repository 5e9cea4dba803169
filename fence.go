package fencelock

import "context"

// Fence is the resource side of fencing: it remembers, per fence domain, the
// highest fencing token it has accepted, and refuses lower ones. Every
// resource adapter implements it (fence.Memory, store.Server, store.Client,
// postgres.Fence, redis.Fence); the adapters' write methods apply the same
// rule atomically inside each write, which is what makes fencing safe.
//
// A fence domain is the unit a token protects: the lock name by default, so
// that a critical section writing several keys is fenced as a whole, or a
// single key where the caller says so.
//
// Implementations are safe for concurrent use.
type Fence interface {
	// Check accepts token for domain if it is at least the highest token
	// the domain has accepted (equal is accepted), and makes it the new
	// highest in the same atomic step. On its own it writes nothing else:
	// it raises the bar so that holders with older tokens are refused from
	// now on. It returns an error wrapping ErrMissingToken for token 0, a
	// *StaleTokenError (errors.Is ErrStaleToken) for a lower token, and an
	// error wrapping ErrInvalidName for a malformed domain.
	Check(ctx context.Context, domain string, token Token) error

	// Highest returns the highest token domain has accepted, or 0 if it has
	// accepted none. It is a snapshot, never a substitute for Check: a
	// writer that compares tokens itself before writing races with newer
	// holders.
	Highest(ctx context.Context, domain string) (Token, error)
}
