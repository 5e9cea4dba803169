package server_test

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/server"
)

// adminClient returns a lock client of endpoints and its administrative
// calls with the admin token.
func adminClient(tb testing.TB, token string, endpoints ...string) (*client.Client, *admin.Client) {
	tb.Helper()
	cfg := client.DefaultConfig(endpoints...)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.RetryTimeout = 5 * time.Second
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c, admin.New(c, token)
}

// TestServer_AdminTokenGuardsMembership: with an admin token, membership
// changes without it (or with a wrong one) are refused with
// ErrUnauthenticated, with it they go through, a node with the token can
// join, and one without is told why it cannot.
func TestServer_AdminTokenGuardsMembership(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testproc.StartServer(t, "--admin-token-file", tokenFile)
	ctx := ctxFor(t, 60*time.Second)

	for _, tok := range []string{"", "wrong"} {
		c, a := adminClient(t, tok, srv.Addr)
		if err := a.RemoveMember(ctx, "n9"); !errors.Is(err, fencelock.ErrUnauthenticated) {
			t.Errorf("remove member with token %q = %v, want ErrUnauthenticated", tok, err)
		}
		if _, err := a.TransferLeader(ctx, "n9"); !errors.Is(err, fencelock.ErrUnauthenticated) {
			t.Errorf("transfer leadership with token %q = %v, want ErrUnauthenticated", tok, err)
		}
		if err := a.AddMember(ctx, "n9", "127.0.0.1:1", ""); !errors.Is(err, fencelock.ErrUnauthenticated) {
			t.Errorf("add member with token %q = %v, want ErrUnauthenticated", tok, err)
		}
		if st, err := a.Status(ctx, srv.Addr); err != nil || len(st.Members) != 1 {
			t.Errorf("status without the token = %+v, %v; want it open, one member", st, err)
		}
		if l, err := c.Acquire(ctx, "open"); err != nil {
			t.Errorf("acquire without the admin token = %v; the lock API stays open", err)
		} else {
			l.Release(ctx)
		}
	}
	_, adm := adminClient(t, "s3cret", srv.Addr)
	if err := adm.RemoveMember(ctx, "n9"); err == nil || errors.Is(err, fencelock.ErrUnauthenticated) {
		t.Errorf("remove of an unknown member with the token = %v, want a refusal other than ErrUnauthenticated", err)
	}

	// A node with the token joins.
	n2 := testproc.AttachServer(t, &testproc.Server{Addr: testproc.FreeAddr(t), RaftAddr: testproc.FreeAddr(t), DataDir: t.TempDir(),
		Follower: true, Args: []string{"--node-id", "n2", "--join", srv.Addr, "--admin-token-file", tokenFile}})
	n2.Start()
	waitFor(t, func() bool {
		st, err := adm.Status(ctx, srv.Addr)
		return err == nil && len(st.Members) == 2
	})

	// One without it stops, saying why.
	cmd := exec.CommandContext(ctx, testproc.Binary(t), "serve", "--node-id", "n3", "--listen", testproc.FreeAddr(t),
		"--raft-addr", testproc.FreeAddr(t), "--data-dir", t.TempDir(), "--join", srv.Addr)
	cmd.Env = append(os.Environ(), "FENCELOCK_ADMIN_TOKEN=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "admin token") {
		t.Fatalf("a node joining without the token: err %v, output:\n%s\nwant it to stop and name the admin token", err, out)
	}
}

// TestConfig_RefusesAMaxWaitClientsWouldSpinOn: a max wait of zero would
// turn every wait into a try-lock that clients repeat at once.
func TestConfig_RefusesAMaxWaitClientsWouldSpinOn(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	for _, d := range []time.Duration{-time.Second, 0, 10 * time.Millisecond} {
		cfg.MaxWait = d
		if err := cfg.Validate(); err == nil {
			t.Errorf("max wait %v: Validate() = nil, want an error", d)
		}
	}
	cfg.MaxWait = time.Second
	if err := cfg.Validate(); err != nil {
		t.Errorf("max wait 1s: %v", err)
	}
}
