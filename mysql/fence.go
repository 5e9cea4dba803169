package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

// FenceTable is the table of the domain fence.
const FenceTable = "fencelock_fences"

// FenceTableSQL creates the domain fence's table. Run it with
// CreateFenceTable, or add it to your migrations. Domains are compared as
// bytes; tokens use the full unsigned 64-bit range.
const FenceTableSQL = `CREATE TABLE IF NOT EXISTS fencelock_fences (
    domain VARBINARY(1024) NOT NULL PRIMARY KEY,
    token  BIGINT UNSIGNED NOT NULL
) ENGINE=InnoDB`

const (
	// raiseSQL takes the domain's row lock and raises its token, or
	// leaves a higher one in place; checkSQL then reads what is there,
	// with a locking read: a plain one would see the transaction's
	// snapshot, which may be older than the row.
	raiseSQL = `INSERT INTO fencelock_fences (domain, token) VALUES (?, ?)
ON DUPLICATE KEY UPDATE token = IF(token <= VALUES(token), VALUES(token), token)`
	checkSQL   = `SELECT token FROM fencelock_fences WHERE domain = ? FOR UPDATE`
	highestSQL = `SELECT token FROM fencelock_fences WHERE domain = ?`
)

// Querier runs statements: a *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CreateFenceTable creates the fencelock_fences table if it does not exist.
func CreateFenceTable(ctx context.Context, db Querier) error {
	if _, err := db.ExecContext(ctx, FenceTableSQL); err != nil {
		return fmt.Errorf("create table %s: %w", FenceTable, err)
	}
	return nil
}

// Check fences the transaction tx by token in domain: it takes the
// domain's row lock (held until tx ends, so no other holder's Check can
// pass in between) and raises the domain's highest token to token. It
// returns a *fencelock.StaleTokenError if the domain has accepted a higher
// token, an error wrapping fencelock.ErrMissingToken for token 0, and one
// wrapping fencelock.ErrInvalidName for a malformed domain. A stale token
// rolls tx back (MySQL would not abort it): every later statement of tx
// fails with sql.ErrTxDone, so a caller that ignores the error writes
// nothing. After another error, roll back yourself (Fence.Do does).
func Check(ctx context.Context, tx *sql.Tx, domain string, token fencelock.Token) error {
	return fence.Refused("mysql", check(ctx, tx, domain, token))
}

func check(ctx context.Context, tx *sql.Tx, domain string, token fencelock.Token) error {
	if err := fence.ValidateDomain(domain); err != nil {
		return fmt.Errorf("fence check: %w", err)
	}
	if err := fence.Admit(domain, 0, token); err != nil {
		return fmt.Errorf("fence check: %w", err)
	}
	if _, err := tx.ExecContext(ctx, raiseSQL, domain, uint64(token)); err != nil {
		return fmt.Errorf("fence check of %q: %w", domain, err)
	}
	var stored uint64
	if err := tx.QueryRowContext(ctx, checkSQL, domain).Scan(&stored); err != nil {
		return fmt.Errorf("fence check of %q: %w", domain, err)
	}
	if err := fence.Admit(domain, fencelock.Token(stored), token); err != nil {
		_ = tx.Rollback()
		return err
	}
	return nil
}

// Highest returns the highest token domain has accepted, or 0.
func Highest(ctx context.Context, db Querier, domain string) (fencelock.Token, error) {
	if err := fence.ValidateDomain(domain); err != nil {
		return 0, fmt.Errorf("read highest token: %w", err)
	}
	var stored uint64
	err := db.QueryRowContext(ctx, highestSQL, domain).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read highest token of %q: %w", domain, err)
	}
	return fencelock.Token(stored), nil
}

var _ fencelock.Fence = (*Fence)(nil)

// Fence is the domain fence over a database. It is safe for concurrent use.
type Fence struct {
	db *sql.DB
}

// New returns the domain fence of db. The fencelock_fences table must exist
// (CreateFenceTable).
func New(db *sql.DB) *Fence { return &Fence{db: db} }

// Do runs fn in a transaction fenced in domain by token: Check first, then
// fn, then commit. If Check refuses the token or fn fails, the transaction
// rolls back and Do returns that error.
func (f *Fence) Do(ctx context.Context, domain string, token fencelock.Token, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fenced transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	if err := Check(ctx, tx, domain, token); err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fenced transaction: commit: %w", err)
	}
	return nil
}

// Check raises domain's highest token to token in a transaction of its own,
// writing nothing else. See the package function Check for the errors.
func (f *Fence) Check(ctx context.Context, domain string, token fencelock.Token) error {
	return f.Do(ctx, domain, token, func(context.Context, *sql.Tx) error { return nil })
}

// Highest returns the highest token domain has accepted, or 0.
func (f *Fence) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	return Highest(ctx, f.db, domain)
}

// Guard returns f as an httpfence.Guard, for httpfence.Handler: Do runs fn
// in a transaction fenced by token in domain, and fn finds the transaction
// with TxFromContext.
func (f *Fence) Guard() Guard { return Guard{f} }

// Guard runs functions in fenced transactions; see Fence.Guard.
type Guard struct{ f *Fence }

type txKey struct{}

// Do runs fn in a transaction fenced by token in domain, with the
// transaction in fn's context; it commits if fn returns nil.
func (g Guard) Do(ctx context.Context, domain string, token fencelock.Token, fn func(ctx context.Context) error) error {
	return g.f.Do(ctx, domain, token, func(ctx context.Context, tx *sql.Tx) error {
		return fn(context.WithValue(ctx, txKey{}, tx))
	})
}

// TxFromContext returns the fenced transaction of a Guard's fn.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}
