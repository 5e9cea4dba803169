package httpfence_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/httpfence"
)

// values is a service of your own: PUT /values/{key} stores the body, GET
// reads it back. It knows nothing of fencing.
type values struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (v *values) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/values/")
	v.mu.Lock()
	defer v.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		b, ok := v.m[key]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	case http.MethodPut:
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if string(b) == "refuse me" {
			http.Error(w, "no", http.StatusUnprocessableEntity)
			return
		}
		v.m[key] = b
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

// fencedService serves values behind Handler, fenced by m, with m's fence
// endpoints under /fences/.
func fencedService(t *testing.T, m *fence.Memory) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/values/", httpfence.Handler(m, &values{m: map[string][]byte{}}))
	mux.Handle("/fences/", http.StripPrefix("/fences", httpfence.FencesHandler(m)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestHandler_Suite(t *testing.T) {
	srv := fencedService(t, fence.NewMemory())
	fencelocktest.RunFenceSuite(t, func(tb testing.TB) fencelocktest.Target {
		c, err := httpfence.NewClient(srv.URL+"/values", httpfence.WithFences(srv.URL+"/fences"))
		if err != nil {
			tb.Fatal(err)
		}
		return fencelocktest.Target{Resource: c}
	})
}

func send(t *testing.T, method, url string, header map[string]string, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp, httpfence.ResponseError(resp)
}

// TestHandler_contract: the answers of the contract, and a handler that
// refuses a write leaves the domain's token where it was.
func TestHandler_contract(t *testing.T) {
	m := fence.NewMemory()
	srv := fencedService(t, m)
	url := srv.URL + "/values/report"
	tests := []struct {
		name       string
		header     map[string]string
		body       string
		wantStatus int
		wantErr    error
	}{
		{"accepted", map[string]string{"Fencing-Token": "34", "Fencing-Domain": "reports"}, "v34", 204, nil},
		{"stale", map[string]string{"Fencing-Token": "33", "Fencing-Domain": "reports"}, "v33", 409, fencelock.ErrStaleToken},
		{"missing", map[string]string{"Fencing-Domain": "reports"}, "v", 428, fencelock.ErrMissingToken},
		{"malformed", map[string]string{"Fencing-Token": "x", "Fencing-Domain": "reports"}, "v", 400, fencelock.ErrInvalidToken},
		{"token 0", map[string]string{"Fencing-Token": "0", "Fencing-Domain": "reports"}, "v", 428, fencelock.ErrMissingToken},
		{"empty domain", map[string]string{"Fencing-Token": "35", "Fencing-Domain": ""}, "v", 400, fencelock.ErrInvalidName},
		{"refused by the handler", map[string]string{"Fencing-Token": "40", "Fencing-Domain": "reports"}, "refuse me", 422, nil},
		{"no domain", map[string]string{"Fencing-Token": "41"}, "v", 400, fencelock.ErrInvalidName},
	}
	for _, tt := range tests {
		resp, err := send(t, http.MethodPut, url, tt.header, tt.body)
		if resp.StatusCode != tt.wantStatus || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: answered %d (%v), want %d and an error wrapping %v", tt.name, resp.StatusCode, err, tt.wantStatus, tt.wantErr)
		}
	}
	var stale *fencelock.StaleTokenError
	_, err := send(t, http.MethodPut, url, map[string]string{"Fencing-Token": "33", "Fencing-Domain": "reports"}, "v")
	if !errors.As(err, &stale) || stale.Domain != "reports" || stale.Token != 33 || stale.Highest != 34 {
		t.Errorf("stale answer decodes to %v, want a StaleTokenError{reports 33 34}", err)
	}
	if h, _ := m.Highest(t.Context(), "reports"); h != 34 {
		t.Errorf("highest of reports is %d after the handler refused token 40, want 34", h)
	}
	if resp, err := send(t, http.MethodGet, url, nil, ""); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET answered %d (%v), want 200 without a token", resp.StatusCode, err)
	}
}

// countingGuard counts the writes that reached the guard.
type countingGuard struct {
	fence.Memory
	n atomic.Int32
}

func (g *countingGuard) Do(ctx context.Context, domain string, token fencelock.Token, fn func(context.Context) error) error {
	g.n.Add(1)
	return g.Memory.Do(ctx, domain, token, fn)
}

