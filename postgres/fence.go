package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/sequencer"
)

// FenceTable is the table of the domain fence.
const FenceTable = "fencelock_fences"

// FenceTableSQL creates the domain fence's table. Run it with
// CreateFenceTable, or add it to your migrations.
const FenceTableSQL = `CREATE TABLE IF NOT EXISTS fencelock_fences (
    domain TEXT PRIMARY KEY,
    token  BIGINT NOT NULL CHECK (token > 0)
)`

const (
	checkSQL = `INSERT INTO fencelock_fences AS f (domain, token) VALUES ($1, $2)
ON CONFLICT (domain) DO UPDATE SET token = EXCLUDED.token
WHERE f.token <= EXCLUDED.token
RETURNING f.token`
	highestSQL = `SELECT token FROM fencelock_fences WHERE domain = $1`
	// probeSQL reads the highest token of a domain whose row the
	// transaction has locked, and whether the transaction runs outside
	// every savepoint: the row version an UPDATE writes carries the xid of
	// the current subtransaction, which is the top-level xid (the low 32
	// bits of txid_current()) only outside every savepoint.
	probeSQL = `UPDATE fencelock_fences SET token = token WHERE domain = $1
RETURNING token, xmin::text::bigint = txid_current() % 4294967296`
	// abortSQL fails on purpose: PostgreSQL then refuses every further
	// statement of the transaction, and its commit rolls back. Inside a
	// savepoint, ROLLBACK TO SAVEPOINT would undo that.
	abortSQL = `DO $$ BEGIN RAISE EXCEPTION 'fencelock: stale fencing token; this transaction must roll back'; END $$`
	// endSessionSQL ends the session, which rolls the whole transaction
	// back: no savepoint survives it. It first returns to the role that
	// logged in, which may always signal its own backend, whatever SET ROLE
	// or SET SESSION AUTHORIZATION switched to.
	endSessionSQL = `DO $$ BEGIN
RESET SESSION AUTHORIZATION;
PERFORM pg_terminate_backend(pg_backend_pid());
RAISE EXCEPTION 'fencelock: stale fencing token; this session must end';
END $$`
)

// Querier runs statements: a pgx.Tx, a *pgx.Conn or a *pgxpool.Pool.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is a database Fence can open transactions on: a *pgxpool.Pool or a
// *pgx.Conn.
type DB interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// CreateFenceTable creates the fencelock_fences table if it does not exist.
func CreateFenceTable(ctx context.Context, db Querier) error {
	if _, err := db.Exec(ctx, FenceTableSQL); err != nil {
		return fmt.Errorf("create table %s: %w", FenceTable, err)
	}
	return nil
}

// dbToken checks that token fits in a BIGINT.
func dbToken(token fencelock.Token) (int64, error) {
	if token > math.MaxInt64 {
		return 0, fmt.Errorf("token %d does not fit in a BIGINT: %w", token, fencelock.ErrInvalidToken)
	}
	return int64(token), nil
}

// Check fences tx in domain: it accepts token if it is at least the highest
// token the domain has accepted, stores it as the new highest, and keeps the
// domain's row locked until tx ends, so the rest of tx is fenced. Call it
// before tx's writes. It returns a *fencelock.StaleTokenError for a lower
// token, after which tx cannot commit: outside every savepoint, tx is
// aborted (PostgreSQL refuses its further statements, and its commit rolls
// back); inside a savepoint (SAVEPOINT, or a pgx nested transaction), Check
// ends tx's session with pg_terminate_backend, so that no ROLLBACK TO
// SAVEPOINT can revive tx, and the connection is closed. Other errors: one
// wrapping fencelock.ErrMissingToken for 0, ErrInvalidToken for a token
// above math.MaxInt64, and ErrInvalidName for a malformed domain. The table
// must exist (CreateFenceTable).
func Check(ctx context.Context, tx pgx.Tx, domain string, token fencelock.Token) error {
	return fence.Refused("postgres", check(ctx, tx, domain, token))
}

