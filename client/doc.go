// Package client is the Go client of the fencelock lock service.
//
// Acquire returns a *Lock that carries the grant's fencing token and keeps
// its lease alive in the background (renewing at about TTL/3). Attach
// Lock.Token() to every write to the protected resource; the resource, not
// this client, has the final say.
//
// Lock.Context() is cancelled the moment the holder can no longer be sure it
// holds the lease: when the service answers NotHolder or LeaseExpired, and at
// the latest at (start of the last confirmed renewal + TTL - safety margin),
// measured on the monotonic clock, even if the service is unreachable. Run
// the critical section under that context; Do does this for you.
//
// Errors keep their identity across the network:
// errors.Is(err, fencelock.ErrLockHeld) works on what Acquire returns.
package client
