package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/internal/tlsconf"
)

// devCerts makes a CA and one certificate for every node and client with
// "fencelock tls" and returns their files.
func devCerts(t *testing.T) tlsconf.Files {
	t.Helper()
	return certsIn(t, t.TempDir(), "node")
}

// certsIn makes a CA in dir and a certificate of it for each name (for
// 127.0.0.1 and localhost), and returns the files of the first.
func certsIn(t *testing.T, dir string, names ...string) tlsconf.Files {
	t.Helper()
	if out, code := testproc.Run(t.Context(), t, nil, "tls", "ca", "--dir", dir); code != 0 || !strings.Contains(out, "wrote") {
		t.Fatalf("fencelock tls ca exited %d: %s", code, out)
	}
	for _, n := range names {
		if out, code := testproc.Run(t.Context(), t, nil, "tls", "cert", n, "--dir", dir, "--hosts", "127.0.0.1,localhost"); code != 0 || !strings.Contains(out, "wrote") {
			t.Fatalf("fencelock tls cert %s exited %d: %s", n, code, out)
		}
	}
	return certOf(dir, names[0])
}

// certOf names the files of the certificate name made in dir.
func certOf(dir, name string) tlsconf.Files {
	return tlsconf.Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem")}
}

// injectTerm sends a follower an AppendEntries of a non-member with a
// term five above the cluster's, over plain TCP (as, nil) or over TLS
// with the certificate as, and returns the term the follower then reports.
func injectTerm(t *testing.T, c *testproc.Cluster, as *tlsconf.Files) (sent, after uint64, err error) {
	t.Helper()
	l := c.WaitLeader(-1)
	f := (l + 1) % len(c.Nodes)
	cl, cerr := client.New(c.Endpoints()...)
	if cerr != nil {
		t.Fatal(cerr)
	}
	defer cl.Close()
	st, serr := admin.New(cl, "").Status(t.Context(), c.Nodes[f].Addr)
	if serr != nil {
		t.Fatal(serr)
	}
	trans := intruderTransport(t, as)
	defer trans.Close()
	sent = st.Term + 5
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(trans.LocalAddr())},
		Term: sent, PrevLogEntry: st.LastLogIndex, PrevLogTerm: st.Term}
	var resp raft.AppendEntriesResponse
	err = trans.AppendEntries("intruder", raft.ServerAddress(c.Nodes[f].RaftAddr), req, &resp)
	time.Sleep(200 * time.Millisecond)
	st, serr = admin.New(cl, "").Status(t.Context(), c.Nodes[f].Addr)
	if serr != nil {
		t.Fatal(serr)
	}
	return sent, st.Term, err
}

// intruderTransport is a Raft transport of a process that is no node:
// plain TCP, or TLS with the certificate as.
func intruderTransport(t *testing.T, as *tlsconf.Files) *raft.NetworkTransport {
	t.Helper()
	if as == nil {
		trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return trans
	}
	conf, err := tlsconf.Peer(*as)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return raft.NewNetworkTransport(tlsDialer{Listener: ln, conf: conf}, 1, 2*time.Second, io.Discard)
}

// tlsDialer is a raft.StreamLayer that dials over TLS.
type tlsDialer struct {
	net.Listener
	conf *tls.Config
}

func (d tlsDialer) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(a), d.conf)
}

// TestTLS_RaftRefusesPeersWithoutTheClustersCertificate: on a plain
// cluster a process that is not a member moves a follower's term with a
// raw AppendEntries; on a cluster with peer TLS the connection is refused
// before the RPC is read.
func TestTLS_RaftRefusesPeersWithoutTheClustersCertificate(t *testing.T) {
	plain := testproc.StartCluster(t, 3)
	if sent, after, err := injectTerm(t, plain, nil); err != nil || after < sent {
		t.Fatalf("the control: on a plain cluster the injection got %v and left term %d, want term %d: the test would not bite", err, after, sent)
	}
	f := devCerts(t)
	secured := testproc.StartCluster(t, 3, "--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA,
		"--peer-allowed-names", "node")
	sent, after, err := injectTerm(t, secured, nil)
	if err == nil || after >= sent {
		t.Fatalf("on a peer-TLS cluster the injection got %v and left term %d (sent %d): want refused, term unchanged", err, after, sent)
	}
	if out, code := testproc.Run(t.Context(), t, nil, "acquire", "x", "--server", strings.Join(secured.Endpoints(), ",")); code != 0 {
		t.Fatalf("the peer-TLS cluster does not grant: exit %d: %s", code, out)
	}
}

// TestTLS_APIWithClientCertificates: a node serving HTTPS with
// --client-cert-auth grants to a client with a certificate of the CA and
// refuses one without.
func TestTLS_APIWithClientCertificates(t *testing.T) {
	t.Parallel()
	f := devCerts(t)
	addr, tc := startTLSNode(t, f, "--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if out, code := testproc.Run(ctx, t, nil, "acquire", "x", "--server", addr, "--cacert", f.CA, "--cert", f.Cert, "--key", f.Key); code != 0 {
		t.Fatalf("acquire with a client certificate exited %d: %s", code, out)
	}
	if out, code := testproc.Run(ctx, t, nil, "acquire", "y", "--server", addr, "--cacert", f.CA, "--retry-timeout", "1s"); code == 0 {
		t.Fatalf("acquire without a client certificate succeeded: %s", out)
	}
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tc.RootCAs}}}
	if resp, err := anon.Get("https://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("an HTTPS request without a client certificate was answered")
	}
}

// TestTLS_RefusesToListenBeyondLoopbackUnprotected: serve and store on a
// non-loopback address without TLS and client certificates exit 2 and say
// why, unless --insecure.
func TestTLS_RefusesToListenBeyondLoopbackUnprotected(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, args := range [][]string{
		{"serve", "--listen", "0.0.0.0:0", "--data-dir", t.TempDir()},
		{"serve", "--raft-addr", "0.0.0.0:0", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()},
		{"store", "--listen", "0.0.0.0:0", "--data-dir", t.TempDir()},
	} {
		out, code := testproc.Run(ctx, t, nil, args...)
		if code != 2 || !strings.Contains(out, "beyond loopback") || !strings.Contains(out, "--insecure") {
			t.Errorf("fencelock %v exited %d: %s; want 2 and the reason", args, code, out)
		}
	}
}

// startTLSNode starts a node serving HTTPS with f's certificate and
// --client-cert-auth, with extra flags, waits until it leads and returns
// its address and a client configuration with f's certificate.
func startTLSNode(t *testing.T, f tlsconf.Files, extra ...string) (string, *tls.Config) {
	t.Helper()
	addr, raftAddr := testproc.FreeAddr(t), testproc.FreeAddr(t)
	cmd := exec.Command(testproc.Binary(t), append([]string{"serve", "--listen", addr, "--raft-addr", raftAddr, "--data-dir", t.TempDir(),
		"--cert-file", f.Cert, "--key-file", f.Key, "--trusted-ca-file", f.CA, "--client-cert-auth"}, extra...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	tc, err := tlsconf.Client(f)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := hc.Get("https://" + addr + "/readyz?leader"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr, tc
			}
		}
	}
	t.Fatal("the TLS node is not ready after 20s")
	return "", nil
}
