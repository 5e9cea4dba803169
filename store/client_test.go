package store_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpfence"
	"github.com/fencelock/fencelock/store"
)

func TestClient_Put(t *testing.T) {
	tests := []struct {
		name      string
		key       string
		token     fencelock.Token
		body      string
		opts      []store.WriteOption
		wantErr   error
		wantStale *fencelock.StaleTokenError
	}{
		{name: "newer token", key: "r", token: 35, body: "new"},
		{name: "equal token", key: "r", token: 34, body: "same"},
		{name: "stale token", key: "r", token: 33, wantErr: fencelock.ErrStaleToken,
			wantStale: &fencelock.StaleTokenError{Domain: "r", Token: 33, Highest: 34}},
		{name: "stale token in a lock domain", key: "s", token: 9, opts: []store.WriteOption{store.WithDomain("lock")},
			wantErr: fencelock.ErrStaleToken, wantStale: &fencelock.StaleTokenError{Domain: "lock", Token: 9, Highest: 10}},
		{name: "no token", key: "r", token: 0, wantErr: fencelock.ErrMissingToken},
		{name: "invalid key", key: "a/../r", token: 35, wantErr: fencelock.ErrInvalidName},
		{name: "invalid domain", key: "r", token: 35, opts: []store.WriteOption{store.WithDomain("a\x00b")}, wantErr: fencelock.ErrInvalidName},
		{name: "domain with a .. segment", key: "r", token: 35, opts: []store.WriteOption{store.WithDomain("x/../r")}, wantErr: fencelock.ErrInvalidName},
		{name: "domain with a trailing space", key: "r", token: 35, opts: []store.WriteOption{store.WithDomain("r ")}, wantErr: fencelock.ErrInvalidName},
		{name: "another domain than the object's", key: "r", token: 35, opts: []store.WriteOption{store.WithDomain("lock")}, wantErr: fencelock.ErrInvalidArgument},
		{name: "too large", key: "r", token: 35, body: strings.Repeat("x", 65), wantErr: fencelock.ErrTooLarge},
		{name: "If-Match fails", key: "r", token: 35, opts: []store.WriteOption{store.WithIfMatch(`"99"`)}, wantErr: fencelock.ErrPreconditionFailed},
		{name: "create-only on an existing key", key: "r", token: 35, opts: []store.WriteOption{store.WithCreateOnly()}, wantErr: fencelock.ErrPreconditionFailed},
		{name: "create-only on a new key", key: "new", token: 1, body: "n", opts: []store.WriteOption{store.WithCreateOnly()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := store.DefaultConfig()
			cfg.MaxObjectSize = 64
			ts := startStore(t, cfg)
			ctx := t.Context()
			if _, err := ts.client.Put(ctx, "r", 34, strings.NewReader("old")); err != nil {
				t.Fatalf("Put(r, 34) returned %v", err)
			}
			if err := ts.client.Check(ctx, "lock", 10); err != nil {
				t.Fatalf("Check(lock, 10) returned %v", err)
			}
			info, err := ts.client.Put(ctx, tt.key, tt.token, strings.NewReader(tt.body), tt.opts...)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Put returned %v, want success", err)
				}
				if info.Key != tt.key || info.Token != tt.token || info.Size != int64(len(tt.body)) || info.ETag == "" {
					t.Fatalf("Put returned %+v, want key %q, token %d, size %d and an ETag", info, tt.key, tt.token, len(tt.body))
				}
				got, gotInfo, err := ts.client.Get(ctx, tt.key)
				if err != nil || string(got) != tt.body || gotInfo != info {
					t.Fatalf("Get after Put = %q, %+v, %v; want %q, %+v", got, gotInfo, err, tt.body, info)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Put returned %v, want an error wrapping %q", err, tt.wantErr)
			}
			if tt.wantStale != nil {
				var stale *fencelock.StaleTokenError
				if !errors.As(err, &stale) || *stale != *tt.wantStale {
					t.Fatalf("Put returned %#v, want %+v", err, *tt.wantStale)
				}
			}
			if got, _, _ := ts.client.Get(ctx, "r"); string(got) != "old" {
				t.Fatalf("after a refused Put, r holds %q, want %q", got, "old")
			}
		})
	}
}

