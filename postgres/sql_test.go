package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/postgres"
)

// sqlDB opens db's schema through database/sql with pgx's stdlib driver.
func (db *testDB) sqlDB(tb testing.TB) *sql.DB {
	tb.Helper()
	sep := "?"
	if strings.Contains(db.dsn, "?") {
		sep = "&"
	}
	sdb, err := sql.Open("pgx", db.dsn+sep+"search_path="+db.schema)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sdb.Close() })
	return sdb
}

// sqlKV is a key-value table fenced with SQLFence: Table through
// database/sql.
type sqlKV struct {
	*postgres.SQLFence
	db *sql.DB
}

func (kv sqlKV) Put(ctx context.Context, domain string, token fencelock.Token, key string, value []byte) (int64, error) {
	var version int64
	err := kv.Do(ctx, domain, token, func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `INSERT INTO kv AS t (key, value, version) VALUES ($1, $2, 1)
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = t.version + 1
			RETURNING version`, key, value).Scan(&version)
	})
	return version, err
}

func (kv sqlKV) Get(ctx context.Context, key string) ([]byte, int64, error) {
	var v []byte
	var version int64
	err := kv.db.QueryRowContext(ctx, `SELECT value, version FROM kv WHERE key = $1`, key).Scan(&v, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fencelock.ErrNotFound
	}
	return v, version, err
}

func sqlTarget(tb testing.TB, db *testDB) fencelocktest.Target {
	tb.Helper()
	sdb := db.sqlDB(tb)
	return fencelocktest.Target{
		Resource: sqlKV{postgres.NewSQL(sdb), sdb},
		Restart: func(tb testing.TB) fencelocktest.Target {
			sdb.Close()
			return sqlTarget(tb, db)
		},
	}
}

func TestSQLFence_Suite(t *testing.T) {
	db := newTestDB(t)
	db.exec(t, db.pool(t), `CREATE TABLE kv (key TEXT PRIMARY KEY, value BYTEA NOT NULL, version BIGINT NOT NULL)`)
	fencelocktest.RunFenceSuite(t, func(tb testing.TB) fencelocktest.Target { return sqlTarget(tb, db) })
}

// The row fence through database/sql: applied, stale, already done, missing.
func TestUpdate_ExecThroughDatabaseSQL(t *testing.T) {
	db := newTestDB(t)
	pool := db.pool(t)
	db.exec(t, pool, `CREATE TABLE orders (id INT PRIMARY KEY, status TEXT NOT NULL)`)
	db.exec(t, pool, `INSERT INTO orders VALUES (42, 'pending')`)
	q := postgres.FromSQL(db.sqlDB(t))
	ctx := t.Context()
	if err := postgres.AddFenceColumn(ctx, q, "orders"); err != nil {
		t.Fatal(err)
	}
	pay := func(tok fencelock.Token, id int) (bool, error) {
		return postgres.NewUpdate("orders", tok).Set("status", "paid").Key("id", id).Where("status", "pending").Exec(ctx, q)
	}
	if ok, err := pay(34, 42); !ok || err != nil {
		t.Fatalf("pay with 34 = %v, %v; want applied", ok, err)
	}
	var stale *fencelock.StaleTokenError
	if _, err := pay(33, 42); !errors.As(err, &stale) || stale.Highest != 34 {
		t.Fatalf("pay with 33 after 34 = %v; want a StaleTokenError with highest 34", err)
	}
	if ok, err := pay(35, 42); ok || err != nil {
		t.Fatalf("pay with 35 of a paid order = %v, %v; want not applied, no error", ok, err)
	}
	if _, err := pay(50, 7); !errors.Is(err, fencelock.ErrNotFound) {
		t.Fatalf("pay of a missing order = %v; want ErrNotFound", err)
	}
	if h, err := postgres.Highest(ctx, q, "nobody"); h != 0 || err != nil {
		t.Fatalf("Highest of a new domain = %d, %v", h, err)
	}
}

// CheckSQL leaves a refused transaction aborted: nothing it writes lands.
func TestCheckSQL_StaleAbortsTheTransaction(t *testing.T) {
	db := newTestDB(t)
	db.exec(t, db.pool(t), `CREATE TABLE kv (key TEXT PRIMARY KEY, value BYTEA NOT NULL)`)
	sdb := db.sqlDB(t)
	ctx := t.Context()
	if err := postgres.NewSQL(sdb).Check(ctx, "d", 9); err != nil {
		t.Fatal(err)
	}
	tx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := postgres.CheckSQL(ctx, tx, "d", 8); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("CheckSQL(8) after 9 = %v; want stale", err)
	}
	_, _ = tx.ExecContext(ctx, `INSERT INTO kv VALUES ('k', 'stale')`)
	if err := tx.Commit(); err == nil {
		var n int
		_ = sdb.QueryRowContext(ctx, `SELECT count(*) FROM kv`).Scan(&n)
		if n != 0 {
			t.Fatalf("a write after a refused CheckSQL was committed")
		}
	}
}
