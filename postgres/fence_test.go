package postgres_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/postgres"
)

// kvTarget is a Table.
func kvTarget(tb testing.TB, db *testDB) fencelocktest.Target {
	tb.Helper()
	pool := db.pool(tb)
	table, err := postgres.NewTable(pool, "kv")
	if err != nil {
		tb.Fatal(err)
	}
	if err := table.Create(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	return fencelocktest.Target{
		Resource: table,
		Restart: func(tb testing.TB) fencelocktest.Target {
			pool.Close() // new connections, same database
			return kvTarget(tb, db)
		},
	}
}

func TestTable_Suite(t *testing.T) {
	db := newTestDB(t)
	fencelocktest.RunFenceSuite(t, func(tb testing.TB) fencelocktest.Target { return kvTarget(tb, db) })
}

func TestCheck(t *testing.T) {
	db := newTestDB(t)
	pool := db.pool(t)
	tests := []struct {
		name    string
		domain  string
		token   fencelock.Token
		wantErr error
	}{
		{name: "accepted", domain: "d", token: 35},
		{name: "equal", domain: "d", token: 34},
		{name: "stale", domain: "d", token: 33, wantErr: fencelock.ErrStaleToken},
		{name: "zero", domain: "d", token: 0, wantErr: fencelock.ErrMissingToken},
		{name: "beyond BIGINT", domain: "d", token: math.MaxInt64 + 1, wantErr: fencelock.ErrInvalidToken},
		{name: "largest BIGINT", domain: "e", token: math.MaxInt64},
		{name: "empty domain", domain: "", token: 35, wantErr: fencelock.ErrInvalidName},
		{name: "NUL in domain", domain: "a\x00", token: 35, wantErr: fencelock.ErrInvalidName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db.exec(t, pool, `DELETE FROM fencelock_fences`)
			db.exec(t, pool, `INSERT INTO fencelock_fences VALUES ('d', 34)`)
			err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
				return postgres.Check(t.Context(), tx, tt.domain, tt.token)
			})
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Check(%q, %d) returned %v, want %v", tt.domain, tt.token, err, tt.wantErr)
			}
			want := fencelock.Token(34)
			if tt.wantErr == nil && tt.domain == "d" {
				want = max(34, tt.token)
			}
			if got, err := postgres.Highest(t.Context(), pool, "d"); err != nil || got != want {
				t.Fatalf("Highest(d) after Check = %d, %v; want %d", got, err, want)
			}
		})
	}
}

// TestCheck_staleAbortsTheTransaction: a caller that ignores a stale
// refusal and goes on cannot commit its writes.
func TestCheck_staleAbortsTheTransaction(t *testing.T) {
	db := newTestDB(t)
	pool := db.pool(t)
	db.exec(t, pool, `CREATE TABLE ledger (id INT PRIMARY KEY)`)
	db.exec(t, pool, `INSERT INTO fencelock_fences VALUES ('d', 34)`)
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := postgres.Check(ctx, tx, "d", 33); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("Check with a stale token: %v, want ErrStaleToken", err)
	}
	_, werr := tx.Exec(ctx, `INSERT INTO ledger VALUES (1)`)
	cerr := tx.Commit(ctx)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 || cerr == nil {
		t.Fatalf("after a stale Check: write %v, commit %v, %d rows stored; want the write refused and the commit rolled back", werr, cerr, n)
	}
}

// TestCheck_concurrent runs two transactions of one domain at once: the
// first takes the fence, the second waits on its row, then the first ends.
func TestCheck_concurrent(t *testing.T) {
	db := newTestDB(t)
	pool := db.pool(t)
	tests := []struct {
		name          string
		first, second fencelock.Token
		firstCommits  bool
		wantSecondErr error
		wantHighest   fencelock.Token
	}{
		{name: "33 then 34", first: 33, second: 34, firstCommits: true, wantHighest: 34},
		{name: "34 then 33", first: 34, second: 33, firstCommits: true, wantSecondErr: fencelock.ErrStaleToken, wantHighest: 34},
		{name: "34 rolls back, then 33", first: 34, second: 33, firstCommits: false, wantHighest: 33},
		{name: "34 then 34", first: 34, second: 34, firstCommits: true, wantHighest: 34},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			domain := "orders/" + t.Name()
			err := runPair(t, pool, tt.first, tt.second, tt.firstCommits, func(ctx context.Context, tx pgx.Tx, tok fencelock.Token) error {
				return postgres.Check(ctx, tx, domain, tok)
			})
			if !errors.Is(err, tt.wantSecondErr) || (err != nil) != (tt.wantSecondErr != nil) {
				t.Fatalf("second transaction (token %d) returned %v, want %v", tt.second, err, tt.wantSecondErr)
			}
			var stale *fencelock.StaleTokenError
			if errors.As(err, &stale) && (stale.Highest != tt.first || stale.Token != tt.second || stale.Domain != domain) {
				t.Fatalf("second transaction returned %+v, want token %d refused by highest %d in %q", *stale, tt.second, tt.first, domain)
			}
			if got, _ := postgres.Highest(t.Context(), pool, domain); got != tt.wantHighest {
				t.Fatalf("Highest = %d, want %d", got, tt.wantHighest)
			}
		})
	}
}

// runPair starts a transaction that runs op with token first, then a second
// transaction running op with token second, waits until PostgreSQL reports
// the second blocked on a lock, ends the first (commit or rollback), and
// returns the second's error. The second commits if op succeeded.
func runPair(tb testing.TB, pool *pgxpool.Pool, first, second fencelock.Token, firstCommits bool,
	op func(ctx context.Context, tx pgx.Tx, token fencelock.Token) error) error {
	tb.Helper()
	ctx := tb.Context()
	tx1, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatalf("begin first: %v", err)
	}
	defer tx1.Rollback(context.Background())
	if err := op(ctx, tx1, first); err != nil {
		tb.Fatalf("first transaction (token %d) returned %v, want it accepted", first, err)
	}
	tx2, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatalf("begin second: %v", err)
	}
	defer tx2.Rollback(context.Background())
	var pid uint32
	if err := tx2.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		tb.Fatalf("read pid: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		err := op(ctx, tx2, second)
		if err == nil {
			err = tx2.Commit(ctx)
		}
		done <- err
	}()
	waitBlocked(tb, pool, pid, done)
	if firstCommits {
		if err := tx1.Commit(ctx); err != nil {
			tb.Fatalf("commit first: %v", err)
		}
	} else if err := tx1.Rollback(ctx); err != nil {
		tb.Fatalf("roll back first: %v", err)
	}
	return <-done
}

// waitBlocked returns once backend pid waits on a lock. If the operation
// finishes instead, the test fails: it should have waited.
func waitBlocked(tb testing.TB, pool *pgxpool.Pool, pid uint32, done chan error) {
	tb.Helper()
	for {
		select {
		case err := <-done:
			tb.Fatalf("second transaction finished (%v) without waiting for the first", err)
		default:
		}
		var blocked bool
		err := pool.QueryRow(tb.Context(),
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&blocked)
		if err != nil {
			tb.Fatalf("read pg_stat_activity: %v", err)
		}
		if blocked {
			return
		}
	}
}
