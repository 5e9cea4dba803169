// Package fsm is the lock table that Raft replicates: a deterministic state
// machine with no I/O and no clock. Time enters only as values inside
// commands (Command.Now, set by the proposer), so every replica that applies
// the same log reaches the same state.
//
// Guarantees:
//   - A lock's fencing token is the Raft log index of the entry that granted
//     it, so tokens strictly increase per lock and are never reused, across
//     release, expiry, deletion of the lock's entry, restart and snapshot install.
//   - Release and Expire take effect only if the (lease id, token) or token
//     they name is the lock's current grant.
//   - Waiters are granted in FIFO order, in the same entry that freed the lock.
//     Queueing, granting and cancelling a waiter cost O(1), amortised, however
//     deep the queue.
//   - Request ids are per lock. An Acquire with the id of the lock's current
//     grant gets that grant, one with the id of a waiting request finds it in
//     the queue, and one with the id of a grant that ended within EndedWindow
//     fails with ErrNotHolder, instead of a second grant.
//   - Restore replaces the whole state; it never merges.
//   - Entries and snapshots start with a format version.
package fsm
