package store_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/store"
)

// testStore is a store served over HTTP on loopback.
type testStore struct {
	srv    *store.Server
	http   *httptest.Server
	client *store.Client
	cfg    store.Config
}

// startStore opens a store in cfg.DataDir (a new temp dir if empty) and
// serves it until the test ends.
func startStore(tb testing.TB, cfg store.Config) *testStore {
	tb.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = tb.TempDir()
	}
	srv, err := store.Open(cfg)
	if err != nil {
		tb.Fatalf("store.Open returned %v", err)
	}
	hs := httptest.NewServer(srv)
	client, err := store.NewClient(hs.URL)
	if err != nil {
		tb.Fatalf("store.NewClient(%q) returned %v", hs.URL, err)
	}
	ts := &testStore{srv: srv, http: hs, client: client, cfg: cfg}
	tb.Cleanup(ts.stop)
	return ts
}

func (ts *testStore) stop() {
	if ts.http == nil {
		return
	}
	ts.http.Close()
	_ = ts.srv.Close()
	ts.http = nil
}

// restart stops the store and opens a new one on the same data dir.
func (ts *testStore) restart(tb testing.TB) *testStore {
	tb.Helper()
	ts.stop()
	return startStore(tb, ts.cfg)
}

// do sends a raw request to the store and returns the answer with its body
// read.
func (ts *testStore) do(tb testing.TB, method, path string, header http.Header, body []byte) (*http.Response, []byte) {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), method, ts.http.URL+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatalf("new request %s %s: %v", method, path, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := ts.http.Client().Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		tb.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, buf.Bytes()
}

func (ts *testStore) target(tb testing.TB) fencelocktest.Target {
	tb.Helper()
	return fencelocktest.Target{
		Resource: ts.client.Resource(),
		Restart: func(tb testing.TB) fencelocktest.Target {
			return ts.restart(tb).target(tb)
		},
	}
}

func TestServer_Suite(t *testing.T) {
	fencelocktest.RunFenceSuite(t, func(tb testing.TB) fencelocktest.Target {
		return startStore(tb, store.DefaultConfig()).target(tb)
	})
}

// TestServer_SuiteInProcess runs the suite against the Server's own Check and
// Highest, with writes over HTTP.
func TestServer_SuiteInProcess(t *testing.T) {
	fencelocktest.RunFenceSuite(t, func(tb testing.TB) fencelocktest.Target {
		ts := startStore(tb, store.DefaultConfig())
		return fencelocktest.Target{Resource: inProcess{ts.client.Resource(), ts.srv}}
	})
}

// inProcess checks and reads tokens with the Server's own methods.
type inProcess struct {
	fence.Resource
	srv *store.Server
}

func (p inProcess) Check(ctx context.Context, domain string, token fencelock.Token) error {
	return p.srv.Check(ctx, domain, token)
}

func (p inProcess) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	return p.srv.Highest(ctx, domain)
}
