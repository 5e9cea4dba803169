package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
)

// TestTLS_RaftAdmitsOnlyMembers runs the documented mTLS setup (one CA,
// a certificate per node named after it, a client certificate "billing"
// of the same CA): the client's certificate and a CA-signed certificate
// that names no member cannot move a follower's term, a member's can (the
// control); the cluster grants, fails over, adds a member whose
// certificate was refused before, and refuses it again once removed.
func TestTLS_RaftAdmitsOnlyMembers(t *testing.T) {
	dir := t.TempDir()
	certsIn(t, dir, "n1", "n2", "n3", "n4", "billing")
	node := filepath.Join(dir, "{node}")
	c := testproc.StartCluster(t, 3, "--peer-cert-file", node+".pem", "--peer-key-file", node+"-key.pem",
		"--peer-trusted-ca-file", filepath.Join(dir, "ca.pem"))
	for _, name := range []string{"billing", "n4"} {
		as := certOf(dir, name)
		if sent, after, err := injectTerm(t, c, &as); err == nil || after >= sent {
			t.Fatalf("%s's certificate, not a member's: the injection got %v and left term %d (sent %d); want refused, term unchanged", name, err, after, sent)
		}
	}
	member := certOf(dir, "n3")
	if sent, after, err := injectTerm(t, c, &member); err != nil || after < sent {
		t.Fatalf("the control: a member's certificate got %v and left term %d, want term %d: the test would not bite", err, after, sent)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cl, err := client.New(c.Endpoints()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	grant(ctx, t, cl, "before")
	old := c.WaitLeader(-1)
	c.Nodes[old].Kill9()
	c.WaitLeader(old)
	grant(ctx, t, cl, "after a failover")
	c.Nodes[old].Start()

	n4 := joinAs(t, c, "n4", dir)
	adm := admin.New(cl, "")
	waitMembers(ctx, t, adm, n4.Addr, 4)
	grant(ctx, t, cl, "with n4")
	if err := adm.RemoveMember(ctx, "n4"); err != nil {
		t.Fatalf("remove n4: %v", err)
	}
	as := certOf(dir, "n4")
	if sent, after, err := injectTerm(t, c, &as); err == nil || after >= sent {
		t.Fatalf("n4 removed: the injection with its certificate got %v and left term %d (sent %d); want refused", err, after, sent)
	}
	grant(ctx, t, cl, "after removing n4")
}

// joinAs starts node id with its own peer certificate of dir, joining c.
func joinAs(t *testing.T, c *testproc.Cluster, id, dir string) *testproc.Server {
	t.Helper()
	f := certOf(dir, id)
	s := testproc.AttachServer(t, &testproc.Server{Addr: testproc.FreeAddr(t), RaftAddr: testproc.FreeAddr(t), DataDir: t.TempDir(), Follower: true,
		Args: append([]string{"--node-id", id, "--join", c.Nodes[c.WaitLeader(-1)].Addr,
			"--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA}, testproc.DefaultClusterFlags...)})
	s.Start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- log of %s:\n%s", id, s.Log())
		}
	})
	return s
}

// grant acquires and releases a lock, failing the test if it cannot.
func grant(ctx context.Context, t *testing.T, cl *client.Client, when string) {
	t.Helper()
	l, err := cl.Acquire(ctx, "peer-test", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("acquire %s: %v", when, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release %s: %v", when, err)
	}
}

// waitMembers waits until the node at addr counts n members.
func waitMembers(ctx context.Context, t *testing.T, adm *admin.Client, addr string, n int) {
	t.Helper()
	for {
		st, err := adm.Status(ctx, addr)
		if err == nil && len(st.Members) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the node at %s does not count %d members: %+v, %v", addr, n, st.Members, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
