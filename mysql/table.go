package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

var _ fence.Resource = (*Table)(nil)

// MaxKeyLen is the longest key of a Table, in bytes.
const MaxKeyLen = 512

// Table is a fenced key-value table, a fence.Resource: values under keys in
// one table of its own, each write fenced by the domain fence in the same
// transaction. It is what the shared fence suite and small programs use;
// your own tables are fenced with Fence.Do or Update.
//
// The table has the columns (`key` VARBINARY(512) PRIMARY KEY, value
// LONGBLOB NOT NULL, version BIGINT NOT NULL); version counts the accepted
// writes of the key.
type Table struct {
	*Fence
	name string // quoted
}

// NewTable returns the fenced key-value table name (schema-qualified or
// not) of db. Create makes it and the fence's table if they are missing.
func NewTable(db *sql.DB, name string) (*Table, error) {
	quoted, err := table(name)
	if err != nil {
		return nil, fmt.Errorf("new table: %w", err)
	}
	return &Table{Fence: New(db), name: quoted}, nil
}

// Create creates the table and fencelock_fences if they do not exist.
func (t *Table) Create(ctx context.Context) error {
	if err := CreateFenceTable(ctx, t.db); err != nil {
		return err
	}
	_, err := t.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+t.name+` (
    `+"`key`"+` VARBINARY(512) NOT NULL PRIMARY KEY,
    value   LONGBLOB NOT NULL,
    version BIGINT NOT NULL
) ENGINE=InnoDB`)
	if err != nil {
		return fmt.Errorf("create table %s: %w", t.name, err)
	}
	return nil
}

// Put stores value under key in the transaction that checks token in
// domain, and returns the key's new version.
func (t *Table) Put(ctx context.Context, domain string, token fencelock.Token, key string, value []byte) (int64, error) {
	if err := fencelock.ValidateText("key", key, MaxKeyLen); err != nil {
		return 0, fmt.Errorf("put: %w", err)
	}
	if value == nil {
		value = []byte{}
	}
	var version int64
	err := t.Do(ctx, domain, token, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+t.name+" (`key`, value, version) VALUES (?, ?, 1)"+`
ON DUPLICATE KEY UPDATE value = VALUES(value), version = version + 1`, key, value); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT version FROM `+t.name+" WHERE `key` = ?", key).Scan(&version)
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
	err := t.db.QueryRowContext(ctx, `SELECT value, version FROM `+t.name+" WHERE `key` = ?", key).Scan(&value, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fmt.Errorf("get %q: %w", key, fencelock.ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %q: %w", key, err)
	}
	return value, version, nil
}
