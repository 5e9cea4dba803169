// Package server is a fencelock node, knowing no wire: it owns the
// *raft.Raft, proposes every state change through Raft (see Server.Apply),
// runs each operation once (acquire, renew, release, describe, membership,
// backups, keys, sequencers), checks permissions and keeps the leader's
// lease timers in memory. Package api serves it on the network.
//
// Guarantees:
//   - Every grant, release and expiry is a committed Raft entry; a fencing
//     token is the granting entry's log index under the cluster's epoch
//     (see fencelock.Token).
//   - Renewals cost no disk write: the leader tracks renewal deadlines in
//     memory and proposes expire(name, token) when one passes.
//   - On becoming leader the server waits for a barrier, then re-arms every
//     held lease with its full TTL; it never shortens a lease. On losing
//     leadership it stops every timer at once.
//   - A waiter is told of its grant the moment the freeing entry is applied,
//     without polling.
package server
