package store_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/sequencer"
	"github.com/fencelock/fencelock/store"
)

// TestServer_VerifiesSequencers: with a Verifier the store accepts a write
// only with a valid sequencer for the write's domain and token, and the
// client gets each refusal as its own typed error.
func TestServer_VerifiesSequencers(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, oldPriv, _ := ed25519.GenerateKey(rand.Reader) // a key rotated away
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	cfg := store.DefaultConfig()
	cfg.Verifier = &sequencer.Verifier{Keys: []sequencer.Key{{ClusterID: "prod", ID: "k2", Public: pub}}}
	ts := startStore(t, cfg)
	now := time.Now()
	valid := sequencer.Sequencer{Lock: "reports", Token: 34, ClusterID: "prod", KeyID: "k2", Issued: now, LeaseEnd: now.Add(time.Minute)}
	sign := func(change func(*sequencer.Sequencer), key ed25519.PrivateKey) string {
		s := valid
		if change != nil {
			change(&s)
		}
		return sequencer.Sign(s, key)
	}
	_, f, sig, err := sequencer.Parse(sign(nil, priv))
	if err != nil {
		t.Fatal(err)
	}
	f[len(f)-20] ^= 1 // a bit of the lease hash
	tampered := sequencer.Prefix + base64.RawURLEncoding.EncodeToString(append(f, sig...))
	tests := []struct {
		name  string
		seq   string
		token fencelock.Token
		want  error
	}{
		{"valid", sign(nil, priv), 34, nil},
		{"missing", "", 34, sequencer.ErrMalformed},
		{"forged", sign(nil, otherPriv), 34, sequencer.ErrBadSignature},
		{"tampered", tampered, 34, sequencer.ErrBadSignature},
		{"expired", sign(func(s *sequencer.Sequencer) { s.LeaseEnd = now.Add(-time.Minute) }, priv), 34, sequencer.ErrExpired},
		{"wrong name", sign(func(s *sequencer.Sequencer) { s.Lock = "payments" }, priv), 34, sequencer.ErrWrongLock},
		{"wrong cluster", sign(func(s *sequencer.Sequencer) { s.ClusterID = "staging" }, priv), 34, sequencer.ErrWrongCluster},
		{"rotated-away key", sign(func(s *sequencer.Sequencer) { s.KeyID = "k1" }, oldPriv), 34, sequencer.ErrUnknownKey},
		{"invented token", sign(nil, priv), 1 << 52, sequencer.ErrTokenMismatch},
	}
	for _, tt := range tests {
		c, err := store.NewClient(ts.http.URL, store.WithSequencer(func() string { return tt.seq }))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Put(t.Context(), "reports/report.pdf", tt.token, bytes.NewReader([]byte("x")), store.WithDomain("reports"))
		if tt.want == nil && err != nil || tt.want != nil && (!errors.Is(err, tt.want) || !errors.Is(err, fencelock.ErrInvalidSequencer)) {
			t.Errorf("%s: Put returned %v, want %v", tt.name, err, tt.want)
		}
		if tt.want != nil {
			if err := c.Check(t.Context(), "reports", tt.token); !errors.Is(err, tt.want) {
				t.Errorf("%s: Check returned %v, want %v", tt.name, err, tt.want)
			}
		}
	}
	if h, _ := ts.srv.Highest(t.Context(), "reports"); h != 34 {
		t.Fatalf("highest of reports is %d, want 34: a refused sequencer must raise nothing", h)
	}
}

// TestServer_BoundsBufferedBodies: the bodies held in memory at once stay
// within MaxBufferedBytes: a write waits for room, and gives up when its
// request ends.
func TestServer_BoundsBufferedBodies(t *testing.T) {
	cfg := store.DefaultConfig()
	cfg.MaxObjectSize, cfg.MaxBufferedBytes = 1<<20, 1<<20
	ts := startStore(t, cfg)
	pr, pw := io.Pipe()
	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, ts.http.URL+"/v1/objects/a", pr)
		req.ContentLength = 1 << 20
		req.Header.Set("Fencing-Token", "5")
		resp, err := ts.http.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	t.Cleanup(func() { pw.CloseWithError(errors.New("test ended")) }) // before the store stops
	// More than the transport buffers: the first request reaches the store.
	const sent = 8 << 10
	if _, err := pw.Write(make([]byte, sent)); err != nil {
		t.Fatal(err)
	}
	// Until the store has taken the first body's room a second may pass;
	// once it has, a second waits (and its call runs out).
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		_, err := ts.client.Put(ctx, fmt.Sprintf("probe%d", i), 5, bytes.NewReader(make([]byte, 1000)))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("second body: %v, want it to wait for room", err)
		}
		if i == 20 {
			t.Fatal("second bodies were buffered beside a first that takes all the room")
		}
		time.Sleep(50 * time.Millisecond)
	}
	go func() { _, _ = pw.Write(make([]byte, 1<<20-sent)); pw.Close() }()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Put(t.Context(), "b", 5, bytes.NewReader(make([]byte, 1000))); err != nil {
		t.Fatalf("once the first body was written, the second: %v", err)
	}
}
