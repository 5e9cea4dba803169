// Package mysql fences writes to MySQL and MariaDB (InnoDB), through
// database/sql with github.com/go-sql-driver/mysql, in the two ways package
// postgres does; both put the token check in the same statement or
// transaction as the write.
//
// # Row fence
//
// Each protected row carries the highest token that wrote it, in a
// last_fence BIGINT UNSIGNED column (AddFenceColumn), and every write is a
// conditional UPDATE built by NewUpdate:
//
//	UPDATE `orders` SET `status` = ?, last_fence = ?
//	WHERE `id` = ? AND `status` = ? AND last_fence <= ?
//
// When no row changes, Exec reads the row's last_fence (locking it) and
// tells a stale token (*fencelock.StaleTokenError) from a condition that did
// not hold (applied == false, not an error).
//
// # Domain fence
//
// For a transaction that writes several rows or tables, one row per fence
// domain in the fencelock_fences table holds the highest token; Check, first
// in the transaction, takes that row's lock and raises it, or reports a
// stale token, which also rolls the transaction back (MySQL would not abort
// it). Fence.Do runs a function in such a transaction and rolls it back on
// any error. Table is a
// fenced key-value table over the domain fence (a fence.Resource).
//
// # Limits
//
// Tokens are BIGINT UNSIGNED: the full range, exact. Domains are
// VARBINARY(1024), compared as bytes whatever the collation. Use InnoDB:
// MyISAM has no transactions and no row locks. The default REPEATABLE READ
// is fine: the fence's reads are locking reads, which see the latest row.
// Only writes that go through the fence are fenced.
package mysql
