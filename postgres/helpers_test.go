package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/postgres"
)

// testDB is a schema of its own on the test server, dropped when the test
// ends, with the fence table created.
type testDB struct {
	dsn    string
	schema string
}

func newTestDB(tb testing.TB) *testDB {
	tb.Helper()
	dsn := fencelocktest.PostgresDSN(tb)
	conn, err := pgx.Connect(tb.Context(), dsn)
	if err != nil {
		tb.Fatalf("connect to %s: %v", dsn, err)
	}
	defer conn.Close(context.Background())
	schema := fmt.Sprintf("fencelock_test_%x", rand.Uint64())
	if _, err := conn.Exec(tb.Context(), "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			tb.Errorf("connect to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	db := &testDB{dsn: dsn, schema: schema}
	pool := db.pool(tb)
	if err := postgres.CreateFenceTable(tb.Context(), pool); err != nil {
		tb.Fatalf("CreateFenceTable returned %v", err)
	}
	return db
}

// pool returns a new pool whose connections work in the test's schema,
// closed when the test ends.
func (db *testDB) pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(db.dsn)
	if err != nil {
		tb.Fatalf("parse DSN: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = db.schema
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(tb.Context(), cfg)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

func (db *testDB) exec(tb testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	tb.Helper()
	if _, err := pool.Exec(tb.Context(), sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}
