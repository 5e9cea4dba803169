package httpfence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/httpfence"
	"github.com/fencelock/fencelock/postgres"
)

// notes is a service writing to PostgreSQL in the transaction the
// middleware fenced: PUT /notes/{key} upserts, GET reads.
func notes(pool *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/notes/")
		if r.Method == http.MethodGet {
			var body []byte
			err := pool.QueryRow(r.Context(), `SELECT body FROM notes WHERE key = $1`, key).Scan(&body)
			if errors.Is(err, pgx.ErrNoRows) {
				http.NotFound(w, r)
				return
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = w.Write(body)
			return
		}
		tx, ok := postgres.TxFromContext(r.Context())
		if !ok {
			http.Error(w, "no fenced transaction", http.StatusInternalServerError)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if _, err := tx.Exec(r.Context(), `INSERT INTO notes (key, body) VALUES ($1, $2)
			ON CONFLICT (key) DO UPDATE SET body = EXCLUDED.body`, key, body); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// pgPool connects to the test server in a schema of the test's own.
func pgPool(tb testing.TB, schema string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(fencelocktest.PostgresDSN(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(tb.Context(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// startNotes serves notes behind Handler, fenced in PostgreSQL.
func startNotes(tb testing.TB, schema string) fencelocktest.Target {
	pool := pgPool(tb, schema)
	f := postgres.New(pool)
	mux := http.NewServeMux()
	mux.Handle("/notes/", httpfence.Handler(f.Guard(), notes(pool)))
	mux.Handle("/fences/", http.StripPrefix("/fences", httpfence.FencesHandler(f)))
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	c, err := httpfence.NewClient(srv.URL+"/notes", httpfence.WithFences(srv.URL+"/fences"))
	if err != nil {
		tb.Fatal(err)
	}
	return fencelocktest.Target{
		Resource: c,
		Restart: func(tb testing.TB) fencelocktest.Target {
			srv.Close() // the service goes away; the database keeps its state
			return startNotes(tb, schema)
		},
	}
}

// TestHandler_PostgresSuite: a service whose handler writes to PostgreSQL
// in the middleware's fenced transaction passes the shared suite.
func TestHandler_PostgresSuite(t *testing.T) {
	schema := fmt.Sprintf("httpfence_%x", rand.Uint64())
	admin := pgPool(t, "public")
	if _, err := admin.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	pool := pgPool(t, schema)
	if err := postgres.CreateFenceTable(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `CREATE TABLE notes (key TEXT PRIMARY KEY, body BYTEA NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	fencelocktest.RunFenceSuite(t, func(tb testing.TB) fencelocktest.Target { return startNotes(tb, schema) })
}
