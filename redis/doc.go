// Package redis fences writes to Redis when Redis is the protected resource:
// each write runs in one Lua script that checks the fence domain's highest
// token, performs the write (SET, HSET or DEL) and raises it, so no other
// command can slip between check and write.
//
// # Guarantees
//
// A write is applied if and only if its token is at least the highest token
// its domain has accepted; the domain's highest token (a string key,
// "fencelock:fence:{DOMAIN}" by default) is raised in the same script, after
// the write succeeded (a write Redis refuses, such as HSET on a string key,
// leaves it as it was). A refused write changes nothing and returns a
// *fencelock.StaleTokenError. Tokens are compared as decimal strings, so the
// full uint64 range is exact (Lua numbers are not).
//
// # Limits
//
// The highest tokens are as durable as the Redis server: without
// appendonly yes and appendfsync always, a crash can lose a raised token and
// readmit a stale holder; with asynchronous replication, a failover can do
// the same (as it can rewind a token kept with INCR). Use
// Redis as a fenced resource only where that is acceptable, or fence in
// PostgreSQL or the object store. In Redis Cluster, every key a script
// touches must hash to one slot: the fence key carries the domain as a hash
// tag, so name your data keys with the same tag, e.g. "{order:42}:status".
// A *redis.Ring is refused: it moves a key to another shard when its shard
// misses a few pings, and there the fence key is absent. Fenced writes may
// not touch the fence keys themselves (a cleanup that deletes every key
// with a domain's tag would drop its bar).
// Only writes made through Fence are fenced: a plain SET elsewhere bypasses
// the check. The fence keys have no expiry: with a maxmemory-policy that
// evicts any key (allkeys-*), Redis may evict one and readmit a stale
// holder, so use noeviction or a volatile-* policy.
package redis
