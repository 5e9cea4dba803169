// Package fence is the resource-side fencing rule, written once, and an
// in-memory fence.
//
// The rule (Admit): a write carrying (domain, token) is accepted if and only
// if token >= the highest token the domain has accepted; the accepted token
// becomes the new highest in the same atomic step as the write. Equal tokens
// are accepted, because one holder writes many times with its token. A lower
// token is refused with a *fencelock.StaleTokenError, and token 0 (a write
// path that forgot the token) is refused with fencelock.ErrMissingToken, so a
// missing check fails loudly instead of passing silently.
//
// Every adapter applies Admit (or, inside a database or a Lua script, the same
// comparison) within the same transaction as the write it protects: the
// object store in its bbolt transaction, postgres in the caller's SQL
// transaction, redis in one Lua script.
//
// Memory keeps the highest tokens in memory only: it guarantees the rule for
// the writes it runs through Do while the process lives, and nothing after a
// restart. Use it for tests and to fence in-process resources.
package fence
