package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/postgres"
)

// demoOrdersTable is the payment act's table. It is not called "orders" so
// that the demo never touches a real table in the database it is given.
const demoOrdersTable = "fencelock_demo_orders"

const demoOrderID = 42

// setupDemoOrders creates the table with the row fence's last_fence column
// and puts order 42 back to pending.
func setupDemoOrders(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+demoOrdersTable+` (
		id INT PRIMARY KEY, amount INT NOT NULL, status TEXT NOT NULL, paid_by TEXT)`); err != nil {
		return fmt.Errorf("create %s: %w", demoOrdersTable, err)
	}
	if err := postgres.AddFenceColumn(ctx, conn, demoOrdersTable); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `INSERT INTO `+demoOrdersTable+` (id, amount, status, paid_by, last_fence)
		VALUES ($1, 100, 'pending', NULL, 0)
		ON CONFLICT (id) DO UPDATE SET status = 'pending', paid_by = NULL, last_fence = 0`, demoOrderID)
	if err != nil {
		return fmt.Errorf("reset order %d: %w", demoOrderID, err)
	}
	return nil
}

// readDemoOrder returns order 42's status, payer and last_fence.
func readDemoOrder(ctx context.Context, dsn string) (status, paidBy string, fence int64, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", "", 0, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	var by *string
	err = conn.QueryRow(ctx, `SELECT status, paid_by, last_fence FROM `+demoOrdersTable+` WHERE id = $1`, demoOrderID).
		Scan(&status, &by, &fence)
	if by != nil {
		paidBy = *by
	}
	return status, paidBy, fence, err
}

// payOrder is the payment worker: the payment of order 42 under a lock,
// with the row fence. With gate, it stops after reading the pending order
// until a line arrives on stdin (the demo freezes it there).
func payOrder(ctx context.Context, c *client.Client, dsn, name string, ttl time.Duration, gate bool, emit func(demoEvent)) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	lockName := fmt.Sprintf("orders/%d", demoOrderID)
	emit(demoEvent{Kind: "waiting", Detail: "asks for " + lockName})
	lock, err := c.Acquire(ctx, lockName, client.WithTTL(ttl), client.WithHolder("worker "+name))
	if err != nil {
		return err
	}
	tok := lock.Token()
	emit(demoEvent{Kind: "acquired-order", Token: uint64(tok), Detail: "lease " + ttl.String()})
	var status string
	if err := conn.QueryRow(ctx, `SELECT status FROM `+demoOrdersTable+` WHERE id = $1`, demoOrderID).Scan(&status); err != nil {
		return err
	}
	emit(demoEvent{Kind: "read-order", Token: uint64(tok), Detail: status})
	if gate {
		emit(demoEvent{Kind: "gate", Token: uint64(tok)})
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("wait for the demo: %w", err)
		}
		emit(demoEvent{Kind: "resumed", Token: uint64(tok), Detail: leaseView(lock)})
	}
	wctx := context.WithoutCancel(ctx) // it does not look at its lease, as a paused worker cannot
	applied, err := postgres.NewUpdate(demoOrdersTable, tok).
		Set("status", "paid").Set("paid_by", name).
		Key("id", demoOrderID).Where("status", "pending").
		Exec(wctx, conn)
	var stale *fencelock.StaleTokenError
	switch {
	case errors.As(err, &stale):
		emit(demoEvent{Kind: "pay-rejected", Token: uint64(tok), Highest: uint64(stale.Highest), Detail: err.Error()})
	case err != nil:
		return err
	case applied:
		emit(demoEvent{Kind: "paid", Token: uint64(tok)})
	default:
		emit(demoEvent{Kind: "already-paid", Token: uint64(tok)})
	}
	if err := lock.Release(wctx); err != nil {
		emit(demoEvent{Kind: "release-failed", Token: uint64(tok), Detail: err.Error()})
		return nil
	}
	emit(demoEvent{Kind: "released", Token: uint64(tok)})
	return nil
}
