package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

// SQLQuerier runs statements through database/sql: a *sql.DB, *sql.Conn
// or *sql.Tx of any PostgreSQL driver that takes $1 placeholders (pgx's
// stdlib driver, lib/pq), as sqlx, GORM and ent hand them out.
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// FromSQL makes q a Querier, so that Update.Exec, AddFenceColumn,
// CreateFenceTable and Highest run through database/sql.
func FromSQL(q SQLQuerier) Querier { return sqlQuerier{q} }

type sqlQuerier struct{ q SQLQuerier }

func (s sqlQuerier) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	res, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return pgconn.NewCommandTag(fmt.Sprintf("UPDATE %d", n)), nil
}

func (s sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return sqlRow{s.q.QueryRowContext(ctx, query, args...)}
}

// sqlRow reports database/sql's ErrNoRows as pgx's, which the fences test.
type sqlRow struct{ r *sql.Row }

func (r sqlRow) Scan(dest ...any) error {
	if err := r.r.Scan(dest...); errors.Is(err, sql.ErrNoRows) {
		return pgx.ErrNoRows
	} else if err != nil {
		return err
	}
	return nil
}

// CheckSQL is Check for a database/sql transaction: it fences tx in
// domain, with Check's errors; after a refusal tx cannot commit, as Check
// says (inside a savepoint, its connection is closed).
func CheckSQL(ctx context.Context, tx *sql.Tx, domain string, token fencelock.Token) error {
	return fence.Refused("postgres", check(ctx, sqlQuerier{tx}, domain, token))
}

var _ fencelock.Fence = (*SQLFence)(nil)

// SQLFence is the domain fence over a database/sql database. It is safe
// for concurrent use. The fencelock_fences table must exist
// (CreateFenceTable(ctx, FromSQL(db))).
type SQLFence struct{ db *sql.DB }

// NewSQL returns the domain fence of db.
func NewSQL(db *sql.DB) *SQLFence { return &SQLFence{db: db} }

// Do runs fn in a transaction fenced in domain by token: CheckSQL first,
// then fn, then commit; on any error the transaction rolls back and Do
// returns that error.
func (f *SQLFence) Do(ctx context.Context, domain string, token fencelock.Token, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fenced transaction of %q: begin: %w", domain, err)
	}
	defer tx.Rollback() // after a commit, a no-op; after a panic in fn, the domain's row is unlocked
	if err := CheckSQL(ctx, tx, domain, token); err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fenced transaction of %q: commit: %w", domain, err)
	}
	return nil
}

// Check raises domain's highest token to token in a transaction of its
// own, writing nothing else.
func (f *SQLFence) Check(ctx context.Context, domain string, token fencelock.Token) error {
	return f.Do(ctx, domain, token, func(context.Context, *sql.Tx) error { return nil })
}

// Highest returns the highest token domain has accepted, or 0.
func (f *SQLFence) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	return Highest(ctx, FromSQL(f.db), domain)
}
