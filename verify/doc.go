// Package verify is fencelock's Jepsen-style safety harness. It starts real
// processes (lock service nodes, the fenced object store, client worker
// processes), runs a lock-set workload against them while a nemesis injects
// faults (kill -9, silent network partitions through TCP proxies, SIGSTOP of
// nodes and of clients, membership changes), records every operation as a
// history of invoke/ok/fail/info events on one monotonic clock, and checks
// it:
//
//   - per lock, acknowledged grants have unique tokens that increase in
//     real-time order (CheckTokens);
//   - per lock, acquire/renew/release/describe are linearizable against a
//     fenced-lease model in which a lease may expire at any moment
//     (CheckLinearizable, with github.com/anishathalye/porcupine);
//   - per store domain, accepted tokens never decrease, every acknowledged
//     append is in the final object exactly once, and refused writes changed
//     nothing (CheckStore);
//   - per lock, each holder's lease ended, by its own account (Lock.Err)
//     and, where clients are not frozen, by its Lock.Context, before the
//     lock was granted again (CheckLeases): the workers read the one
//     CLOCK_MONOTONIC of the machine when their lease was last seen held
//     and when each grant arrived;
//   - the faults really bit (CheckFaults): a run in which nothing happened
//     proves nothing and fails.
//
// Negative controls show that the checkers can fail: the client-pause
// scenario with fencing off (every worker writes with one constant token,
// so any resource accepts every write) and with leases held one TTL past
// the client's deadline, and the restore scenario without a new token
// epoch; each must be caught. "fencelock verify" and the package's tests run the same
// scenarios (see docs/VERIFICATION.md).
//
// The fenced resource is pluggable (a fence.Resource): the object store by default,
// PostgreSQL, MySQL/MariaDB, Redis or S3 through OpenResource (Config.Resource), or an adapter
// of your own, opened in worker processes of your own program (Config.Worker,
// RunWorker with WorkerConfig.Open).
//
// With Config.Servers the harness verifies an existing deployment instead
// of starting nodes: the client-side faults run there, and the server-side
// ones too when Config.NemesisExec names a program that kills, starts,
// pauses, resumes, isolates and heals those servers (see nemesisexec.go).
package verify
