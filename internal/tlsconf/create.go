package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock"
)

// CreateCA writes a new development CA to dir: ca.pem and ca-key.pem (mode
// 0600), valid for ten years. It refuses to overwrite them.
func CreateCA(dir string) (certFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "fencelock development CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", err
	}
	return write(dir, "ca", der, key)
}

// CreateCert writes a certificate for name signed by the CA in dir
// (ca.pem, ca-key.pem): name.pem and name-key.pem, for the hosts given (IP
// addresses and DNS names), usable by servers and clients alike, valid for
// a year.
func CreateCert(dir, name string, hosts []string) (certFile string, err error) {
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return "", fmt.Errorf("load the CA from %s (create it with \"fencelock tls ca\"): %w", dir, err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return "", err
	}
	return write(dir, name, der, key)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// write writes name.pem and name-key.pem to dir, refusing to overwrite.
func write(dir, name string, der []byte, key *ecdsa.PrivateKey) (string, error) {
	if name == "" || filepath.Base(name) != name {
		return "", fmt.Errorf("certificate name %q: want a plain file name: %w", name, fencelock.ErrInvalidName)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", err
	}
	certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	for _, f := range []struct {
		path, typ string
		b         []byte
		mode      os.FileMode
	}{{keyFile, "EC PRIVATE KEY", kb, 0o600}, {certFile, "CERTIFICATE", der, 0o644}} {
		out, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("%s exists: remove it first to make a new one: %w", f.path, fencelock.ErrInvalidArgument)
		}
		if err != nil {
			return "", err
		}
		err = pem.Encode(out, &pem.Block{Type: f.typ, Bytes: f.b})
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
	}
	return certFile, nil
}
