// Package fsm is the lock table that Raft replicates: a deterministic state
// machine with no I/O and no clock. Time enters only as values inside
// commands (Command.Now, set by the proposer), so every replica that applies
// the same log reaches the same state.
//
// Guarantees:
//   - A lock's fencing token is the Raft log index of the entry that granted
//     it, so tokens strictly increase per lock and are never reused, across
//     release, expiry, deletion of the lock's entry, restart and snapshot
//     install.
//   - Release and Expire take effect only if the (lease id, token) or token
//     they name is the lock's current grant.
//   - Waiters are granted in FIFO order, in the same entry that freed the lock.
//   - An Acquire whose request id was seen within the dedupe window returns
//     the original outcome instead of a second grant.
//   - Restore replaces the whole state; it never merges.
package fsm
