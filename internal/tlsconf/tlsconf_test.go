package tlsconf

import (
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"testing"

	"github.com/fencelock/fencelock"
)

func files(t *testing.T, dir, name string) Files {
	t.Helper()
	if _, err := CreateCert(dir, name, []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	return Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem")}
}

// handshake runs a TLS handshake between a server and a client config.
func handshake(t *testing.T, srv, cli *tls.Config) error {
	t.Helper()
	a, b := net.Pipe()
	errc := make(chan error, 1)
	go func() { errc <- tls.Server(a, srv).Handshake(); a.Close() }()
	err := tls.Client(b, cli).Handshake()
	b.Close()
	if serr := <-errc; err == nil {
		err = serr
	}
	return err
}

func TestPeer(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if _, err := CreateCA(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := CreateCA(dir); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("a second CA in the same dir: %v, want refused", err)
	}
	n1, n2, stranger := files(t, dir, "n1"), files(t, dir, "n2"), files(t, other, "x")
	p1, err := Peer(n1)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := Peer(n2)
	if err := handshake(t, p1, p2); err != nil {
		t.Fatalf("two peers of one CA: %v", err)
	}
	ps, _ := Peer(stranger)
	if err := handshake(t, p1, ps); err == nil {
		t.Fatal("a peer of another CA completed the handshake")
	}
	noCert := &tls.Config{InsecureSkipVerify: true}
	if err := handshake(t, p1, noCert); err == nil {
		t.Fatal("a client without a certificate completed the handshake with a peer")
	}
	if _, err := Peer(Files{Cert: n1.Cert, Key: n1.Key}); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("peer TLS without a CA: %v, want refused", err)
	}
}

func TestServerClient(t *testing.T) {
	dir := t.TempDir()
	if _, err := CreateCA(dir); err != nil {
		t.Fatal(err)
	}
	n1, c1 := files(t, dir, "n1"), files(t, dir, "c1")
	srv, err := Server(n1, true)
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := Client(c1)
	cli.ServerName = "127.0.0.1"
	if err := handshake(t, srv, cli); err != nil {
		t.Fatalf("a client with a certificate: %v", err)
	}
	anon, _ := Client(Files{CA: c1.CA})
	anon.ServerName = "127.0.0.1"
	if err := handshake(t, srv, anon); err == nil {
		t.Fatal("a client without a certificate passed --client-cert-auth")
	}
	if _, err := Server(Files{Cert: n1.Cert, Key: n1.Key}, true); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("client-cert-auth without a CA: %v, want refused", err)
	}
}
