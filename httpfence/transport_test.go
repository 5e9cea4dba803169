package httpfence_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpfence"
)

type holder struct {
	token fencelock.Token
	err   error
}

func (h *holder) Token() fencelock.Token { return h.token }
func (h *holder) Err() error             { return h.err }

func TestTransport(t *testing.T) {
	var got atomic.Int32
	var tok, dom atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		tok.Store(r.Header.Get("Fencing-Token"))
		dom.Store(r.Header.Get("Fencing-Domain"))
	}))
	defer srv.Close()
	lock := &holder{token: 42}
	hc := &http.Client{Transport: &httpfence.Transport{Lock: lock, Domain: "reports"}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/x", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if tok.Load() != "42" || dom.Load() != "reports" || req.Header.Get("Fencing-Token") != "" {
		t.Fatalf("server saw token %v, domain %v (caller's request changed: %q); want 42, reports, unchanged", tok.Load(), dom.Load(), req.Header.Get("Fencing-Token"))
	}
	lock.err = fencelock.ErrLeaseExpired
	_, err = hc.Get(srv.URL + "/x")
	if !errors.Is(err, fencelock.ErrLeaseExpired) || got.Load() != 1 {
		t.Fatalf("after the lease was lost: %v, %d requests reached the server; want ErrLeaseExpired and 1", err, got.Load())
	}
}
