package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/postgres"
)

// TestCheck_savepointCannotUndoARefusal: a caller that runs a stale Check
// inside a savepoint and rolls back to it cannot commit what it writes
// next, whatever the savepoint's form.
func TestCheck_savepointCannotUndoARefusal(t *testing.T) {
	db := newTestDB(t)
	pool := db.pool(t)
	db.exec(t, pool, `CREATE TABLE ledger (id INT PRIMARY KEY)`)
	db.exec(t, pool, `INSERT INTO fencelock_fences VALUES ('d', 34)`)
	role := unprivilegedRole(t, db, pool)
	tests := []struct {
		name string
		run  func(t *testing.T) (checkErr, commitErr error)
	}{
		{name: "SAVEPOINT and ROLLBACK TO SAVEPOINT", run: func(t *testing.T) (error, error) {
			return savepointPgx(t, pool, "")
		}},
		{name: "after an accepted Check outside the savepoint", run: func(t *testing.T) (error, error) {
			return savepointPgx(t, pool, "accept")
		}},
		{name: "after SET ROLE to a role that may not end the session", run: func(t *testing.T) (error, error) {
			if role == "" {
				t.Skip("the test's database user may not create roles")
			}
			return savepointPgx(t, pool, "SET LOCAL ROLE "+role)
		}},
		{name: "after SET SESSION AUTHORIZATION to a role that may not end the session", run: func(t *testing.T) (error, error) {
			if role == "" {
				t.Skip("the test's database user may not create roles")
			}
			return savepointPgx(t, pool, "SET LOCAL SESSION AUTHORIZATION "+role)
		}},
		{name: "a nested pgx transaction", run: func(t *testing.T) (error, error) {
			return nestedPgx(t, pool)
		}},
		{name: "database/sql", run: func(t *testing.T) (error, error) {
			return savepointSQL(t, db.sqlDB(t))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db.exec(t, pool, `DELETE FROM ledger`)
			checkErr, commitErr := tt.run(t)
			if !errors.Is(checkErr, fencelock.ErrStaleToken) {
				t.Fatalf("Check with token 33 after 34 returned %v, want ErrStaleToken", checkErr)
			}
			var n int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM ledger`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 || commitErr == nil {
				t.Fatalf("after ROLLBACK TO SAVEPOINT, the commit returned %v and %d rows are stored; want the commit refused and no row", commitErr, n)
			}
			if got, _ := postgres.Highest(t.Context(), pool, "d"); got != 34 {
				t.Fatalf("Highest(d) = %d, want 34", got)
			}
		})
	}
}

// savepointPgx runs, in one transaction: setup ("accept" for an accepted
// Check with token 34, else a statement, if any), SAVEPOINT, a Check with
// the stale token 33, ROLLBACK TO SAVEPOINT, a write, and the commit.
func savepointPgx(tb testing.TB, pool *pgxpool.Pool, setup string) (checkErr, commitErr error) {
	tb.Helper()
	ctx := tb.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	switch setup {
	case "":
	case "accept":
		err = postgres.Check(ctx, tx, "d", 34)
	default:
		_, err = tx.Exec(ctx, setup)
	}
	if err != nil {
		tb.Fatalf("before the savepoint: %v", err)
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
		tb.Fatal(err)
	}
	checkErr = postgres.Check(ctx, tx, "d", 33)
	_, _ = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`)
	_, _ = tx.Exec(ctx, `INSERT INTO ledger VALUES (1)`)
	return checkErr, tx.Commit(ctx)
}

// nestedPgx runs a stale Check in a pgx nested transaction (a savepoint),
// rolls it back, writes in the outer transaction and commits it.
func nestedPgx(tb testing.TB, pool *pgxpool.Pool) (checkErr, commitErr error) {
	tb.Helper()
	ctx := tb.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	nested, err := tx.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	checkErr = postgres.Check(ctx, nested, "d", 33)
	_ = nested.Rollback(ctx)
	_, _ = tx.Exec(ctx, `INSERT INTO ledger VALUES (1)`)
	return checkErr, tx.Commit(ctx)
}

// savepointSQL is savepointPgx through database/sql, with CheckSQL.
func savepointSQL(tb testing.TB, sdb *sql.DB) (checkErr, commitErr error) {
	tb.Helper()
	ctx := tb.Context()
	tx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SAVEPOINT s`); err != nil {
		tb.Fatal(err)
	}
	checkErr = postgres.CheckSQL(ctx, tx, "d", 33)
	_, _ = tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT s`)
	_, _ = tx.ExecContext(ctx, `INSERT INTO ledger VALUES (1)`)
	return checkErr, tx.Commit()
}

// unprivilegedRole creates a role that may write the test's tables but not
// signal the test user's backend, dropped when the test ends; "" if the
// test's user may not create roles.
func unprivilegedRole(tb testing.TB, db *testDB, pool *pgxpool.Pool) string {
	tb.Helper()
	role := fmt.Sprintf("fencelock_test_role_%x", rand.Uint64())
	if _, err := pool.Exec(tb.Context(), `CREATE ROLE `+role); err != nil {
		tb.Logf("create role: %v", err)
		return ""
	}
	tb.Cleanup(func() {
		ctx := context.Background()
		for _, q := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			if _, err := pool.Exec(ctx, q); err != nil {
				tb.Errorf("%s: %v", q, err)
			}
		}
	})
	db.exec(tb, pool, `GRANT USAGE ON SCHEMA `+db.schema+` TO `+role)
	db.exec(tb, pool, `GRANT SELECT, INSERT, UPDATE ON fencelock_fences, ledger TO `+role)
	return role
}

// TestFence_Do_staleKeepsTheConnection: a refusal outside any savepoint
// rolls the transaction back and leaves its connection usable.
func TestFence_Do_staleKeepsTheConnection(t *testing.T) {
	db := newTestDB(t)
	cfg, err := pgx.ParseConfig(db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = db.schema
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	f := postgres.New(conn)
	noop := func(context.Context, pgx.Tx) error { return nil }
	if err := f.Do(t.Context(), "d", 34, noop); err != nil {
		t.Fatalf("Do with token 34: %v, want it accepted", err)
	}
	if err := f.Do(t.Context(), "d", 33, noop); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("Do with token 33 after 34: %v, want ErrStaleToken", err)
	}
	if err := f.Do(t.Context(), "d", 35, noop); err != nil {
		t.Fatalf("Do with token 35 on the same connection after a refusal: %v, want it accepted", err)
	}
}
