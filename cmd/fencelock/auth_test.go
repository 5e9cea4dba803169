package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/internal/tlsconf"
)

// TestAuth_TokensAndPolicy: a node with a tokens and a policy file grants
// a caller what its policy says, on the Go client's stream and on the JSON
// API, and refuses callers without a credential or the permission.
func TestAuth_TokensAndPolicy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, code := testproc.Run(ctx, t, nil, "token", "new", "billing")
	m := regexp.MustCompile(`token: (\w+)\ntokens-file line: (billing \w+)`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("token new exited %d: %s", code, out)
	}
	dir := t.TempDir()
	tokens, policy := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy")
	if err := os.WriteFile(tokens, []byte(m[2]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte("billing lock,read billing/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := testproc.StartServer(t, "--tokens-file", tokens, "--policy-file", policy)
	auth := []string{"FENCELOCK_AUTH_TOKEN=" + m[1], "FENCELOCK_SERVER=" + s.Addr}
	if out, code := testproc.Run(ctx, t, auth, "acquire", "billing/42"); code != 0 {
		t.Fatalf("acquire billing/42 with billing's token exited %d: %s", code, out)
	}
	if out, code := testproc.Run(ctx, t, auth, "acquire", "hr/7", "--retry-timeout", "1s"); code == 0 || !strings.Contains(out, "may not lock") {
		t.Fatalf("acquire hr/7 with billing's token exited %d: %s; want permission denied", code, out)
	}
	anon := []string{"FENCELOCK_SERVER=" + s.Addr}
	if out, code := testproc.Run(ctx, t, anon, "acquire", "billing/43", "--retry-timeout", "1s"); code == 0 || !strings.Contains(out, "credential") {
		t.Fatalf("acquire without a token exited %d: %s; want unauthenticated", code, out)
	}
	post := func(token string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr+"/fencelock.v1.LockService/Acquire",
			strings.NewReader(`{"name":"billing/44","ttl":"10s"}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(""); got != http.StatusUnauthorized {
		t.Errorf("JSON Acquire without a token answered %d, want 401", got)
	}
	if got := post("not-a-token"); got != http.StatusUnauthorized {
		t.Errorf("JSON Acquire with an unknown token answered %d, want 401", got)
	}
	if got := post(m[1]); got != http.StatusOK {
		t.Errorf("JSON Acquire with billing's token answered %d, want 200", got)
	}
}

// TestAuth_CertificateIdentity: a client certificate without a Common Name
// (DNS names only, as many CAs issue them) is its first DNS name, never
// the node's empty identity: with a "*" policy line it cannot take over
// another identity's request id; a certificate that names nobody is
// refused.
func TestAuth_CertificateIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nodeCert := certsIn(t, dir, "node", "billing")
	policy := filepath.Join(dir, "policy")
	if err := os.WriteFile(policy, []byte("billing lock,read billing/\n* lock,read *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := startTLSNode(t, nodeCert, "--policy-file", policy)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Over the JSON API, where a request id is what the caller sends.
	acquire := func(f tlsconf.Files) (int, string) {
		t.Helper()
		tc, err := tlsconf.Client(f)
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+"/fencelock.v1.LockService/Acquire",
			strings.NewReader(`{"name":"billing/1","ttl":"60s","requestId":"r1"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := acquire(certOf(dir, "billing")); code != http.StatusOK {
		t.Fatalf("billing's acquire: %d %s", code, body)
	}
	sanOnlyCert := signedCert(t, dir, "san-only", &x509.Certificate{DNSNames: []string{"svc.internal"}})
	if code, body := acquire(sanOnlyCert); code != http.StatusForbidden || strings.Contains(body, "leaseId") {
		t.Fatalf("a DNS-name-only certificate retried billing's request id: %d %s; want 403 and no grant", code, body)
	}
	sanOnly := tlsClient(t, addr, sanOnlyCert)
	if _, err := sanOnly.Acquire(ctx, "svc/1", client.WithTTL(time.Minute)); err != nil {
		t.Fatalf("a DNS-name-only certificate, granted lock by the * line: %v", err)
	}
	nobody := tlsClient(t, addr, signedCert(t, dir, "nameless", &x509.Certificate{}))
	if _, err := nobody.Acquire(ctx, "svc/2", client.WithTTL(time.Minute)); !errors.Is(err, fencelock.ErrUnauthenticated) {
		t.Fatalf("a certificate naming nobody: %v; want ErrUnauthenticated", err)
	}
	if li, err := sanOnly.Describe(ctx, "billing/1"); err != nil || li.Token == 0 {
		t.Fatalf("billing's grant: %+v, %v; want it still held", li, err)
	}
}

// tlsClient is a client of the node at addr with certificate f.
func tlsClient(t *testing.T, addr string, f tlsconf.Files) *client.Client {
	t.Helper()
	tc, err := tlsconf.Client(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.DefaultConfig("https://" + addr)
	cfg.TLS = tc
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// signedCert writes name.pem and name-key.pem, a client certificate from
// tmpl (its names) signed by the CA in dir, and returns their files.
func signedCert(t *testing.T, dir, name string, tmpl *x509.Certificate) tlsconf.Files {
	t.Helper()
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(time.Now().UnixNano()), time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage, tmpl.ExtKeyUsage = x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := certOf(dir, name)
	if err := os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAuth_AdminOnlySurfaces: with only an admin token (no policy), the
// audit trail, the Raft addresses in Status and the profiles need that
// token.
func TestAuth_AdminOnlySurfaces(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := testproc.StartServer(t, "--admin-token-file", tokenFile, "--pprof")
	call := func(method, path, token string) (int, string) {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("{}")
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+s.Addr+path, body)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/ui/events", "/debug/pprof/"} {
		if code, _ := call(http.MethodGet, path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the admin token: %d, want 401", path, code)
		}
		if code, _ := call(http.MethodGet, path, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
		}
		if code, _ := call(http.MethodGet, path, "s3cret"); code != http.StatusOK {
			t.Errorf("GET %s with the admin token: %d, want 200", path, code)
		}
	}
	const status = "/fencelock.v1.ClusterService/Status"
	if code, b := call(http.MethodPost, status, ""); code != http.StatusOK || strings.Contains(b, s.RaftAddr) {
		t.Errorf("Status without the admin token: %d %s; want 200 without the Raft address %s", code, b, s.RaftAddr)
	}
	if code, b := call(http.MethodPost, status, "s3cret"); code != http.StatusOK || !strings.Contains(b, s.RaftAddr) {
		t.Errorf("Status with the admin token: %d %s; want the Raft address %s", code, b, s.RaftAddr)
	}
}
