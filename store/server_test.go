package store_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/store"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// TestServer_ServeHTTP sends one request to a store holding object "a/b"
// (written with token 34) and checks the status, the wire code, and that
// the object is unchanged when the request is refused.
func TestServer_ServeHTTP(t *testing.T) {
	long := strings.Repeat("k", store.MaxKeyLen+1)
	tests := []struct {
		name       string
		method     string
		path       string
		header     http.Header
		body       string
		wantStatus int
		wantCode   string
		wantBody   string // content of a/b afterwards; "" means unchanged
	}{
		{name: "put with a higher token", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35"), body: "new", wantStatus: 200, wantBody: "new"},
		{name: "put with the same token", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "34"), body: "again", wantStatus: 200, wantBody: "again"},
		{name: "put with a stale token", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "33"), body: "zombie", wantStatus: 409, wantCode: "stale_fencing_token"},
		{name: "put without a token", method: "PUT", path: "/v1/objects/a/b", body: "x", wantStatus: 428, wantCode: "missing_fencing_token"},
		{name: "put with token 0", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "0"), body: "x", wantStatus: 428, wantCode: "missing_fencing_token"},
		{name: "put with a negative token", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "-35"), body: "x", wantStatus: 400, wantCode: "invalid_fencing_token"},
		{name: "put with a non-numeric token", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "abc"), body: "x", wantStatus: 400, wantCode: "invalid_fencing_token"},
		{name: "put with a token beyond uint64", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "18446744073709551616"), body: "x", wantStatus: 400, wantCode: "invalid_fencing_token"},
		{name: "put with two tokens", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35", "Fencing-Token", "36"), body: "x", wantStatus: 400, wantCode: "invalid_fencing_token"},
		{name: "put with an empty key", method: "PUT", path: "/v1/objects/", header: hdr("Fencing-Token", "35"), wantStatus: 400, wantCode: "invalid_name"},
		{name: "put with a .. segment", method: "PUT", path: "/v1/objects/a/../a/b", header: hdr("Fencing-Token", "35"), body: "x", wantStatus: 400, wantCode: "invalid_name"},
		{name: "put with an escaped .. segment", method: "PUT", path: "/v1/objects/a/%2e%2e/a/b", header: hdr("Fencing-Token", "35"), body: "x", wantStatus: 400, wantCode: "invalid_name"},
		{name: "put with a NUL in the key", method: "PUT", path: "/v1/objects/a/b%00", header: hdr("Fencing-Token", "35"), body: "x", wantStatus: 400, wantCode: "invalid_name"},
		{name: "put with a key over 1 KiB", method: "PUT", path: "/v1/objects/" + long, header: hdr("Fencing-Token", "35"), body: "x", wantStatus: 400, wantCode: "invalid_name"},
		{name: "put with an empty domain", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35", "Fencing-Domain", ""), body: "x", wantStatus: 400, wantCode: "invalid_name"},
		{name: "put with a .. segment in the domain", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35", "Fencing-Domain", "x/../a/b"), body: "x", wantStatus: 400, wantCode: "invalid_name"},
		{name: "put over the size limit", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35"), body: strings.Repeat("x", 1025), wantStatus: 413, wantCode: "too_large"},
		{name: "put at the size limit", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35"), body: strings.Repeat("x", 1024), wantStatus: 200, wantBody: strings.Repeat("x", 1024)},
		{name: "put with a matching If-Match", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35", "If-Match", `"1"`), body: "cas", wantStatus: 200, wantBody: "cas"},
		{name: "put with an unquoted matching If-Match", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35", "If-Match", `1`), body: "cas", wantStatus: 200, wantBody: "cas"},
		{name: "put with a stale If-Match", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35", "If-Match", `"7"`), body: "cas", wantStatus: 412, wantCode: "precondition_failed"},
		{name: "put with If-Match on a missing object", method: "PUT", path: "/v1/objects/a/c", header: hdr("Fencing-Token", "35", "If-Match", "*"), body: "x", wantStatus: 412, wantCode: "precondition_failed"},
		{name: "create-only put on an existing object", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35", "If-None-Match", "*"), body: "x", wantStatus: 412, wantCode: "precondition_failed"},
		{name: "If-None-Match with an ETag", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35", "If-None-Match", `"1"`), body: "x", wantStatus: 400, wantCode: "invalid_argument"},
		{name: "stale token wins over If-Match", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "33", "If-Match", `"7"`), body: "x", wantStatus: 409, wantCode: "stale_fencing_token"},
		{name: "idempotency key with spaces", method: "PUT", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35", "Idempotency-Key", "a b"), body: "x", wantStatus: 400, wantCode: "invalid_argument"},
		{name: "get", method: "GET", path: "/v1/objects/a/b", wantStatus: 200},
		{name: "get a missing object", method: "GET", path: "/v1/objects/a/c", wantStatus: 404, wantCode: "not_found"},
		{name: "get with a .. segment", method: "GET", path: "/v1/objects/../a/b", wantStatus: 400, wantCode: "invalid_name"},
		{name: "get with a stale If-Match", method: "GET", path: "/v1/objects/a/b", header: hdr("If-Match", `"7"`), wantStatus: 412, wantCode: "precondition_failed"},
		{name: "get with a matching If-None-Match", method: "GET", path: "/v1/objects/a/b", header: hdr("If-None-Match", `"1"`), wantStatus: 304},
		{name: "delete with a stale token", method: "DELETE", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "33"), wantStatus: 409, wantCode: "stale_fencing_token"},
		{name: "delete without a token", method: "DELETE", path: "/v1/objects/a/b", wantStatus: 428, wantCode: "missing_fencing_token"},
		{name: "delete a missing object", method: "DELETE", path: "/v1/objects/a/c", header: hdr("Fencing-Token", "35"), wantStatus: 404, wantCode: "not_found"},
		{name: "delete", method: "DELETE", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35"), wantStatus: 204, wantBody: "<deleted>"},
		{name: "post a fence with a stale token", method: "POST", path: "/v1/fences/a/b", header: hdr("Fencing-Token", "33"), wantStatus: 409, wantCode: "stale_fencing_token"},
		{name: "post a fence", method: "POST", path: "/v1/fences/a/b", header: hdr("Fencing-Token", "40"), wantStatus: 200},
		{name: "get a fence", method: "GET", path: "/v1/fences/a/b", wantStatus: 200},
		{name: "get an unknown fence", method: "GET", path: "/v1/fences/nobody", wantStatus: 200},
		{name: "get a fence with a control character", method: "GET", path: "/v1/fences/a%0Ab", wantStatus: 400, wantCode: "invalid_name"},
		{name: "post a fence with a .. segment", method: "POST", path: "/v1/fences/x/../a/b", header: hdr("Fencing-Token", "41"), wantStatus: 400, wantCode: "invalid_name"},
		{name: "post a fence with an escaped .. segment", method: "POST", path: "/v1/fences/x/%2e%2e/a/b", header: hdr("Fencing-Token", "41"), wantStatus: 400, wantCode: "invalid_name"},
		{name: "post a fence with an empty segment", method: "POST", path: "/v1/fences/a//b", header: hdr("Fencing-Token", "41"), wantStatus: 400, wantCode: "invalid_name"},
		{name: "post to an object", method: "POST", path: "/v1/objects/a/b", header: hdr("Fencing-Token", "35"), wantStatus: 405, wantCode: "invalid_argument"},
		{name: "unknown path", method: "GET", path: "/v2/objects/a/b", wantStatus: 404, wantCode: "not_found"},
		{name: "health", method: "GET", path: "/healthz", wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := store.DefaultConfig()
			cfg.MaxObjectSize = 1024
			ts := startStore(t, cfg)
			ts.put(t, "a/b", "34", "old")

			resp, body := ts.do(t, tt.method, tt.path, tt.header, []byte(tt.body))
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("%s %s answered %d %s, want %d", tt.method, tt.path, resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantCode != "" {
				var eb struct{ Error string }
				if err := json.Unmarshal(body, &eb); err != nil || eb.Error != tt.wantCode {
					t.Fatalf("%s %s answered body %s, want error code %q", tt.method, tt.path, body, tt.wantCode)
				}
			}
			want := tt.wantBody
			if want == "" {
				want = "old"
			}
			resp, got := ts.do(t, "GET", "/v1/objects/a/b", nil, nil)
			if want == "<deleted>" {
				if resp.StatusCode != http.StatusNotFound {
					t.Fatalf("after the request, GET a/b answered %d, want 404", resp.StatusCode)
				}
				return
			}
			if string(got) != want {
				t.Fatalf("after the request, a/b holds %q, want %q", got, want)
			}
		})
	}
}

// put writes an object with a raw request and fails the test unless it is
// accepted.
func (ts *testStore) put(tb testing.TB, key, token, body string) *http.Response {
	tb.Helper()
	resp, b := ts.do(tb, "PUT", "/v1/objects/"+key, hdr("Fencing-Token", token), []byte(body))
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("PUT %s with token %s answered %d %s, want 200", key, token, resp.StatusCode, b)
	}
	return resp
}

func TestServer_ServeHTTP_staleBody(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	ts.put(t, "report.pdf", "34", "B")
	resp, body := ts.do(t, "PUT", "/v1/objects/report.pdf", hdr("Fencing-Token", "33", "Fencing-Domain", "report.pdf"), []byte("A"))
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("stale PUT answered %d, want 409", resp.StatusCode)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("409 body %s is not JSON: %v", body, err)
	}
	want := map[string]any{"error": "stale_fencing_token", "domain": "report.pdf", "token": 33.0, "highest": 34.0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("409 body field %q = %v, want %v (body %s)", k, got[k], v, body)
		}
	}
}

func TestServer_ServeHTTP_objectHeaders(t *testing.T) {
	ts := startStore(t, store.DefaultConfig())
	first := ts.put(t, "k", "7", "one")
	second := ts.put(t, "k", "8", "two")
	if e1, e2 := first.Header.Get("ETag"), second.Header.Get("ETag"); e1 == "" || e1 == e2 {
		t.Fatalf("ETags of two versions are %q and %q, want two different non-empty ETags", e1, e2)
	}
	resp, body := ts.do(t, "GET", "/v1/objects/k", nil, nil)
	if string(body) != "two" {
		t.Fatalf("GET k returned %q, want %q", body, "two")
	}
	for h, want := range map[string]string{"ETag": second.Header.Get("ETag"), "Fencing-Token": "8", "Fencing-Domain": "k"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("GET k: header %s = %q, want %q", h, got, want)
		}
	}
}

func TestServer_ServeHTTP_sizeLimitWithoutLength(t *testing.T) {
	cfg := store.DefaultConfig()
	cfg.MaxObjectSize = 10
	ts := startStore(t, cfg)
	req, err := http.NewRequestWithContext(t.Context(), "PUT", ts.http.URL+"/v1/objects/k", strings.NewReader(strings.Repeat("x", 100)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1 // chunked: the store must count, not trust a header
	req.Header.Set("Fencing-Token", "1")
	resp, err := ts.http.Client().Do(req)
	if err != nil {
		t.Fatalf("chunked PUT failed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked PUT of 100 bytes over a 10-byte limit answered %d, want 413", resp.StatusCode)
	}
	if resp, _ := ts.do(t, "GET", "/v1/objects/k", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("after a refused PUT, GET k answered %d, want 404", resp.StatusCode)
	}
}
