package verify

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/postgres"
)

// listsTableSQL is the table of the PostgreSQL resource: one row per
// domain, its version bumped by every write.
const listsTableSQL = `CREATE TABLE IF NOT EXISTS fencelock_verify_lists (
    domain  TEXT PRIMARY KEY,
    list    TEXT[] NOT NULL,
    version BIGINT NOT NULL
)`

const (
	writeListSQL = `INSERT INTO fencelock_verify_lists AS l (domain, list, version) VALUES ($1, $2, 1)
ON CONFLICT (domain) DO UPDATE SET list = EXCLUDED.list, version = l.version + 1
RETURNING version`
	readListSQL = `SELECT list, version FROM fencelock_verify_lists WHERE domain = $1`
)

// postgresResource keeps the lists in PostgreSQL, fenced by the domain
// fence of package postgres: Fence is postgres.Fence.Check, and Write runs
// Check and the upsert in one transaction (postgres.Fence.Do), so the row
// lock on the domain's fence orders the writes and their versions.
type postgresResource struct {
	pool    *pgxpool.Pool
	fence   *postgres.Fence
	fencing bool
}

var _ Resource = (*postgresResource)(nil)

func openPostgresResource(ctx context.Context, dsn string, fencing bool) (*postgresResource, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres resource: %w: %w", fencelock.ErrInvalidArgument, err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres resource: %w", err)
	}
	// Several workers start at once: CREATE TABLE IF NOT EXISTS is not
	// safe concurrently, so they take turns.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7326010465)`); err != nil {
			return err
		}
		if err := postgres.CreateFenceTable(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, listsTableSQL)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres resource: create tables: %w", err)
	}
	return &postgresResource{pool: pool, fence: postgres.New(pool), fencing: fencing}, nil
}

func (p *postgresResource) Fence(ctx context.Context, domain string, token fencelock.Token) error {
	if !p.fencing {
		return nil
	}
	return p.fence.Check(ctx, domain, token)
}

func (p *postgresResource) Read(ctx context.Context, domain string) ([]string, int64, error) {
	var list []string
	var version int64
	err := p.pool.QueryRow(ctx, readListSQL, domain).Scan(&list, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read list %q: %w", domain, err)
	}
	return list, version, nil
}

func (p *postgresResource) Write(ctx context.Context, domain string, token fencelock.Token, list []string) (int64, error) {
	if list == nil {
		list = []string{}
	}
	var version int64
	write := func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, writeListSQL, domain, list).Scan(&version)
	}
	var err error
	if p.fencing {
		err = p.fence.Do(ctx, domain, token, write)
	} else {
		err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error { return write(ctx, tx) })
	}
	if err != nil {
		return 0, fmt.Errorf("write list %q: %w", domain, err)
	}
	return version, nil
}

func (p *postgresResource) Close() error {
	p.pool.Close()
	return nil
}
