package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/postgres"
)

// ordersDB creates the orders table with order 42 pending, and adds
// the fence column (twice: AddFenceColumn is idempotent).
func ordersDB(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	db := newTestDB(tb)
	pool := db.pool(tb)
	db.exec(tb, pool, `CREATE TABLE orders (id INT PRIMARY KEY, status TEXT NOT NULL, paid_amount NUMERIC)`)
	db.exec(tb, pool, `INSERT INTO orders (id, status) VALUES (42, 'pending')`)
	for range 2 {
		if err := postgres.AddFenceColumn(tb.Context(), pool, "orders"); err != nil {
			tb.Fatalf("AddFenceColumn returned %v", err)
		}
	}
	return pool
}

// pay is the payment: pending -> paid, fenced by token.
func pay(ctx context.Context, db postgres.Querier, orderID int, amount int, token fencelock.Token) (bool, error) {
	return postgres.NewUpdate("orders", token).
		Set("status", "paid").
		Set("paid_amount", amount).
		Key("id", orderID).
		Where("status", "pending").
		Exec(ctx, db)
}

func TestUpdate_Exec(t *testing.T) {
	pool := ordersDB(t)
	ctx := t.Context()
	// Steps run in order on one order, each seeing the previous ones.
	steps := []struct {
		name        string
		order       int
		token       fencelock.Token
		wantApplied bool
		wantErr     error
	}{
		{name: "B pays with 34", order: 42, token: 34, wantApplied: true},
		{name: "A wakes up and pays with 33: stale", order: 42, token: 33, wantErr: fencelock.ErrStaleToken},
		{name: "B retries with 34: already paid, not an error", order: 42, token: 34},
		{name: "C pays with 35: already paid, not an error", order: 42, token: 35},
		{name: "token 0", order: 42, token: 0, wantErr: fencelock.ErrMissingToken},
		{name: "token beyond BIGINT", order: 42, token: math.MaxInt64 + 1, wantErr: fencelock.ErrInvalidToken},
		{name: "no such order", order: 7, token: 50, wantErr: fencelock.ErrNotFound},
	}
	staleBefore := testutil.ToFloat64(fence.Refusals.WithLabelValues("postgres", "stale"))
	for _, s := range steps {
		applied, err := pay(ctx, pool, s.order, 100, s.token)
		if applied != s.wantApplied || !errors.Is(err, s.wantErr) || (err != nil) != (s.wantErr != nil) {
			t.Fatalf("%s: Exec = %v, %v; want %v, %v", s.name, applied, err, s.wantApplied, s.wantErr)
		}
		var stale *fencelock.StaleTokenError
		if errors.As(err, &stale) && (stale.Token != 33 || stale.Highest != 34 || stale.Domain != "orders(id=42)") {
			t.Fatalf("%s: StaleTokenError is %+v, want token 33, highest 34, domain orders(id=42)", s.name, *stale)
		}
	}
	var status string
	var last int64
	if err := pool.QueryRow(ctx, `SELECT status, last_fence FROM orders WHERE id = 42`).Scan(&status, &last); err != nil {
		t.Fatal(err)
	}
	if status != "paid" || last != 34 {
		t.Fatalf("order 42 ends %s with last_fence %d, want paid with 34", status, last)
	}
	if n := testutil.ToFloat64(fence.Refusals.WithLabelValues("postgres", "stale")) - staleBefore; n != 1 {
		t.Errorf("fencelock_fence_refusals_total{adapter=postgres,reason=stale} rose by %v, want 1", n)
	}
}

