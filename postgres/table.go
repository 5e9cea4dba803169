package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

var _ fence.Resource = (*Table)(nil)

// Table is a fenced key-value table, a fence.Resource: values under text
// keys in one table of its own, each write fenced by the domain fence in the
// same transaction. It is what the shared fence suite, the fault harness and
// small programs use; your own tables are fenced with Fence.Do or Update.
//
// The table has the columns (key TEXT PRIMARY KEY, value BYTEA NOT NULL,
// version BIGINT NOT NULL); version counts the accepted writes of the key.
type Table struct {
	*Fence
	name string // sanitized identifier
}

// NewTable returns the fenced key-value table name (schema-qualified or
// not) of db. Create makes it and the fence's table if they are missing.
func NewTable(db DB, name string) (*Table, error) {
	ident, err := identifier(name)
	if err != nil {
		return nil, fmt.Errorf("new table: %w", err)
	}
	return &Table{Fence: New(db), name: ident.Sanitize()}, nil
}

// Create creates the table and the fence's table fencelock_fences if they
// do not exist. Concurrent Creates of one table are safe: they take turns.
func (t *Table) Create(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, t.db, func(tx pgx.Tx) error {
		// CREATE TABLE IF NOT EXISTS is not safe concurrently.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7326010465)`); err != nil {
			return err
		}
		if err := CreateFenceTable(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t.name+` (
    key     TEXT PRIMARY KEY,
    value   BYTEA NOT NULL,
    version BIGINT NOT NULL
)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("create table %s: %w", t.name, err)
	}
	return nil
}

// Put stores value under key in the transaction that checks token in
// domain, and returns the key's new version.
func (t *Table) Put(ctx context.Context, domain string, token fencelock.Token, key string, value []byte) (int64, error) {
	if value == nil {
		value = []byte{}
	}
	var version int64
	err := t.Do(ctx, domain, token, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `INSERT INTO `+t.name+` AS t (key, value, version) VALUES ($1, $2, 1)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = t.version + 1
RETURNING version`, key, value).Scan(&version)
	})
	if err != nil {
		return 0, fmt.Errorf("put %q: %w", key, err)
	}
	return version, nil
}

// Get returns key's value and version.
func (t *Table) Get(ctx context.Context, key string) ([]byte, int64, error) {
	var value []byte
	var version int64
	err := t.db.QueryRow(ctx, `SELECT value, version FROM `+t.name+` WHERE key = $1`, key).Scan(&value, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, fmt.Errorf("get %q: %w", key, fencelock.ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %q: %w", key, err)
	}
	return value, version, nil
}
