package bench

import "context"

// Target is one lock service under test. Its methods are safe for
// concurrent use.
type Target interface {
	// Name is the column label ("fencelock", "etcd", ...).
	Name() string
	// NewLocker returns the lock state of one benchmark client. id is the
	// client's index within the cell.
	NewLocker(ctx context.Context, id int) (Locker, error)
	// Close releases the target's connections (not the server).
	Close() error
}

// Locker is one client's view of a Target. It holds at most one lock at a
// time and is used by one goroutine.
type Locker interface {
	// Acquire waits until it holds the named lock, or ctx ends, and returns
	// the grant's fencing token.
	Acquire(ctx context.Context, name string) (uint64, error)
	// Release releases the lock the last Acquire took.
	Release(ctx context.Context) error
	// Close ends the locker's session, if it has one.
	Close() error
}

// SyncCounter is a Target that counts the disk syncs of its servers' logs
// (summed over its nodes) since they started; the report gives syncs per
// pair for it.
type SyncCounter interface {
	Syncs(ctx context.Context) (int64, error)
}