// A Where value sent as NULL is "paid_at IS NULL": the update applies once,
// and a second one finds the condition gone (not an error).
func TestUpdate_Exec_NullCondition(t *testing.T) {
	pool := ordersDB(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `ALTER TABLE orders ADD COLUMN paid_at TIMESTAMPTZ`); err != nil {
		t.Fatal(err)
	}
	token := fencelock.Token(33)
	for _, null := range []any{nil, (*time.Time)(nil), sql.NullTime{}} {
		if _, err := pool.Exec(ctx, `UPDATE orders SET paid_at = NULL`); err != nil {
			t.Fatal(err)
		}
		payOnce := func(token fencelock.Token) (bool, error) {
			return postgres.NewUpdate("orders", token).
				Set("paid_at", time.Now()).
				Key("id", 42).
				Where("paid_at", null).
				Exec(ctx, pool)
		}
		token += 2
		if applied, err := payOnce(token); !applied || err != nil {
			t.Fatalf("Where(paid_at, %#v): first update = %v, %v; want applied", null, applied, err)
		}
		if applied, err := payOnce(token + 1); applied || err != nil {
			t.Fatalf("Where(paid_at, %#v): second update = %v, %v; want not applied and no error (already done)", null, applied, err)
		}
		if _, err := payOnce(token - 1); !errors.Is(err, fencelock.ErrStaleToken) {
			t.Fatalf("Where(paid_at, %#v): an older token's update = %v; want ErrStaleToken", null, err)
		}
	}
}

func TestUpdate_SQL(t *testing.T) {
	tests := []struct {
		name     string
		update   *postgres.Update
		wantSQL  string
		wantArgs int
		wantErr  error
	}{
		{
			name:     "process_payment",
			update:   postgres.NewUpdate("orders", 34).Set("status", "paid").Set("paid_amount", 100).Key("id", 42).Where("status", "pending"),
			wantSQL:  `UPDATE "orders" SET "status" = $1, "paid_amount" = $2, last_fence = $3 WHERE "id" = $4 AND "status" = $5 AND last_fence <= $3`,
			wantArgs: 5,
		},
		{
			name:     "schema-qualified, quoted identifiers",
			update:   postgres.NewUpdate(`billing.Orders`, 1).Set(`a"b`, 1).Key("id", 1),
			wantSQL:  `UPDATE "billing"."Orders" SET "a""b" = $1, last_fence = $2 WHERE "id" = $3 AND last_fence <= $2`,
			wantArgs: 3,
		},
		{
			name: "a nil condition tests IS NULL",
			update: postgres.NewUpdate("orders", 34).Set("status", "paid").Key("id", 42).Where("paid_at", nil).Where("note", (*string)(nil)).
				Where("shipped_at", sql.NullTime{}).Where("tags", []string(nil)).Where("meta", map[string]any(nil)).Where("amount", sql.NullInt64{Int64: 5, Valid: true}),
			wantSQL:  `UPDATE "orders" SET "status" = $1, last_fence = $2 WHERE "id" = $3 AND "paid_at" IS NULL AND "note" IS NULL AND "shipped_at" IS NULL AND "tags" IS NULL AND "meta" IS NULL AND "amount" = $4 AND last_fence <= $2`,
			wantArgs: 4,
		},
		{name: "no key", update: postgres.NewUpdate("orders", 34).Set("status", "paid"), wantErr: fencelock.ErrInvalidArgument},
		{name: "a NULL key", update: postgres.NewUpdate("orders", 34).Set("status", "paid").Key("id", nil), wantErr: fencelock.ErrInvalidArgument},
		{name: "a NULL key from a Valuer", update: postgres.NewUpdate("orders", 34).Set("status", "paid").Key("id", sql.NullInt64{}), wantErr: fencelock.ErrInvalidArgument},
		{name: "setting the fence column", update: postgres.NewUpdate("orders", 34).Set("last_fence", 0).Key("id", 1), wantErr: fencelock.ErrInvalidArgument},
		{name: "token 0", update: postgres.NewUpdate("orders", 0).Key("id", 1), wantErr: fencelock.ErrMissingToken},
		{name: "empty table name", update: postgres.NewUpdate("", 1).Key("id", 1), wantErr: fencelock.ErrInvalidName},
		{name: "empty column name", update: postgres.NewUpdate("t", 1).Key("", 1), wantErr: fencelock.ErrInvalidName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sql, args, err := tt.update.SQL()
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("SQL() error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if sql != tt.wantSQL || len(args) != tt.wantArgs {
				t.Fatalf("SQL() = %s with %d args,\nwant   %s with %d args", sql, len(args), tt.wantSQL, tt.wantArgs)
			}
		})
	}
}