func check(ctx context.Context, tx Querier, domain string, token fencelock.Token) error {
	if err := fence.ValidateDomain(domain); err != nil {
		return fmt.Errorf("check fence: %w", err)
	}
	if err := fence.Admit(domain, 0, token); err != nil {
		return err
	}
	tok, err := dbToken(token)
	if err != nil {
		return fmt.Errorf("check fence %q: %w", domain, err)
	}
	var stored int64
	err = tx.QueryRow(ctx, checkSQL, domain, tok).Scan(&stored)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("check fence %q: %w", domain, err)
	}
	// The row exists with a higher token; the upsert locked it, so the
	// probe sees the value that refused us.
	var topLevel bool
	if err := tx.QueryRow(ctx, probeSQL, domain).Scan(&stored, &topLevel); err != nil {
		return fmt.Errorf("check fence %q: read highest token: %w", domain, err)
	}
	if err := fence.Admit(domain, fencelock.Token(stored), token); err != nil {
		endTx(ctx, tx, topLevel)
		return err
	}
	return fmt.Errorf("check fence %q: token %d refused although the highest token is %d", domain, token, stored)
}

// endTx makes tx unable to commit after a refusal, so that a caller that
// goes on anyway never lands its writes unfenced: it aborts tx, or, inside
// a savepoint, whose rollback would undo that, ends tx's session.
func endTx(ctx context.Context, tx Querier, topLevel bool) {
	if topLevel {
		_, _ = tx.Exec(ctx, abortSQL)
		return
	}
	_, _ = tx.Exec(ctx, endSessionSQL)
}

// Highest returns the highest token domain has accepted, or 0, as seen by db.
func Highest(ctx context.Context, db Querier, domain string) (fencelock.Token, error) {
	if err := fence.ValidateDomain(domain); err != nil {
		return 0, fmt.Errorf("read highest token: %w", err)
	}
	var stored int64
	err := db.QueryRow(ctx, highestSQL, domain).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read highest token of %q: %w", domain, err)
	}
	return fencelock.Token(stored), nil
}

var _ fencelock.Fence = (*Fence)(nil)

// Fence is the domain fence over a database. It is safe for concurrent use
// if its DB is (a *pgxpool.Pool is).
type Fence struct {
	db DB
}

// New returns the domain fence of db. The fencelock_fences table must exist
// (CreateFenceTable).
func New(db DB) *Fence { return &Fence{db: db} }

// Do runs fn in a transaction fenced in domain by token: Check first, then
// fn, then commit. If Check refuses the token or fn fails, the transaction
// rolls back and Do returns that error; Check's errors are those documented
// on Check.
func (f *Fence) Do(ctx context.Context, domain string, token fencelock.Token, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, f.db, func(tx pgx.Tx) error {
		if err := Check(ctx, tx, domain, token); err != nil {
			return err
		}
		return fn(ctx, tx)
	})
}

// Check raises domain's highest token to token in a transaction of its own,
// writing nothing else. See the package function Check for the errors.
func (f *Fence) Check(ctx context.Context, domain string, token fencelock.Token) error {
	return f.Do(ctx, domain, token, func(context.Context, pgx.Tx) error { return nil })
}

// Highest returns the highest token domain has accepted, or 0.
func (f *Fence) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	return Highest(ctx, f.db, domain)
}

// Guard returns f as an httpfence.Guard, for httpfence.Handler: Do runs fn
// in a transaction fenced by token in domain, as Fence.Do does, and fn finds
// the transaction with TxFromContext.
func (f *Fence) Guard() Guard { return Guard{f} }

// Guard runs functions in fenced transactions; see Fence.Guard.
type Guard struct{ f *Fence }

type txKey struct{}

// Do runs fn in a transaction fenced by token in domain, with the
// transaction in fn's context; it commits if fn returns nil.
func (g Guard) Do(ctx context.Context, domain string, token fencelock.Token, fn func(ctx context.Context) error) error {
	return g.f.Do(ctx, domain, token, func(ctx context.Context, tx pgx.Tx) error {
		return fn(context.WithValue(ctx, txKey{}, tx))
	})
}

// TxFromContext returns the fenced transaction of a Guard's fn.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// DoSequencer is Do for the grant a sequencer proves: v verifies seq for
// lock domain (the domain is the lock's name), and fn runs in a
// transaction fenced by the sequencer's token. A write with a sequencer
// cannot carry an invented token. Errors: v's (each wraps
// fencelock.ErrInvalidSequencer), then Do's.
func (f *Fence) DoSequencer(ctx context.Context, v *sequencer.Verifier, seq, domain string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	s, err := v.Verify(seq, fencelock.LockName(domain))
	if err != nil {
		return fmt.Errorf("fenced transaction: %w", err)
	}
	return f.Do(ctx, domain, s.Token, fn)
}