// TestHandler_answerOverLimit: an answer over the limit rolls back.
func TestHandler_answerOverLimit(t *testing.T) {
	g := &countingGuard{}
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(make([]byte, 100)) })
	srv := httptest.NewServer(httpfence.Handler(g, big, httpfence.WithMaxResponse(10)))
	defer srv.Close()
	resp, err := send(t, http.MethodPost, srv.URL+"/x", map[string]string{"Fencing-Token": "5", "Fencing-Domain": "x"}, "")
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !errors.Is(err, fencelock.ErrTooLarge) || g.n.Load() != 1 {
		t.Fatalf("answered %d (%v) after %d guarded writes, want 413 after 1", resp.StatusCode, err, g.n.Load())
	}
	if h, _ := g.Highest(t.Context(), "x"); h != 0 {
		t.Fatalf("highest of x is %d after a rolled-back write, want 0", h)
	}
}

// TestHandler_nilGuard: without a guard the handler gets the Write and
// fences through an adapter itself.
func TestHandler_nilGuard(t *testing.T) {
	m := fence.NewMemory()
	h := httpfence.Handler(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wr, ok := httpfence.FromContext(r.Context())
		if !ok {
			t.Error("no Write in the context")
		}
		if err := m.Check(r.Context(), wr.Domain, wr.Token); err != nil {
			httpfence.WriteError(w, err)
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	if _, err := send(t, http.MethodPut, srv.URL+"/d", map[string]string{"Fencing-Token": "9", "Fencing-Domain": "d"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := send(t, http.MethodPut, srv.URL+"/d", map[string]string{"Fencing-Token": "8", "Fencing-Domain": "d"}, ""); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("stale write through the adapter answered %v, want stale", err)
	}
}

// TestHandler_serviceNamesTheDomain: with WithDomain the service decides;
// a header naming another domain is refused, so a stale holder cannot pick
// a domain nobody raised.
func TestHandler_serviceNamesTheDomain(t *testing.T) {
	m := fence.NewMemory()
	byInvoice := httpfence.WithDomain(func(r *http.Request) string { return "invoice:" + strings.TrimPrefix(r.URL.Path, "/invoices/") })
	srv := httptest.NewServer(httpfence.Handler(m, &values{m: map[string][]byte{}}, byInvoice))
	defer srv.Close()
	if _, err := send(t, http.MethodPut, srv.URL+"/invoices/42", map[string]string{"Fencing-Token": "34"}, "v"); err != nil {
		t.Fatal(err)
	}
	if h, _ := m.Highest(t.Context(), "invoice:42"); h != 34 {
		t.Fatalf("highest of invoice:42 = %d, want 34", h)
	}
	_, err := send(t, http.MethodPut, srv.URL+"/invoices/42", map[string]string{"Fencing-Token": "33", "Fencing-Domain": "elsewhere"}, "v")
	if !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("a write naming another domain answered %v, want invalid_argument", err)
	}
	_, err = send(t, http.MethodPut, srv.URL+"/invoices/42", map[string]string{"Fencing-Token": "33", "Fencing-Domain": "invoice:42"}, "v")
	if !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("a stale write naming the right domain answered %v, want stale", err)
	}
}

// TestHandler_bodyIsReadFirst: the body is read before the guard runs, and
// one over the limit is refused without reaching it.
func TestHandler_bodyIsReadFirst(t *testing.T) {
	g := &countingGuard{}
	srv := httptest.NewServer(httpfence.Handler(g, &values{m: map[string][]byte{}}, httpfence.WithMaxBody(4)))
	defer srv.Close()
	resp, err := send(t, http.MethodPut, srv.URL+"/values/k", map[string]string{"Fencing-Token": "5", "Fencing-Domain": "d"}, "too long")
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !errors.Is(err, fencelock.ErrTooLarge) || g.n.Load() != 0 {
		t.Fatalf("answered %d (%v) after %d guarded writes, want 413 before the guard", resp.StatusCode, err, g.n.Load())
	}
	if _, err := send(t, http.MethodPut, srv.URL+"/values/k", map[string]string{"Fencing-Token": "5", "Fencing-Domain": "d"}, "ok"); err != nil || g.n.Load() != 1 {
		t.Fatalf("a body within the limit: %v after %d guarded writes", err, g.n.Load())
	}
}

// TestClient_redirectIsNoWrite: a write the service redirects (the mux
// cleaning a path) did not happen, and the Client says so.
func TestClient_redirectIsNoWrite(t *testing.T) {
	srv := fencedService(t, fence.NewMemory())
	c, err := httpfence.NewClient(srv.URL + "/values")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(t.Context(), "d", 5, "a//b", []byte("v")); err == nil {
		t.Fatal("Put of a key the mux redirects returned nil, want an error")
	}
}
