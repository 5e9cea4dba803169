package fencelocktest

import (
	"net/http/httptest"
	"testing"

	"github.com/fencelock/fencelock/store"
)

// Store is a fenced object store served on loopback for one test.
type Store struct {
	Server *store.Server
	Client *store.Client
	URL    string // base URL, e.g. http://127.0.0.1:41234
}

// StartStore opens a store with cfg (in tb.TempDir() if cfg.DataDir is
// empty), serves it on a loopback port and stops it when the test ends.
func StartStore(tb testing.TB, cfg store.Config) *Store {
	tb.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = tb.TempDir()
	}
	srv, err := store.Open(cfg)
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	hs := httptest.NewServer(srv)
	tb.Cleanup(func() {
		hs.Close()
		if err := srv.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	c, err := store.NewClient(hs.URL, store.WithHTTPClient(hs.Client()))
	if err != nil {
		tb.Fatalf("new store client: %v", err)
	}
	return &Store{Server: srv, Client: c, URL: hs.URL}
}
