package store_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/store"
)

// The report.pdf of the demo: worker B (token 34) writes the report; worker A
// (token 33) wakes up from a long GC pause and tries to overwrite it. The
// store refuses A, and B's report survives.
func Example() {
	dir, err := os.MkdirTemp("", "fencelock-store")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := store.DefaultConfig()
	cfg.DataDir = dir
	srv, err := store.Open(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv) // or srv.Serve(ctx, listener)
	defer hs.Close()

	ctx := context.Background()
	c, err := store.NewClient(hs.URL)
	if err != nil {
		log.Fatal(err)
	}
	// Both workers fence in the domain of their lock, "reports".
	if _, err := c.Put(ctx, "report.pdf", 34, strings.NewReader("B's report"), store.WithDomain("reports")); err != nil {
		log.Fatal(err)
	}
	_, err = c.Put(ctx, "report.pdf", 33, strings.NewReader("A's stale report"), store.WithDomain("reports"))
	var stale *fencelock.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("A refused: token %d, domain %q has accepted %d\n", stale.Token, stale.Domain, stale.Highest)
	}

	body, info, err := c.Get(ctx, "report.pdf")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (written with token %d)\n", body, info.Token)
	// Output:
	// A refused: token 33, domain "reports" has accepted 34
	// B's report (written with token 34)
}

// A new holder raises the fence as soon as it acquires the lock, so that the
// old holder's next write is refused even before the new one writes.
func ExampleClient_Check() {
	dir, _ := os.MkdirTemp("", "fencelock-store")
	defer os.RemoveAll(dir)
	srv, err := store.Open(store.Config{DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c, _ := store.NewClient(hs.URL)
	ctx := context.Background()

	fmt.Println(c.Check(ctx, "reports", 34))
	_, err = c.Put(ctx, "report.pdf", 33, strings.NewReader("stale"), store.WithDomain("reports"))
	fmt.Println(errors.Is(err, fencelock.ErrStaleToken))
	// Output:
	// <nil>
	// true
}
