package httpfence_test

import (
	"context"
	"log"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/httpfence"
	"github.com/fencelock/fencelock/postgres"
)

// A service of your own becomes a fenced resource: its handler writes in
// the transaction the middleware fenced. Not run: it needs PostgreSQL.
func ExampleHandler() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1/app")
	if err != nil {
		log.Fatal(err)
	}
	invoices := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := postgres.TxFromContext(r.Context()) // fenced by the request's Fencing-Token
		if _, err := tx.Exec(r.Context(), `UPDATE invoices SET status = 'sent' WHERE id = $1`, 42); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // rolls back
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux := http.NewServeMux()
	mux.Handle("/invoices/", httpfence.Handler(postgres.New(pool).Guard(), invoices))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}

// A client sends its lock's token with every call, and nothing once the
// lease is lost. Not run: it needs a lock service.
func ExampleTransport() {
	ctx := context.Background()
	c, err := client.New("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	lock, err := c.Acquire(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.WithoutCancel(ctx))
	hc := &http.Client{Transport: &httpfence.Transport{Lock: lock, Domain: lock.Name()}}
	resp, err := hc.Post("http://127.0.0.1:8080/invoices/42", "application/json", strings.NewReader(`{}`))
	if err != nil {
		log.Fatal(err) // also: the lease was lost, nothing was sent
	}
	defer resp.Body.Close()
	if err := httpfence.ResponseError(resp); err != nil {
		log.Fatal(err) // errors.As(err, &stale) for a 409
	}
}
