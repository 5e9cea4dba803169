package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/postgres"
)

// The payment of order 42: mark it paid, fenced by the token of the
// lock "order:42". Not run: it needs a PostgreSQL server.
func ExampleNewUpdate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// Once, in a migration:
	if err := postgres.AddFenceColumn(ctx, pool, "orders"); err != nil {
		log.Fatal(err)
	}

	var token fencelock.Token = 34 // from the lock grant of "order:42"
	applied, err := postgres.NewUpdate("orders", token).
		Set("status", "paid").
		Set("paid_amount", 100).
		Key("id", 42).
		Where("status", "pending").
		Exec(ctx, pool)
	switch {
	case errors.Is(err, fencelock.ErrStaleToken):
		fmt.Println("fenced off: a newer holder owns order 42; do not retry with this token")
	case err != nil:
		log.Fatal(err)
	case !applied:
		fmt.Println("order 42 was already paid: nothing to do")
	default:
		fmt.Println("order 42 paid")
	}
}

// Fence a transaction that writes two tables with one Check. Not run: it
// needs a PostgreSQL server.
func ExampleFence_Do() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.CreateFenceTable(ctx, pool); err != nil {
		log.Fatal(err)
	}

	f := postgres.New(pool)
	var token fencelock.Token = 34 // from the lock grant of "order:42"
	err = f.Do(ctx, "order:42", token, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = 42`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO ledger (order_id, amount) VALUES (42, 100)`)
		return err
	})
	var stale *fencelock.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("fenced off: token %d, %q has accepted %d\n", stale.Token, stale.Domain, stale.Highest)
	}
}

// Check is one line at the start of a transaction you manage yourself. Not
// run: it needs a PostgreSQL server.
func ExampleCheck() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)

	tx, err := conn.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := postgres.Check(ctx, tx, "order:42", 34); err != nil {
		log.Fatal(err) // stale: roll back
	}
	// ... every write of tx is now fenced ...
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}
