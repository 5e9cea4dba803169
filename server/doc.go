// Package server runs the fencelock lock service: it owns the *raft.Raft,
// proposes every state change through Raft (see Server.Apply), keeps the
// leader's lease timers in memory, and serves the API over Connect (gRPC,
// gRPC-Web and JSON over HTTP on one port), with /metrics, /healthz and
// /readyz beside it.
//
// Guarantees:
//   - Every grant, release and expiry is a committed Raft entry; fencing
//     tokens are the log indexes of granting entries (see package fsm).
//   - Renewals cost no disk write: the leader tracks renewal deadlines in
//     memory and proposes expire(name, token) when one passes.
//   - On becoming leader the server waits for a barrier, then re-arms every
//     held lease with its full TTL; it never shortens a lease. On losing
//     leadership it stops every timer at once.
//   - A waiter is told of its grant the moment the freeing entry is applied,
//     without polling.
package server
