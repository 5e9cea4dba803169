// Package tlsconf builds the TLS configurations of fencelock's links from
// PEM files, and makes a development CA and certificates for them
// ("fencelock tls").
//
// Raft between nodes is mutual TLS with the peer CA: both sides present a
// certificate the CA signed (a peer's address need not be in it); which
// names may speak Raft is the node's check (server's peer gate: members of
// the Raft configuration). The API and the store are HTTPS, with client
// certificates required when asked.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/fencelock/fencelock"
)

// Files names a certificate, its key and the CA bundle that certificates
// presented to it must chain to. Any may be empty.
type Files struct {
	Cert, Key, CA string
}

// load reads f's key pair (if Cert is set) and CA pool (if CA is set).
func (f Files) load() (*tls.Certificate, *x509.CertPool, error) {
	var cert *tls.Certificate
	if f.Cert != "" || f.Key != "" {
		if f.Cert == "" || f.Key == "" {
			return nil, nil, fmt.Errorf("a certificate needs both its file and its key file: %w", fencelock.ErrInvalidArgument)
		}
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, nil, fmt.Errorf("load certificate %s: %w", f.Cert, err)
		}
		cert = &c
	}
	var pool *x509.CertPool
	if f.CA != "" {
		b, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, nil, fmt.Errorf("read CA file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, nil, fmt.Errorf("CA file %s holds no PEM certificate: %w", f.CA, fencelock.ErrInvalidArgument)
		}
	}
	return cert, pool, nil
}

// Server returns the configuration of an HTTPS listener with f's
// certificate; with requireClient, clients must present a certificate that
// chains to f.CA.
func Server(f Files, requireClient bool) (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	if cert == nil {
		return nil, fmt.Errorf("TLS needs --cert-file and --key-file: %w", fencelock.ErrInvalidArgument)
	}
	c := &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
	if requireClient {
		if pool == nil {
			return nil, fmt.Errorf("--client-cert-auth needs --trusted-ca-file: %w", fencelock.ErrInvalidArgument)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Client returns the configuration of a client that trusts f.CA (the
// system's roots if empty) and presents f's certificate, if any.
func Client(f Files) (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c, nil
}

// Peer returns the configuration of a Raft link, for both ends: each
// presents f's certificate and requires the other's to chain to f.CA. All
// three files are needed.
func Peer(f Files) (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	if cert == nil || pool == nil {
		return nil, fmt.Errorf("peer TLS needs --peer-cert-file, --peer-key-file and --peer-trusted-ca-file: %w", fencelock.ErrInvalidArgument)
	}
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the peer presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS13,
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		// A dialing node checks the chain itself: peers are reached by
		// address, which need not be in their certificates.
		InsecureSkipVerify: true, VerifyConnection: verify,
	}, nil
}
