package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	driver "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/mysql"
)

// testDB opens a database of the test's own on the test server, dropped
// when the test ends, and returns a function that opens new connections
// to it.
func testDB(tb testing.TB) func(tb testing.TB) *sql.DB {
	tb.Helper()
	cfg, err := driver.ParseDSN(fencelocktest.MySQLDSN(tb))
	if err != nil {
		tb.Fatal(err)
	}
	name := fmt.Sprintf("fencelock_test_%x", rand.Uint64())
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := admin.ExecContext(tb.Context(), "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create database at %s: %v", cfg.Addr, err)
	}
	tb.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE "+name)
		admin.Close()
	})
	cfg.DBName = name
	return func(tb testing.TB) *sql.DB {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { db.Close() })
		return db
	}
}

func exec(tb testing.TB, db *sql.DB, q string, args ...any) {
	tb.Helper()
	if _, err := db.ExecContext(tb.Context(), q, args...); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
}

func kvTarget(tb testing.TB, open func(testing.TB) *sql.DB) fencelocktest.Target {
	db := open(tb)
	table, err := mysql.NewTable(db, "kv")
	if err != nil {
		tb.Fatal(err)
	}
	if err := table.Create(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	return fencelocktest.Target{
		Resource: table,
		Restart: func(tb testing.TB) fencelocktest.Target {
			db.Close() // new connections, same database
			return kvTarget(tb, open)
		},
	}
}

func TestTable_Suite(t *testing.T) {
	open := testDB(t)
	fencelocktest.RunFenceSuite(t, func(tb testing.TB) fencelocktest.Target { return kvTarget(tb, open) })
}

func TestCheck(t *testing.T) {
	db := testDB(t)(t)
	if err := mysql.CreateFenceTable(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		domain  string
		token   fencelock.Token
		wantErr error
	}{
		{name: "accepted", domain: "d", token: 35},
		{name: "equal", domain: "d", token: 35},
		{name: "stale", domain: "d", token: 34, wantErr: fencelock.ErrStaleToken},
		{name: "zero", domain: "d", token: 0, wantErr: fencelock.ErrMissingToken},
		{name: "beyond BIGINT", domain: "e", token: math.MaxInt64 + 2},
		{name: "just below it", domain: "e", token: math.MaxInt64 + 1, wantErr: fencelock.ErrStaleToken},
		{name: "the largest token", domain: "e", token: math.MaxUint64},
		{name: "empty domain", domain: "", token: 35, wantErr: fencelock.ErrInvalidName},
		{name: "case matters", domain: "D", token: 1},
	}
	f := mysql.New(db)
	for _, tt := range tests {
		err := f.Check(t.Context(), tt.domain, tt.token)
		if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: Check(%q, %d) = %v, want %v", tt.name, tt.domain, tt.token, err, tt.wantErr)
		}
	}
	if h, err := f.Highest(t.Context(), "e"); err != nil || h != math.MaxUint64 {
		t.Errorf("Highest(e) = %d, %v; want 2^64-1", h, err)
	}
}

// TestUpdate: the row fence applies, refuses a stale token, tells "already
// done" apart, and reports a missing row.
func TestUpdate(t *testing.T) {
	db := testDB(t)(t)
	exec(t, db, "CREATE TABLE orders (id INT PRIMARY KEY, status VARCHAR(20) NOT NULL, paid_amount INT NULL) ENGINE=InnoDB")
	exec(t, db, "INSERT INTO orders (id, status) VALUES (42, 'pending')")
	for range 2 { // idempotent
		if err := mysql.AddFenceColumn(t.Context(), db, "orders"); err != nil {
			t.Fatal(err)
		}
	}
	pay := func(token fencelock.Token, id int) (bool, error) {
		return mysql.NewUpdate("orders", token).Set("status", "paid").Set("paid_amount", 100).
			Key("id", id).Where("status", "pending").Exec(t.Context(), db)
	}
	if applied, err := pay(34, 42); !applied || err != nil {
		t.Fatalf("first payment: applied %v, %v; want applied", applied, err)
	}
	var stale *fencelock.StaleTokenError
	if applied, err := pay(33, 42); applied || !errors.As(err, &stale) || stale.Highest != 34 {
		t.Fatalf("stale payment: applied %v, %v; want a StaleTokenError with highest 34", applied, err)
	}
	if applied, err := pay(35, 42); applied || err != nil {
		t.Fatalf("repeated payment: applied %v, %v; want already done (false, nil)", applied, err)
	}
	if _, err := pay(35, 7); !errors.Is(err, fencelock.ErrNotFound) {
		t.Fatalf("payment of a missing order: %v, want ErrNotFound", err)
	}
	sqlText, _, err := mysql.NewUpdate("shop.orders", 5).Set("a`b", 1).Key("id", 1).SQL()
	if want := "UPDATE `shop`.`orders` SET `a``b` = ?, last_fence = ? WHERE `id` = ? AND last_fence <= ?"; err != nil || sqlText != want {
		t.Fatalf("SQL() = %q, %v; want %q", sqlText, err, want)
	}
	if _, err := mysql.NewUpdate("orders", 5).Set(mysql.FenceColumn, 9).Key("id", 42).Exec(t.Context(), db); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Set(last_fence) = %v, want ErrInvalidArgument", err)
	}
}

func TestAddFenceColumn_wrongType(t *testing.T) {
	db := testDB(t)(t)
	exec(t, db, "CREATE TABLE t (id INT PRIMARY KEY, last_fence INT NULL)")
	if err := mysql.AddFenceColumn(t.Context(), db, "t"); !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), "BIGINT UNSIGNED NOT NULL") {
		t.Fatalf("AddFenceColumn on a nullable INT last_fence = %v, want ErrInvalidArgument", err)
	}
}

// TestDo_staleRollsBack: with Do, a stale token leaves none of
// the function's writes behind (it does not even run).
func TestDo_staleRollsBack(t *testing.T) {
	db := testDB(t)(t)
	if err := mysql.CreateFenceTable(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "CREATE TABLE notes (n INT) ENGINE=InnoDB")
	f := mysql.New(db)
	write := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO notes VALUES (1)")
		return err
	}
	if err := f.Do(t.Context(), "d", 10, write); err != nil {
		t.Fatal(err)
	}
	if err := f.Do(t.Context(), "d", 9, write); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("stale Do = %v", err)
	}
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM notes").Scan(&n); err != nil || n != 1 {
		t.Fatalf("notes has %d rows (%v), want 1", n, err)
	}
}

// TestCheck_staleEndsTheTransaction: a caller that ignores a stale Check
// cannot write in its transaction.
func TestCheck_staleEndsTheTransaction(t *testing.T) {
	db := testDB(t)(t)
	if err := mysql.CreateFenceTable(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "CREATE TABLE notes (n INT) ENGINE=InnoDB")
	if err := mysql.New(db).Check(t.Context(), "d", 10); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mysql.Check(t.Context(), tx, "d", 9); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("stale Check = %v", err)
	}
	if _, err := tx.ExecContext(t.Context(), "INSERT INTO notes VALUES (1)"); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("a write after a stale Check returned %v, want sql.ErrTxDone", err)
	}
	_ = tx.Commit()
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM notes").Scan(&n); err != nil || n != 0 {
		t.Fatalf("notes has %d rows (%v), want 0", n, err)
	}
}
