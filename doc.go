// Package fencelock is the vocabulary of the fencelock lock service: fencing
// tokens, lock names, lease ids, and the errors every part of the system
// returns.
//
// A fencelock lock is a lease with two tokens. The ownership token (LeaseID) is
// random and only lets its holder renew or release its own grant. The fencing
// token (Token) strictly increases with every grant of a lock name and is never
// reused; the holder attaches it to every write, and the resource rejects any
// write whose token is lower than the highest it has accepted. The resource,
// not the lock service, is the final arbiter.
//
// This package depends on the standard library only. The lock service lives in
// server/ and fsm/, the Go client in client/, and resource-side enforcement in
// fence/ and the adapters named after their backends.
package fencelock