func TestClient_Put_idempotencyKey(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	ctx := t.Context()
	first, err := ts.client.Put(ctx, "k", 5, strings.NewReader("v1"), store.WithIdempotencyKey("req-1"))
	if err != nil {
		t.Fatalf("first Put returned %v", err)
	}
	// A newer holder writes; the retry of the first request must still get
	// the first answer, and must not overwrite the newer data.
	if _, err := ts.client.Put(ctx, "k", 6, strings.NewReader("v2")); err != nil {
		t.Fatalf("Put with token 6 returned %v", err)
	}
	again, err := ts.client.Put(ctx, "k", 5, strings.NewReader("v1"), store.WithIdempotencyKey("req-1"))
	if err != nil || again != first {
		t.Fatalf("repeated Put = %+v, %v; want the first answer %+v", again, err, first)
	}
	if got, _, _ := ts.client.Get(ctx, "k"); string(got) != "v2" {
		t.Fatalf("after the repeated Put, k holds %q, want %q: the repeat must not be applied", got, "v2")
	}
	_, err = ts.client.Put(ctx, "k", 5, strings.NewReader("other"), store.WithIdempotencyKey("req-1"))
	if !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("reusing the key for another body returned %v, want ErrInvalidArgument", err)
	}

	// A refusal is an answer too: its repeat is refused the same way.
	_, err = ts.client.Put(ctx, "k", 4, strings.NewReader("z"), store.WithIdempotencyKey("req-2"))
	_, err2 := ts.client.Put(ctx, "k", 4, strings.NewReader("z"), store.WithIdempotencyKey("req-2"))
	if !errors.Is(err, fencelock.ErrStaleToken) || !errors.Is(err2, fencelock.ErrStaleToken) {
		t.Fatalf("stale Put and its repeat returned %v and %v, want ErrStaleToken twice", err, err2)
	}

	// Replays survive a restart: the record commits with the write.
	ts = ts.restart(t)
	resp, _ := ts.do(t, "PUT", "/v1/objects/k", hdr("Fencing-Token", "5", "Idempotency-Key", "req-1"), []byte("v1"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(store.HeaderReplayed) != "true" || resp.Header.Get("ETag") != first.ETag {
		t.Fatalf("repeat after restart answered %d, replayed %q, ETag %q; want 200, true, %q",
			resp.StatusCode, resp.Header.Get(store.HeaderReplayed), resp.Header.Get("ETag"), first.ETag)
	}
}

func TestClient_Delete(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	ctx := t.Context()
	info, err := ts.client.Put(ctx, "k", 5, strings.NewReader("v"))
	if err != nil {
		t.Fatalf("Put returned %v", err)
	}
	tests := []struct {
		name    string
		token   fencelock.Token
		opts    []store.WriteOption
		wantErr error
	}{
		{name: "stale token", token: 4, wantErr: fencelock.ErrStaleToken},
		{name: "no token", token: 0, wantErr: fencelock.ErrMissingToken},
		{name: "wrong ETag", token: 5, opts: []store.WriteOption{store.WithIfMatch(`"0"`)}, wantErr: fencelock.ErrPreconditionFailed},
		{name: "accepted", token: 5, opts: []store.WriteOption{store.WithIfMatch(info.ETag)}},
		{name: "already gone", token: 5, wantErr: fencelock.ErrNotFound},
	}
	for _, tt := range tests { // in order: each case sees the previous ones' effects
		err := ts.client.Delete(ctx, "k", tt.token, tt.opts...)
		if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
			t.Fatalf("%s: Delete returned %v, want %v", tt.name, err, tt.wantErr)
		}
	}
	if _, _, err := ts.client.Get(ctx, "k"); !errors.Is(err, fencelock.ErrNotFound) {
		t.Fatalf("Get after Delete returned %v, want ErrNotFound", err)
	}
}

func TestClient_unavailable(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	c := ts.client
	ts.stop()
	_, err := c.Put(t.Context(), "k", 1, strings.NewReader("v"))
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Put to a stopped store returned %v, want an error wrapping ErrUnavailable", err)
	}
}

func TestNewClient(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:7080", "ftp://host", "http://"} {
		if _, err := store.NewClient(u); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("NewClient(%q) returned %v, want ErrInvalidArgument", u, err)
		}
	}
}

func TestServer_disableFencing(t *testing.T) {
	cfg := store.DefaultConfig()
	cfg.DisableFencing = true
	ts := startStore(t, cfg)
	ctx := t.Context()
	for _, tok := range []fencelock.Token{34, 33, 0} {
		if _, err := ts.client.Put(ctx, "report.pdf", tok, strings.NewReader(tok.String())); err != nil {
			t.Fatalf("unfenced Put with token %d returned %v, want it accepted", tok, err)
		}
	}
	got, info, err := ts.client.Get(ctx, "report.pdf")
	if err != nil || string(got) != "0" || info.Token != 0 {
		t.Fatalf("Get = %q (token %d), %v; want the last write, %q with token 0", got, info.Token, err, "0")
	}
	if h, _ := ts.client.Highest(ctx, "report.pdf"); h != 34 {
		t.Fatalf("Highest = %d, want 34: the unfenced store still tracks the highest token", h)
	}
	resp, body := ts.do(t, "GET", "/metrics", nil, nil)
	if resp.Header.Get(store.HeaderFencing) != "disabled" {
		t.Fatalf("answers carry %s: %q, want %q", store.HeaderFencing, resp.Header.Get(store.HeaderFencing), "disabled")
	}
	want := `fencelock_store_writes_total{result="unfenced_stale"} 2`
	if !strings.Contains(string(body), want) {
		t.Fatalf("metrics lack %q:\n%s", want, body)
	}
}

