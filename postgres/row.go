package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/sqlrow"
)

// FenceColumn is the row fence's column: the highest token that wrote the
// row.
const FenceColumn = sqlrow.FenceColumn

// AddFenceColumn adds the row fence's column to table, if it is missing:
//
//	ALTER TABLE table ADD COLUMN IF NOT EXISTS last_fence BIGINT NOT NULL DEFAULT 0
//
// table may be qualified with a schema ("billing.orders"). A last_fence
// column that table already has must be BIGINT NOT NULL; otherwise the
// error wraps fencelock.ErrInvalidArgument.
func AddFenceColumn(ctx context.Context, db Querier, table string) error {
	ident, err := identifier(table)
	if err != nil {
		return fmt.Errorf("add fence column: %w", err)
	}
	sql := "ALTER TABLE " + ident.Sanitize() + " ADD COLUMN IF NOT EXISTS " + FenceColumn + " BIGINT NOT NULL DEFAULT 0"
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("add fence column to %s: %w", table, err)
	}
	// A column of that name that was there already must hold tokens as
	// the fence compares them.
	var typ string
	var notNull bool
	err = db.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
		WHERE attrelid = $1::regclass AND attname = $2 AND NOT attisdropped`, ident.Sanitize(), FenceColumn).Scan(&typ, &notNull)
	if err != nil {
		return fmt.Errorf("add fence column to %s: read its type: %w", table, err)
	}
	if typ != "bigint" || !notNull {
		null := ""
		if !notNull {
			null = " (nullable)"
		}
		return fmt.Errorf("add fence column to %s: it has a column %s of type %s%s, want BIGINT NOT NULL: %w",
			table, FenceColumn, typ, null, fencelock.ErrInvalidArgument)
	}
	return nil
}

func identifier(name string) (pgx.Identifier, error) {
	parts := strings.Split(name, ".")
	for _, p := range parts {
		if p == "" || strings.ContainsRune(p, 0) {
			return nil, fmt.Errorf("identifier %q is malformed: %w", name, fencelock.ErrInvalidName)
		}
	}
	return pgx.Identifier(parts), nil
}

// dialect is PostgreSQL's, for the row fence's statements.
var dialect = sqlrow.Dialect{
	Table: func(name string) (string, error) {
		ident, err := identifier(name)
		return ident.Sanitize(), err
	},
	Column:    func(name string) string { return pgx.Identifier{name}.Sanitize() },
	Param:     func(n int) string { return fmt.Sprintf("$%d", n) },
	Reuse:     true,
	Token:     func(t fencelock.Token) (any, error) { return dbToken(t) },
	ShareLock: "FOR SHARE",
}

// Update is a fenced conditional UPDATE of one row, such as a payment
// that a stale worker must not repeat:
//
//	applied, err := postgres.NewUpdate("orders", token).
//		Set("status", "paid").Set("paid_amount", 100).
//		Key("id", 42).
//		Where("status", "pending").
//		Exec(ctx, db)
//
// runs
//
//	UPDATE "orders" SET "status" = $1, "paid_amount" = $2, "last_fence" = $3
//	WHERE "id" = $4 AND "status" = $5 AND "last_fence" <= $3
//
// Build it with NewUpdate; its methods return the Update for chaining.
// Identifiers are quoted; values are sent as parameters.
type Update struct{ u sqlrow.Update }

// NewUpdate starts a fenced update of a row of table (optionally
// schema-qualified) by the holder of token.
func NewUpdate(table string, token fencelock.Token) *Update {
	return &Update{sqlrow.Update{Table: table, Token: token}}
}

// Set assigns value to column.
func (u *Update) Set(column string, value any) *Update { u.u.Set(column, value); return u }

// Key identifies the row: column = value. The keys together must name at
// most one row (a primary or unique key); at least one is required. Exec
// does not check this: keys that match several rows update those whose
// fence allows it and report applied. A value sent as NULL (see Where) is
// refused: no row has a NULL key.
func (u *Update) Key(column string, value any) *Update { u.u.Key(column, value); return u }

// Where adds a business condition, column = value (status =
// 'pending'); a value sent as NULL (nil, a nil pointer, slice or map, or a
// driver.Valuer such as sql.NullTime{} whose value is nil) tests column IS
// NULL (paid_at IS NULL), since = NULL holds for no row. When it does not
// hold, Exec updates nothing and reports applied == false without an
// error; the row's fence is not raised then, so an older holder's later
// write to the row is still judged against the last token that wrote it
// (use a domain fence, Check, to raise a bar without writing).
func (u *Update) Where(column string, value any) *Update { u.u.Where(column, value); return u }

// SQL returns the UPDATE statement and its arguments. The error wraps
// fencelock.ErrInvalidName for a malformed table or column name,
// fencelock.ErrInvalidArgument for an update without a key,
// fencelock.ErrMissingToken for token 0 and fencelock.ErrInvalidToken for a
// token above math.MaxInt64.
func (u *Update) SQL() (string, []any, error) { return u.u.SQL(dialect) }

// Exec runs the update on db (a transaction, connection or pool). It returns
// applied == true if the row was updated; applied == false with a nil error
// if the row's token allowed the write but a Where condition did not hold
// (already done: not an error, do not retry); a *fencelock.StaleTokenError if
// the row was written with a higher token (a newer holder exists: do not
// retry with this token); an error wrapping fencelock.ErrNotFound if no row
// has the key; and SQL's errors.
func (u *Update) Exec(ctx context.Context, db Querier) (applied bool, err error) {
	applied, err = u.exec(ctx, db)
	return applied, fence.Refused("postgres", err)
}

func (u *Update) exec(ctx context.Context, db Querier) (applied bool, err error) {
	sql, args, err := u.SQL()
	if err != nil {
		return false, err
	}
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return false, fmt.Errorf("fenced update of %s: %w", u.u.Domain(), err)
	}
	if tag.RowsAffected() > 0 {
		return true, nil
	}
	// Nothing updated: find out why. last_fence never goes down, so a value
	// above our token proves we are stale, whenever it is read. The read
	// locks the row (FOR SHARE): in a REPEATABLE READ or SERIALIZABLE
	// transaction a plain read would see the snapshot's older value and
	// call a stale update "already done"; locking a row a newer holder
	// changed since the snapshot fails with a serialization error instead,
	// whose retry tells the truth.
	q, keyArgs, err := u.u.FenceSQL(dialect)
	if err != nil {
		return false, err
	}
	var last int64
	err = db.QueryRow(ctx, q, keyArgs...).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("fenced update of %s: no such row: %w", u.u.Domain(), fencelock.ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("fenced update of %s: read %s: %w", u.u.Domain(), FenceColumn, err)
	}
	return false, u.u.Judge(fencelock.Token(last))
}
