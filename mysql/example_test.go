package mysql_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/go-sql-driver/mysql"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/mysql"
)

// Pay order 42 once, whatever a stale worker does. Not run: it needs a
// database.
func Example() {
	ctx := context.Background()
	var token fencelock.Token = 34 // lock.Token() of the grant on "order:42"
	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/shop")
	if err != nil {
		log.Fatal(err)
	}
	if err := mysql.AddFenceColumn(ctx, db, "orders"); err != nil {
		log.Fatal(err)
	}
	applied, err := mysql.NewUpdate("orders", token).
		Set("status", "paid").Key("id", 42).Where("status", "pending").Exec(ctx, db)
	log.Println(applied, err) // false, nil: already paid; a *fencelock.StaleTokenError: fenced off

	// Several writes under one domain fence:
	err = mysql.New(db).Do(ctx, "order:42", token, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (order_id, amount) VALUES (?, ?)", 42, 100)
		return err
	})
	log.Println(err)
}