func TestServer_metrics(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	ctx := t.Context()
	_, _ = ts.client.Put(ctx, "k", 5, strings.NewReader("v"))
	_, _ = ts.client.Put(ctx, "k", 4, strings.NewReader("v"))
	_, _ = ts.client.Put(ctx, "k", 0, strings.NewReader("v"))
	for i := 0; i < 50; i++ { // refusals in many domains add no series
		_, _ = ts.client.Put(ctx, fmt.Sprintf("d%d", i), 0, strings.NewReader("v"))
	}
	resp, err := ts.http.Client().Get(ts.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`fencelock_store_writes_total{result="accepted"} 1`,
		`fencelock_store_writes_total{result="rejected_stale"} 1`,
		`fencelock_store_writes_total{result="rejected_missing_token"} 51`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if n := strings.Count(string(body), "\nfencelock_store_writes_total{"); n != 3 {
		t.Errorf("%d series of fencelock_store_writes_total, want 3 (one per result seen)", n)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		cfg     store.Config
		wantErr error
	}{
		{name: "no data dir", cfg: store.Config{}, wantErr: fencelock.ErrInvalidArgument},
		{name: "negative size", cfg: store.Config{DataDir: dir, MaxObjectSize: -1}, wantErr: fencelock.ErrInvalidArgument},
		{name: "zero size means default", cfg: store.Config{DataDir: t.TempDir()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := store.Open(tt.cfg)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Open returned %v, want %v", err, tt.wantErr)
			}
			if s != nil {
				s.Close()
			}
		})
	}
}

// TestClient_Put_idempotencyKeyExpires: an Idempotency-Key's answer is kept
// for IdempotencyTTL; after it the key is a new request, and the background
// sweep deletes the old answer.
func TestClient_Put_idempotencyKeyExpires(t *testing.T) {
	cfg := store.DefaultConfig()
	cfg.IdempotencyTTL = 300 * time.Millisecond
	ts := startStore(t, cfg)
	ctx := t.Context()
	if _, err := ts.client.Put(ctx, "k", 5, strings.NewReader("v1"), store.WithIdempotencyKey("req-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Put(ctx, "k", 5, strings.NewReader("other"), store.WithIdempotencyKey("req-1")); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("reusing the key within its TTL returned %v, want ErrInvalidArgument", err)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := ts.client.Put(ctx, "k", 5, strings.NewReader("other"), store.WithIdempotencyKey("req-1")); err != nil {
		t.Fatalf("the key after its TTL returned %v, want a new write", err)
	}
	if got, _, _ := ts.client.Get(ctx, "k"); string(got) != "other" {
		t.Fatalf("k holds %q, want %q", got, "other")
	}
	// The sweep runs every second at this TTL and deletes the first answer
	// (the second expires too by then).
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := ts.do(t, "GET", "/metrics", nil, nil)
		if strings.Contains(string(body), "fencelock_store_idempotency_expired_total 1") ||
			strings.Contains(string(body), "fencelock_store_idempotency_expired_total 2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no expired answer was swept within 10 s:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServer_ObjectStaysInItsDomain: an object's versions are fenced in the
// domain its current version was written in. A stale holder that names
// another domain (or none, which means the key) is refused, not checked
// against a domain nobody raised; so is a delete in another domain.
func TestServer_ObjectStaysInItsDomain(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	ctx := t.Context()
	if _, err := ts.client.Put(ctx, "reports/report.pdf", 34, strings.NewReader("B"), store.WithDomain("reports")); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Put(ctx, "reports/report.pdf", 33, strings.NewReader("A, stale")); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("stale Put in the key's own domain = %v, want an error wrapping ErrInvalidArgument", err)
	}
	if err := ts.client.Delete(ctx, "reports/report.pdf", 33, store.WithDomain("other")); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Delete in another domain = %v, want an error wrapping ErrInvalidArgument", err)
	}
	if got, info, err := ts.client.Get(ctx, "reports/report.pdf"); err != nil || string(got) != "B" || info.Token != 34 {
		t.Fatalf("the object is %q (token %d, %v), want B's version (token 34)", got, info.Token, err)
	}
	// Moving it: delete in its domain, then write in the new one.
	if err := ts.client.Delete(ctx, "reports/report.pdf", 34, store.WithDomain("reports")); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Put(ctx, "reports/report.pdf", 1, strings.NewReader("C")); err != nil {
		t.Fatalf("Put after the delete, in the key's domain: %v", err)
	}
}

// A key with white space at an end is a valid key but not a valid domain:
// without a domain of its own, the refusal says so; with one, it is stored.
func TestClient_Put_keyThatCannotBeADomain(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	ctx := t.Context()
	_, err := ts.client.Put(ctx, "r ", 1, strings.NewReader("x"))
	if !errors.Is(err, fencelock.ErrInvalidName) || !strings.Contains(err.Error(), httpfence.HeaderDomain) {
		t.Fatalf("Put(%q) without a domain = %v; want ErrInvalidName naming the %s header", "r ", err, httpfence.HeaderDomain)
	}
	if _, err := ts.client.Put(ctx, "r ", 1, strings.NewReader("x"), store.WithDomain("r")); err != nil {
		t.Fatalf("Put(%q) with a domain = %v", "r ", err)
	}
}
