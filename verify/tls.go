package verify

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock/internal/tlsconf"
)

// tlsRun is the TLS of a run with Config.TLS: a CA and one certificate
// for every node and client, made in the run's output directory.
type tlsRun struct {
	files  tlsconf.Files
	client *tls.Config
}

func newTLSRun(dir string) (*tlsRun, error) {
	dir = filepath.Join(dir, "tls")
	if _, err := tlsconf.CreateCA(dir); err != nil {
		return nil, fmt.Errorf("verify --tls: %w", err)
	}
	if _, err := tlsconf.CreateCert(dir, "node", []string{"127.0.0.1", "localhost"}); err != nil {
		return nil, fmt.Errorf("verify --tls: %w", err)
	}
	f := tlsconf.Files{Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node-key.pem"), CA: filepath.Join(dir, "ca.pem")}
	c, err := tlsconf.Client(f)
	if err != nil {
		return nil, err
	}
	return &tlsRun{files: f, client: c}, nil
}

// serveArgs are the flags of a node: HTTPS with client certificates, and
// mutual TLS on Raft.
func (t *tlsRun) serveArgs() []string {
	if t == nil {
		return nil
	}
	f := t.files
	return []string{"--cert-file", f.Cert, "--key-file", f.Key, "--trusted-ca-file", f.CA, "--client-cert-auth",
		"--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA, "--peer-allowed-names", "node"}
}

// clientTLS is the client configuration (nil without TLS).
func (t *tlsRun) clientTLS() *tls.Config {
	if t == nil {
		return nil
	}
	return t.client
}

// httpGet returns an HTTP client for a node's health endpoints and the
// URL scheme.
func (t *tlsRun) httpGet() (*http.Client, string) {
	if t == nil {
		return &http.Client{Timeout: 300 * time.Millisecond}, "http://"
	}
	return &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{TLSClientConfig: t.client}}, "https://"
}

// cliArgs are the client flags of the fencelock command for a TLS run.
func (t *tlsRun) cliArgs() []string {
	if t == nil {
		return nil
	}
	return []string{"--cacert", t.files.CA, "--cert", t.files.Cert, "--key", t.files.Key}
}
