package bench

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
)

// FencelockTLSSystem is fencelock with TLS everywhere and authentication:
// HTTPS with client certificates on the API, mutual TLS on Raft, and a
// policy that every call checks; one shared client.
const FencelockTLSSystem = "fencelock-tls"

// TLSFiles are the development CA and the one certificate of a TLS run,
// made with "fencelock tls", and the policy file that grants the
// certificate's identity every lock.
type TLSFiles struct {
	CA, Cert, Key, Policy string
}

// MakeTLS makes them in dir with bin.
func MakeTLS(bin, dir string) (TLSFiles, error) {
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node-key.pem"),
		Policy: filepath.Join(dir, "policy")}
	for _, args := range [][]string{{"tls", "ca", "--dir", dir}, {"tls", "cert", "node", "--dir", dir}} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			return f, fmt.Errorf("fencelock %v: %w: %s", args, err, out)
		}
	}
	return f, os.WriteFile(f.Policy, []byte("node lock,read,admin *\n"), 0o600)
}

// serveArgs are the node flags of a TLS run.
func (f TLSFiles) serveArgs() []string {
	return []string{"--cert-file", f.Cert, "--key-file", f.Key, "--trusted-ca-file", f.CA, "--client-cert-auth", "--policy-file", f.Policy,
		"--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA, "--peer-allowed-names", "node"}
}

// Client returns the client configuration: the CA and the certificate.
func (f TLSFiles) Client() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificate in %s", f.CA)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// web returns the HTTP client and scheme of a node's own endpoints
// (/readyz, /metrics): HTTPS with the certificate for a TLS run.
func web(conf *tls.Config) (*http.Client, string) {
	if conf == nil {
		return http.DefaultClient, "http://"
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: conf}}, "https://"
}
