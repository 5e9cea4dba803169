package main

import (
	"context"
	"os"

	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/internal/tlsconf"
)

// tlsFlags are the TLS flags of serve and store, in etcd's shape.
type tlsFlags struct {
	cert, key, ca  string
	clientCertAuth bool
	peerCert       string
	peerKey        string
	peerCA         string
	peerAllowed    string
	insecure       bool
	tokens, policy string // the ACL's files
}

// register adds the flags to fs; peer (a node) adds the Raft ones.
func (t *tlsFlags) register(fs *flag.FlagSet, peer bool) {
	fs.StringVar(&t.cert, "cert-file", "", "TLS certificate of the HTTPS listener")
	fs.StringVar(&t.key, "key-file", "", "key of --cert-file")
	fs.StringVar(&t.ca, "trusted-ca-file", "", "CA that client certificates must chain to (with --client-cert-auth)")
	fs.BoolVar(&t.clientCertAuth, "client-cert-auth", false, "require a client certificate of --trusted-ca-file on every connection")
	fs.BoolVar(&t.insecure, "insecure", false, "allow listening beyond loopback without TLS and authentication")
	fs.StringVar(&t.tokens, "tokens-file", "", "callers' bearer tokens: \"IDENTITY SHA256-HEX\" per line (\"fencelock token new NAME\" prints one)")
	fs.StringVar(&t.policy, "policy-file", "", "what identities may do: \"IDENTITY read|lock|admin[,...] PREFIX\" per line (PREFIX * for every lock name or fence domain; a client certificate's identity is its Common Name, else its first DNS name, URI or email address)")
	if peer {
		fs.StringVar(&t.peerCert, "peer-cert-file", "", "TLS certificate of this node's Raft links (mutual TLS: peers must present one of --peer-trusted-ca-file)")
		fs.StringVar(&t.peerKey, "peer-key-file", "", "key of --peer-cert-file")
		fs.StringVar(&t.peerCA, "peer-trusted-ca-file", "", "the peer CA: Raft peers must present a certificate it signed that names a member (its node id as Common Name or DNS name)")
		fs.StringVar(&t.peerAllowed, "peer-allowed-names", "", "names (Common Name or DNS name) of peer certificates admitted to Raft besides the members' own, comma-separated")
	}
}

// server returns the HTTPS listener's configuration, or nil for plain HTTP.
func (t *tlsFlags) server() (*tls.Config, error) {
	if t.cert == "" && t.key == "" {
		if t.clientCertAuth {
			return nil, usageErr("--client-cert-auth needs --cert-file and --key-file")
		}
		return nil, nil
	}
	c, err := tlsconf.Server(tlsconf.Files{Cert: t.cert, Key: t.key, CA: t.ca}, t.clientCertAuth)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return c, nil
}

// peer returns the Raft links' configuration, or nil for plain TCP.
func (t *tlsFlags) peer() (*tls.Config, error) {
	if t.peerCert == "" && t.peerKey == "" && t.peerCA == "" {
		return nil, nil
	}
	c, err := tlsconf.Peer(tlsconf.Files{Cert: t.peerCert, Key: t.peerKey, CA: t.peerCA})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return c, nil
}

// acl reads the tokens and policy files; nil without either.
func (t *tlsFlags) acl() (*acl.ACL, error) {
	if t.tokens == "" && t.policy == "" {
		return nil, nil
	}
	open := func(name string) (io.ReadCloser, error) {
		if name == "" {
			return io.NopCloser(strings.NewReader("")), nil
		}
		return os.Open(name)
	}
	tf, err := open(t.tokens)
	if err != nil {
		return nil, usageErr("--tokens-file: %v", err)
	}
	defer tf.Close()
	pf, err := open(t.policy)
	if err != nil {
		return nil, usageErr("--policy-file: %v", err)
	}
	defer pf.Close()
	a, err := acl.Parse(tf, pf)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return a, nil
}

// nodeClient returns the configuration of a node's calls to other nodes'
// HTTPS APIs: it trusts --trusted-ca-file and presents --cert-file.
func (t *tlsFlags) nodeClient() (*tls.Config, error) {
	if t.cert == "" {
		return nil, nil
	}
	return tlsconf.Client(tlsconf.Files{Cert: t.cert, Key: t.key, CA: t.ca})
}

// exposed refuses an address beyond loopback that is not protected, unless
// --insecure: secure is whether TLS with client certificates guards it.
func (t *tlsFlags) exposed(flagName, addr string, secure bool) error {
	if secure || t.insecure || loopback(addr) {
		return nil
	}
	return usageErr("%s %s listens beyond loopback without TLS and authentication: anyone who reaches it could take any lock. "+
		"Give --cert-file and --key-file with --trusted-ca-file and --client-cert-auth, or with --tokens-file (and --peer-* for Raft; \"fencelock tls\" makes a development CA), or --insecure", flagName, addr)
}

// loopback reports whether addr's host is a loopback address or localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runTLS(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tls", "tls ca | cert NAME [flags]\n\n"+
		"Makes a development CA and certificates for a mutual-TLS cluster, like\n"+
		"consul tls: \"tls ca\" writes ca.pem and ca-key.pem to --dir; \"tls cert NAME\n"+
		"--hosts 10.0.0.1,node1.example\" writes NAME.pem and NAME-key.pem, signed by\n"+
		"that CA, for servers and clients alike. Keys are written mode 0600; nothing\n"+
		"is overwritten. For production, use your own CA.", stderr)
	dir := fs.String("dir", "./fencelock-tls", "directory of the CA and certificates")
	hosts := fs.String("hosts", "127.0.0.1,localhost", "IP addresses and DNS names of the certificate, comma-separated")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageErr("tls: missing subcommand: ca or cert NAME")
	}
	sub, rest := fs.Arg(0), fs.Args()[1:]
	if sub == "ca" {
		if err := parse(fs, rest); err != nil {
			return err
		}
		rest = fs.Args()
	}
	switch {
	case sub == "ca" && len(rest) == 0:
		f, err := tlsconf.CreateCA(*dir)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, "wrote", f)
		return err
	case sub == "cert" && len(rest) >= 1:
		name := rest[0]
		if err := parse(fs, rest[1:]); err != nil {
			return err
		}
		f, err := tlsconf.CreateCert(*dir, name, strings.Split(*hosts, ","))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, "wrote", f)
		return err
	}
	return usageErr("tls: want \"tls ca\" or \"tls cert NAME\", got %q", fs.Args())
}

func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("token", "token new NAME\n\n"+
		"Draws a bearer token for identity NAME and prints it, and the line that\n"+
		"gives NAME that token in a tokens file (serve --tokens-file), which keeps\n"+
		"only its SHA-256. Give the token to the caller (FENCELOCK_AUTH_TOKEN), the\n"+
		"line to the cluster, and NAME permissions in the policy file.", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 || fs.Arg(0) != "new" || strings.ContainsAny(fs.Arg(1), " \t\n#") {
		return usageErr("token: want \"token new NAME\" (NAME without spaces)")
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	tok := hex.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(tok))
	_, err := fmt.Fprintf(stdout, "token: %s\ntokens-file line: %s %s\n", tok, fs.Arg(1), hex.EncodeToString(sum[:]))
	return err
}
