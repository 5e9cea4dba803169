package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/sqlrow"
)

// FenceColumn is the row fence's column: the highest token that wrote the
// row.
const FenceColumn = sqlrow.FenceColumn

// quote quotes a MySQL identifier.
func quote(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// table quotes a table name, optionally schema-qualified ("billing.orders").
func table(name string) (string, error) {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		if p == "" || strings.ContainsRune(p, 0) || len(parts) > 2 {
			return "", fmt.Errorf("table name %q is malformed: %w", name, fencelock.ErrInvalidName)
		}
		parts[i] = quote(p)
	}
	return strings.Join(parts, "."), nil
}

// dialect is MySQL's and MariaDB's, for the row fence's statements.
var dialect = sqlrow.Dialect{
	Table:     table,
	Column:    quote,
	Param:     func(int) string { return "?" },
	Reuse:     false,
	Token:     func(t fencelock.Token) (any, error) { return uint64(t), nil },
	ShareLock: "LOCK IN SHARE MODE",
}

// AddFenceColumn adds the row fence's column to table if it is missing:
//
//	ALTER TABLE table ADD COLUMN last_fence BIGINT UNSIGNED NOT NULL DEFAULT 0
//
// A last_fence column that table already has must be BIGINT UNSIGNED NOT
// NULL; otherwise the error wraps fencelock.ErrInvalidArgument.
func AddFenceColumn(ctx context.Context, db Querier, tableName string) error {
	quoted, err := table(tableName)
	if err != nil {
		return fmt.Errorf("add fence column: %w", err)
	}
	schema, name, ok := strings.Cut(tableName, ".")
	if !ok {
		schema, name = "", tableName
	}
	var typ, nullable string
	err = db.QueryRowContext(ctx, `SELECT COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?`,
		schema, name, FenceColumn).Scan(&typ, &nullable)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "ALTER TABLE "+quoted+" ADD COLUMN "+FenceColumn+" BIGINT UNSIGNED NOT NULL DEFAULT 0")
		if err != nil {
			return fmt.Errorf("add fence column to %s: %w", tableName, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("add fence column to %s: read its columns: %w", tableName, err)
	}
	if !strings.HasPrefix(strings.ToLower(typ), "bigint") || !strings.Contains(strings.ToLower(typ), "unsigned") || nullable != "NO" {
		return fmt.Errorf("add fence column to %s: it has a column %s of type %s (nullable: %s), want BIGINT UNSIGNED NOT NULL: %w",
			tableName, FenceColumn, typ, nullable, fencelock.ErrInvalidArgument)
	}
	return nil
}

// Update is a fenced conditional UPDATE of one row, as postgres.Update:
//
//	applied, err := mysql.NewUpdate("orders", token).
//		Set("status", "paid").Key("id", 42).Where("status", "pending").
//		Exec(ctx, db)
//
// runs
//
//	UPDATE `orders` SET `status` = ?, last_fence = ?
//	WHERE `id` = ? AND `status` = ? AND last_fence <= ?
type Update struct{ u sqlrow.Update }

// NewUpdate starts a fenced update of a row of table (optionally
// schema-qualified) by the holder of token.
func NewUpdate(tableName string, token fencelock.Token) *Update {
	return &Update{sqlrow.Update{Table: tableName, Token: token}}
}

// Set assigns value to column.
func (u *Update) Set(column string, value any) *Update { u.u.Set(column, value); return u }

// Key identifies the row: column = value (a primary or unique key; at
// least one; not NULL).
func (u *Update) Key(column string, value any) *Update { u.u.Key(column, value); return u }

// Where adds a business condition, column = value, or column IS NULL for a
// value sent as NULL. When it does not hold, Exec reports applied == false
// without an error.
func (u *Update) Where(column string, value any) *Update { u.u.Where(column, value); return u }

// SQL returns the UPDATE statement and its arguments; its errors are
// postgres.Update.SQL's (every token fits: the column is unsigned).
func (u *Update) SQL() (string, []any, error) { return u.u.SQL(dialect) }

// Exec runs the update on db (a *sql.DB, *sql.Conn or *sql.Tx), with the
// results of postgres.Update.Exec: applied; applied == false with a nil
// error when a Where condition did not hold (already done); a
// *fencelock.StaleTokenError when a higher token wrote the row;
// fencelock.ErrNotFound when no row has the key. MySQL counts changed
// rows, not matched ones, unless the DSN sets clientFoundRows=true: without
// it, repeating an update with the same values and token reports
// applied == false, which is "already done".
func (u *Update) Exec(ctx context.Context, db Querier) (applied bool, err error) {
	applied, err = u.exec(ctx, db)
	return applied, fence.Refused("mysql", err)
}

func (u *Update) exec(ctx context.Context, db Querier) (bool, error) {
	q, args, err := u.SQL()
	if err != nil {
		return false, err
	}
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("fenced update of %s: %w", u.u.Domain(), err)
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		return true, nil
	}
	// Nothing changed: a last_fence above our token proves we are stale.
	// The read locks the row, so that it sees the latest version rather
	// than a REPEATABLE READ snapshot's.
	q, args, err = u.u.FenceSQL(dialect)
	if err != nil {
		return false, err
	}
	var last uint64
	err = db.QueryRowContext(ctx, q, args...).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("fenced update of %s: no such row: %w", u.u.Domain(), fencelock.ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("fenced update of %s: read %s: %w", u.u.Domain(), FenceColumn, err)
	}
	return false, u.u.Judge(fencelock.Token(last))
}
