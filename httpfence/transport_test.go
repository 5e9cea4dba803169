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
	asked atomic.Int32 // calls of Sequencer
}

func (h *holder) Token() fencelock.Token { return h.token }
func (h *holder) Err() error             { return h.err }
func (h *holder) Sequencer() string      { h.asked.Add(1); return "fls1.proof" }

func TestTransport(t *testing.T) {
	var got atomic.Int32
	var tok, dom, seq atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		tok.Store(r.Header.Get("Fencing-Token"))
		dom.Store(r.Header.Get("Fencing-Domain"))
		seq.Store(r.Header.Get("Fencing-Sequencer"))
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
	if seq.Load() != "" || lock.asked.Load() != 0 {
		t.Fatalf("without Sequencer set: sequencer %q sent, the lock asked %d times; want none, never", seq.Load(), lock.asked.Load())
	}
	withSeq := &http.Client{Transport: &httpfence.Transport{Lock: lock, Sequencer: true}}
	resp, err = withSeq.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if seq.Load() != "fls1.proof" || lock.asked.Load() != 1 {
		t.Fatalf("with Sequencer set: sequencer %q sent, the lock asked %d times; want the lock's, once", seq.Load(), lock.asked.Load())
	}
	sent := got.Load()
	lock.err = fencelock.ErrLeaseExpired
	_, err = hc.Get(srv.URL + "/x")
	if !errors.Is(err, fencelock.ErrLeaseExpired) || got.Load() != sent {
		t.Fatalf("after the lease was lost: %v, %d more requests reached the server; want ErrLeaseExpired and none", err, got.Load()-sent)
	}
}
