package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

// FenceColumn is the row fence's column: the highest token that wrote the
// row.
const FenceColumn = "last_fence"

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

type assignment struct {
	column string
	value  any
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
type Update struct {
	table string
	token fencelock.Token
	sets  []assignment
	keys  []assignment
	conds []assignment
}

// NewUpdate starts a fenced update of a row of table (optionally
// schema-qualified) by the holder of token.
func NewUpdate(table string, token fencelock.Token) *Update {
	return &Update{table: table, token: token}
}

// Set assigns value to column.
func (u *Update) Set(column string, value any) *Update {
	u.sets = append(u.sets, assignment{column, value})
	return u
}

// Key identifies the row: column = value. The keys together must name at
// most one row (a primary or unique key); at least one is required. Exec
// does not check this: keys that match several rows update those whose
// fence allows it and report applied. A value sent as NULL (see Where) is
// refused: no row has a NULL key.
func (u *Update) Key(column string, value any) *Update {
	u.keys = append(u.keys, assignment{column, value})
	return u
}

// Where adds a business condition, column = value (status =
// 'pending'); a value sent as NULL (nil, a nil pointer, slice or map, or a
// driver.Valuer such as sql.NullTime{} whose value is nil) tests column IS
// NULL (paid_at IS NULL), since = NULL holds for no row. When it does not hold, Exec updates nothing and reports
// applied == false without an error; the row's fence is not raised then,
// so an older holder's later write to the row is still judged against the
// last token that wrote it (use a domain fence, Check, to raise a bar
// without writing).
func (u *Update) Where(column string, value any) *Update {
	u.conds = append(u.conds, assignment{column, value})
	return u
}

// domain names the row in a StaleTokenError, e.g. orders(id=42).
func (u *Update) domain() string {
	parts := make([]string, len(u.keys))
	for i, k := range u.keys {
		parts[i] = fmt.Sprintf("%s=%v", k.column, k.value)
	}
	return u.table + "(" + strings.Join(parts, ",") + ")"
}

// SQL returns the UPDATE statement and its arguments. The error wraps
// fencelock.ErrInvalidName for a malformed table or column name,
// fencelock.ErrInvalidArgument for an update without a key,
// fencelock.ErrMissingToken for token 0 and fencelock.ErrInvalidToken for a
// token above math.MaxInt64.
func (u *Update) SQL() (string, []any, error) {
	if len(u.keys) == 0 {
		return "", nil, fmt.Errorf("build fenced update of %s: no Key names the row: %w", u.table, fencelock.ErrInvalidArgument)
	}
	if err := fence.Admit(u.domain(), 0, u.token); err != nil {
		return "", nil, fmt.Errorf("build fenced update: %w", err)
	}
	tok, err := dbToken(u.token)
	if err != nil {
		return "", nil, fmt.Errorf("build fenced update of %s: %w", u.table, err)
	}
	table, err := identifier(u.table)
	if err != nil {
		return "", nil, fmt.Errorf("build fenced update: %w", err)
	}
	args := []any{}
	param := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	var b strings.Builder
	b.WriteString("UPDATE " + table.Sanitize() + " SET ")
	for _, s := range u.sets {
		if s.column == FenceColumn {
			return "", nil, fmt.Errorf("build fenced update of %s: Set(%q) would bypass the fence: %w", u.table, FenceColumn, fencelock.ErrInvalidArgument)
		}
		b.WriteString(pgx.Identifier{s.column}.Sanitize() + " = " + param(s.value) + ", ")
	}
	tokParam := param(tok)
	b.WriteString(FenceColumn + " = " + tokParam + " WHERE ")
	for _, k := range u.keys {
		if isNull(k.value) {
			return "", nil, fmt.Errorf("build fenced update of %s: Key(%q) is NULL, which names no row: %w", u.table, k.column, fencelock.ErrInvalidArgument)
		}
		b.WriteString(pgx.Identifier{k.column}.Sanitize() + " = " + param(k.value) + " AND ")
	}
	for _, c := range u.conds {
		if isNull(c.value) {
			b.WriteString(pgx.Identifier{c.column}.Sanitize() + " IS NULL AND ")
			continue
		}
		b.WriteString(pgx.Identifier{c.column}.Sanitize() + " = " + param(c.value) + " AND ")
	}
	b.WriteString(FenceColumn + " <= " + tokParam)
	for _, a := range append(append(append([]assignment{}, u.sets...), u.keys...), u.conds...) {
		if a.column == "" || strings.ContainsRune(a.column, 0) {
			return "", nil, fmt.Errorf("build fenced update of %s: column name %q is malformed: %w", u.table, a.column, fencelock.ErrInvalidName)
		}
	}
	return b.String(), args, nil
}

// isNull reports whether pgx sends v as SQL NULL: nil; a nil pointer,
// slice or map; or a driver.Valuer whose value is nil (sql.NullTime{},
// pgtype.Timestamptz{}, and the like).
func isNull(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		if rv.IsNil() {
			return true
		}
	}
	if vr, ok := v.(driver.Valuer); ok {
		dv, err := vr.Value()
		return err == nil && dv == nil
	}
	return false
}

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
		return false, fmt.Errorf("fenced update of %s: %w", u.domain(), err)
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
	table, _ := identifier(u.table)
	var q strings.Builder
	q.WriteString("SELECT " + FenceColumn + " FROM " + table.Sanitize() + " WHERE ")
	keyArgs := make([]any, len(u.keys))
	for i, k := range u.keys {
		if i > 0 {
			q.WriteString(" AND ")
		}
		fmt.Fprintf(&q, "%s = $%d", pgx.Identifier{k.column}.Sanitize(), i+1)
		keyArgs[i] = k.value
	}
	q.WriteString(" FOR SHARE")
	var last int64
	err = db.QueryRow(ctx, q.String(), keyArgs...).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("fenced update of %s: no such row: %w", u.domain(), fencelock.ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("fenced update of %s: read %s: %w", u.domain(), FenceColumn, err)
	}
	if err := fence.Admit(u.domain(), fencelock.Token(last), u.token); err != nil {
		return false, err
	}
	return false, nil
}
