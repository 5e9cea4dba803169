package postgres_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock/postgres"
	"github.com/fencelock/fencelock/sequencer"
)

func TestFence_DoSequencer(t *testing.T) {
	db := newTestDB(t)
	pool := db.pool(t)
	if err := postgres.CreateFenceTable(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	db.exec(t, pool, `CREATE TABLE notes (n INT)`)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, forger, _ := ed25519.GenerateKey(rand.Reader)
	v := &sequencer.Verifier{Keys: []sequencer.Key{{ClusterID: "c", ID: "k", Public: pub}}}
	now := time.Now()
	seq := sequencer.Sequencer{Lock: "notes", Token: 1<<40 + 3, ClusterID: "c", KeyID: "k", Issued: now, LeaseEnd: now.Add(time.Minute)}
	write := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO notes VALUES (1)`)
		return err
	}
	f := postgres.New(pool)
	if err := f.DoSequencer(t.Context(), v, sequencer.Sign(seq, priv), "notes", write); err != nil {
		t.Fatal(err)
	}
	if err := f.DoSequencer(t.Context(), v, sequencer.Sign(seq, forger), "notes", write); !errors.Is(err, sequencer.ErrBadSignature) {
		t.Fatalf("a forged sequencer: %v, want ErrBadSignature", err)
	}
	if err := f.DoSequencer(t.Context(), v, sequencer.Sign(seq, priv), "payments", write); !errors.Is(err, sequencer.ErrWrongLock) {
		t.Fatalf("a sequencer for another lock: %v, want ErrWrongLock", err)
	}
	if h, _ := f.Highest(t.Context(), "notes"); h != seq.Token {
		t.Fatalf("highest of notes %d, want the sequencer's token %d", h, seq.Token)
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM notes`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("notes holds %d rows (%v), want 1", n, err)
	}
}
