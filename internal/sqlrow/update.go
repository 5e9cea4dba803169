// Package sqlrow builds the row fence's statements for the SQL adapters
// (postgres, mysql): one conditional UPDATE of a row and the read that tells
// a stale token from a condition that did not hold. The adapters supply
// their dialect and run the statements.
package sqlrow

import (
	"database/sql/driver"
	"fmt"
	"reflect"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

// FenceColumn is the row fence's column: the highest token that wrote the
// row.
const FenceColumn = "last_fence"

// Dialect is what differs between SQL databases.
type Dialect struct {
	// Table quotes a table name, optionally schema-qualified; its error
	// wraps fencelock.ErrInvalidName.
	Table func(name string) (string, error)
	// Column quotes a column name.
	Column func(name string) string
	// Param returns the placeholder of the n-th argument (from 1).
	Param func(n int) string
	// Reuse is true if a placeholder may appear twice ($1), false if each
	// use takes an argument of its own (?).
	Reuse bool
	// Token converts the token to the column's type; its error wraps
	// fencelock.ErrInvalidToken.
	Token func(fencelock.Token) (any, error)
	// ShareLock ends a SELECT that locks the row for reading.
	ShareLock string
}

type assignment struct {
	column string
	value  any
}

// Update is a fenced conditional UPDATE of one row; see postgres.Update.
type Update struct {
	Table string
	Token fencelock.Token
	sets  []assignment
	keys  []assignment
	conds []assignment
}

// Set assigns value to column.
func (u *Update) Set(column string, value any) { u.sets = append(u.sets, assignment{column, value}) }

// Key identifies the row: column = value.
func (u *Update) Key(column string, value any) { u.keys = append(u.keys, assignment{column, value}) }

// Where adds a condition: column = value, or column IS NULL for a value
// sent as NULL.
func (u *Update) Where(column string, value any) {
	u.conds = append(u.conds, assignment{column, value})
}

// Domain names the row in a StaleTokenError, e.g. orders(id=42).
func (u *Update) Domain() string {
	parts := make([]string, len(u.keys))
	for i, k := range u.keys {
		parts[i] = fmt.Sprintf("%s=%v", k.column, k.value)
	}
	return u.Table + "(" + strings.Join(parts, ",") + ")"
}

// args collects a statement's arguments and hands out placeholders.
type args struct {
	d    Dialect
	vals []any
}

func (a *args) param(v any) string {
	a.vals = append(a.vals, v)
	return a.d.Param(len(a.vals))
}

// SQL returns the UPDATE statement and its arguments. The error wraps
// fencelock.ErrInvalidName for a malformed table or column name,
// fencelock.ErrInvalidArgument for an update without a key or one that
// sets the fence column, fencelock.ErrMissingToken for token 0 and the
// dialect's token error.
func (u *Update) SQL(d Dialect) (string, []any, error) {
	table, tok, err := u.check(d)
	if err != nil {
		return "", nil, err
	}
	a := &args{d: d}
	var b strings.Builder
	b.WriteString("UPDATE " + table + " SET ")
	for _, s := range u.sets {
		b.WriteString(d.Column(s.column) + " = " + a.param(s.value) + ", ")
	}
	tokParam := a.param(tok)
	b.WriteString(FenceColumn + " = " + tokParam + " WHERE ")
	for _, k := range u.keys {
		b.WriteString(d.Column(k.column) + " = " + a.param(k.value) + " AND ")
	}
	for _, c := range u.conds {
		if IsNull(c.value) {
			b.WriteString(d.Column(c.column) + " IS NULL AND ")
			continue
		}
		b.WriteString(d.Column(c.column) + " = " + a.param(c.value) + " AND ")
	}
	if !d.Reuse {
		tokParam = a.param(tok)
	}
	b.WriteString(FenceColumn + " <= " + tokParam)
	return b.String(), a.vals, nil
}

// check validates u and returns its quoted table and converted token.
func (u *Update) check(d Dialect) (string, any, error) {
	if len(u.keys) == 0 {
		return "", nil, fmt.Errorf("build fenced update of %s: no Key names the row: %w", u.Table, fencelock.ErrInvalidArgument)
	}
	if err := fence.Admit(u.Domain(), 0, u.Token); err != nil {
		return "", nil, fmt.Errorf("build fenced update: %w", err)
	}
	tok, err := d.Token(u.Token)
	if err != nil {
		return "", nil, fmt.Errorf("build fenced update of %s: %w", u.Table, err)
	}
	table, err := d.Table(u.Table)
	if err != nil {
		return "", nil, fmt.Errorf("build fenced update: %w", err)
	}
	for _, s := range u.sets {
		if s.column == FenceColumn {
			return "", nil, fmt.Errorf("build fenced update of %s: Set(%q) would bypass the fence: %w", u.Table, FenceColumn, fencelock.ErrInvalidArgument)
		}
	}
	for _, k := range u.keys {
		if IsNull(k.value) {
			return "", nil, fmt.Errorf("build fenced update of %s: Key(%q) is NULL, which names no row: %w", u.Table, k.column, fencelock.ErrInvalidArgument)
		}
	}
	for _, a := range append(append(append([]assignment{}, u.sets...), u.keys...), u.conds...) {
		if a.column == "" || strings.ContainsRune(a.column, 0) {
			return "", nil, fmt.Errorf("build fenced update of %s: column name %q is malformed: %w", u.Table, a.column, fencelock.ErrInvalidName)
		}
	}
	return table, tok, nil
}

// FenceSQL returns the read of the row's fence column, locking the row
// for reading, to run when the UPDATE changed nothing.
func (u *Update) FenceSQL(d Dialect) (string, []any, error) {
	table, err := d.Table(u.Table)
	if err != nil {
		return "", nil, err
	}
	a := &args{d: d}
	var q strings.Builder
	q.WriteString("SELECT " + FenceColumn + " FROM " + table + " WHERE ")
	for i, k := range u.keys {
		if i > 0 {
			q.WriteString(" AND ")
		}
		q.WriteString(d.Column(k.column) + " = " + a.param(k.value))
	}
	q.WriteString(" " + d.ShareLock)
	return q.String(), a.vals, nil
}

// Judge explains an UPDATE that changed nothing, given the row's fence
// column: a *fencelock.StaleTokenError if a higher token wrote the row,
// nil (the condition did not hold: already done) otherwise.
func (u *Update) Judge(last fencelock.Token) error {
	return fence.Admit(u.Domain(), last, u.Token)
}

// IsNull reports whether a driver sends v as SQL NULL: nil; a nil pointer,
// slice or map; or a driver.Valuer whose value is nil (sql.NullTime{},
// pgtype.Timestamptz{}, and the like).
func IsNull(v any) bool {
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
