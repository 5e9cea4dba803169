// Package postgres fences writes to PostgreSQL, a relational
// resource, in two ways. Both put the token check in the same statement or
// transaction as the write, so PostgreSQL itself is the final arbiter.
//
// # Row fence
//
// Each protected row carries the highest token that wrote it, in a
// column (AddFenceColumn adds it):
//
//	ALTER TABLE orders ADD COLUMN IF NOT EXISTS last_fence BIGINT NOT NULL DEFAULT 0;
//
// and every write is a conditional UPDATE built by NewUpdate:
//
//	UPDATE orders SET status = 'paid', paid_amount = $1, last_fence = $2
//	WHERE id = $3 AND status = 'pending' AND last_fence <= $2;
//
// The row lock PostgreSQL takes for the UPDATE makes check and write one
// step. When no row is updated, Exec looks at the row again and tells the two
// reasons apart: a row whose last_fence is above the token means a stale
// holder (a *fencelock.StaleTokenError); otherwise the condition did not hold,
// typically because a valid holder already did the work, which is not an
// error (Exec returns applied == false).
//
// # Domain fence
//
// For a transaction that writes several rows or tables, one row per fence
// domain in the fencelock_fences table holds the highest token:
//
//	CREATE TABLE IF NOT EXISTS fencelock_fences (
//	    domain TEXT PRIMARY KEY,
//	    token  BIGINT NOT NULL CHECK (token > 0)
//	);
//
// Check, called first inside the caller's transaction, upserts the token
// where token >= the stored one and keeps that row locked until the
// transaction ends:
//
//	INSERT INTO fencelock_fences AS f (domain, token) VALUES ($1, $2)
//	ON CONFLICT (domain) DO UPDATE SET token = EXCLUDED.token
//	WHERE f.token <= EXCLUDED.token
//	RETURNING f.token;
//
// A concurrent transaction of the same domain waits on that row; when the
// first commits, the second is judged against the token it committed, and
// when it rolls back, against the token before it. Everything the
// transaction writes after Check is therefore fenced, and a refused
// transaction should roll back (Fence.Do does).
//
// A refused transaction cannot commit, even if its caller goes on. Outside
// every savepoint, Check aborts it: PostgreSQL refuses its further
// statements and its COMMIT rolls back. Inside a savepoint, where ROLLBACK
// TO SAVEPOINT would undo an abort, Check ends the session with
// pg_terminate_backend (after RESET SESSION AUTHORIZATION, so that the role
// that logged in signals its own backend), which rolls the whole
// transaction back and closes the connection; a pool replaces it.
//
// # database/sql
//
// FromSQL adapts a *sql.DB, *sql.Conn or *sql.Tx (any PostgreSQL driver
// with $1 placeholders, such as pgx's stdlib driver or lib/pq) to Querier,
// for Update.Exec and the helpers; CheckSQL and SQLFence are Check and
// Fence for database/sql transactions.
//
// # Guarantees and limits
//
// Tokens are stored as BIGINT: tokens above math.MaxInt64 are refused with
// fencelock.ErrInvalidToken. Both fences work at every isolation level; at
// REPEATABLE READ and SERIALIZABLE a concurrent fence update makes PostgreSQL
// abort one transaction with a serialization failure, which the caller
// retries as usual. Highest tokens are as durable as the rest of the
// database. A write path that skips the fence is not fenced: route every
// write through it.
package postgres