// TestUpdate_Exec_concurrent runs two fenced updates of one row at once; the
// second waits on the row lock of the first.
func TestUpdate_Exec_concurrent(t *testing.T) {
	tests := []struct {
		name          string
		first, second fencelock.Token
		wantSecondErr error
		wantBody      string
	}{
		{name: "33 then 34", first: 33, second: 34, wantBody: "34"},
		{name: "34 then 33", first: 34, second: 33, wantSecondErr: fencelock.ErrStaleToken, wantBody: "34"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := newTestDB(t)
			pool := db.pool(t)
			db.exec(t, pool, `CREATE TABLE docs (id INT PRIMARY KEY, body TEXT NOT NULL DEFAULT '')`)
			db.exec(t, pool, `INSERT INTO docs (id) VALUES (1)`)
			if err := postgres.AddFenceColumn(t.Context(), pool, "docs"); err != nil {
				t.Fatal(err)
			}
			err := runPair(t, pool, tt.first, tt.second, true, func(ctx context.Context, tx pgx.Tx, tok fencelock.Token) error {
				applied, err := postgres.NewUpdate("docs", tok).Set("body", tok.String()).Key("id", 1).Exec(ctx, tx)
				if err == nil && !applied {
					return errors.New("update not applied, and no error")
				}
				return err
			})
			if !errors.Is(err, tt.wantSecondErr) || (err != nil) != (tt.wantSecondErr != nil) {
				t.Fatalf("second update (token %d) returned %v, want %v", tt.second, err, tt.wantSecondErr)
			}
			var body string
			if err := pool.QueryRow(t.Context(), `SELECT body FROM docs WHERE id = 1`).Scan(&body); err != nil {
				t.Fatal(err)
			}
			if body != tt.wantBody {
				t.Fatalf("docs 1 holds %q, want %q", body, tt.wantBody)
			}
		})
	}
}

func TestAddFenceColumn(t *testing.T) {
	pool := ordersDB(t)
	var def string
	err := pool.QueryRow(t.Context(), `SELECT data_type || ' ' || is_nullable || ' ' || column_default
		FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'last_fence'
		AND table_schema = current_schema()`).Scan(&def)
	if err != nil || !strings.HasPrefix(def, "bigint NO 0") {
		t.Fatalf("last_fence column is %q (%v), want bigint NOT NULL DEFAULT 0", def, err)
	}
	if err := postgres.AddFenceColumn(t.Context(), pool, "missing_table"); err == nil {
		t.Fatal("AddFenceColumn on a missing table returned nil, want an error")
	}
	if err := postgres.AddFenceColumn(t.Context(), pool, "orders"); err != nil {
		t.Fatalf("AddFenceColumn again: %v", err)
	}
	for _, col := range []string{"INTEGER NOT NULL DEFAULT 0", "BIGINT"} {
		if _, err := pool.Exec(t.Context(), `DROP TABLE IF EXISTS odd; CREATE TABLE odd (id INT, last_fence `+col+`)`); err != nil {
			t.Fatal(err)
		}
		if err := postgres.AddFenceColumn(t.Context(), pool, "odd"); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("AddFenceColumn on a table whose last_fence is %s: %v, want ErrInvalidArgument", col, err)
		}
	}
}

// TestUpdate_Exec_staleAtRepeatableRead: in a REPEATABLE READ transaction
// whose snapshot predates a newer holder's write, a stale update is not
// reported as "already done" (applied false, no error) from the snapshot's
// old fence value: the follow-up read locks the row, so the transaction
// fails with a serialization error and its retry reports the stale token.
func TestUpdate_Exec_staleAtRepeatableRead(t *testing.T) {
	pool := ordersDB(t)
	ctx := t.Context()
	if ok, err := pay(ctx, pool, 42, 100, 4); !ok || err != nil {
		t.Fatalf("pay(4) = %v, %v", ok, err)
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var status string
	if err := tx.QueryRow(ctx, `SELECT status FROM orders WHERE id = 42`).Scan(&status); err != nil { // the snapshot
		t.Fatal(err)
	}
	if ok, err := postgres.NewUpdate("orders", 6).Set("status", "refunded").Key("id", 42).Exec(ctx, pool); !ok || err != nil {
		t.Fatalf("refund(6) = %v, %v", ok, err)
	}
	applied, err := pay(ctx, tx, 42, 100, 4) // 4 is stale now
	if applied || err == nil {
		t.Fatalf("stale pay(4) in a REPEATABLE READ transaction = %v, %v; want an error (a serialization failure or a stale token), not \"already done\"", applied, err)
	}
}
