package verify_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/verify"
)

// postgresResource returns a DSN for the test server whose connections work
// in a schema of their own, dropped when the test ends.
func postgresResource(t *testing.T) string {
	t.Helper()
	dsn := fencelocktest.PostgresDSN(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", dsn, err)
	}
	defer conn.Close(context.Background())
	schema := fmt.Sprintf("fencelock_verify_%x", rand.Uint64())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Errorf("connect to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

// mysqlResource returns a mysql:// spec for a database of the test's own
// on the test server, dropped when the test ends.
func mysqlResource(t *testing.T) string {
	t.Helper()
	cfg, err := driver.ParseDSN(fencelocktest.MySQLDSN(t))
	if err != nil {
		t.Fatalf("parse %s: %v", fencelocktest.EnvMySQLDSN, err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("fencelock_verify_%x", rand.Uint64())
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("create database at %s: %v", cfg.Addr, err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return "mysql://" + cfg.FormatDSN()
}

// redisResource returns the test server's URL and deletes the keys of runs
// with seed when the test ends.
func redisResource(t *testing.T, seed uint64) string {
	t.Helper()
	addr := fencelocktest.RedisAddr(t)
	t.Cleanup(func() {
		rdb := goredis.NewClient(&goredis.Options{Addr: addr})
		defer rdb.Close()
		ctx := context.Background()
		for _, pattern := range []string{fmt.Sprintf("fencelock:*verify-%d-*", seed), fmt.Sprintf("fencelock:*verify-%d-*", seed+1)} {
			iter := rdb.Scan(ctx, 0, pattern, 100).Iterator()
			for iter.Next(ctx) {
				rdb.Del(ctx, iter.Val())
			}
		}
	})
	return "redis://" + addr
}

// TestResources runs the zombie client (scenario 4) and the negative
// control against PostgreSQL, MySQL (MariaDB in CI), Redis and S3 instead
// of the object store: the
// zombie's stale writes must be refused by their fences,
// and with fencing off (one token for every write) the checker must find
// the lost updates.
func TestResources(t *testing.T) {
	bin := testproc.Binary(t)
	seed := uint64(time.Now().UnixNano() % 1e9)
	for _, tc := range []struct {
		name string
		spec func(t *testing.T) string
	}{
		{"postgres", postgresResource},
		{"mysql", mysqlResource},
		{"redis", func(t *testing.T) string { return redisResource(t, seed) }},
		{"s3", func(t *testing.T) string { return fencelocktest.S3Bucket(t, "verify") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := verify.DefaultConfig()
			cfg.Binary, cfg.OutDir, cfg.Seed = bin, t.TempDir(), seed
			if out := os.Getenv("FENCELOCK_VERIFY_OUT"); out != "" {
				cfg.OutDir = filepath.Join(out, "resource-"+tc.name)
			}
			cfg.Resource = tc.spec(t)
			cfg.Duration = 6 * time.Second
			cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rs, err := verify.Run(ctx, cfg, "zombie-client", "neg")
			if err != nil {
				t.Fatalf("run against %s: %v", tc.name, err)
			}
			var table bytes.Buffer
			verify.WriteTable(&table, rs)
			t.Logf("seed %d, resource %s\n%s", seed, verify.Redact(cfg.Resource), table.String())
			if len(rs) != 2 {
				t.Fatalf("got %d results, want 2", len(rs))
			}
			if r := rs[0]; !r.Pass || r.StaleRejected < 1 || r.Resource != verify.Redact(cfg.Resource) {
				t.Errorf("zombie-client on %s: verdict %q, %d stale writes rejected, resource %q; want PASS with at least one rejected (history in %s)",
					tc.name, r.Verdict, r.StaleRejected, r.Resource, r.Dir)
			}
			r := rs[1]
			if !r.Pass {
				t.Errorf("negative control on %s: verdict %q, want the violation detected (history in %s)", tc.name, r.Verdict, r.Dir)
			}
			for _, c := range r.Checks {
				if c.Name == "store" && c.Valid {
					t.Errorf("negative control on %s: the store checker found no violation with fencing off", tc.name)
				}
			}
		})
	}
}
