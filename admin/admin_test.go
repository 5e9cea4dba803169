package admin_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
)

// TestAdmin_callsOfOneNode runs every administrative call against a real
// node, through a client whose first endpoint refuses connections: the
// calls that go through the leader fail over to the node that answers.
func TestAdmin_callsOfOneNode(t *testing.T) {
	srv := testproc.StartServer(t)
	cfg := client.DefaultConfig(testproc.FreeAddr(t), srv.Addr)
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.RetryTimeout = 10 * time.Second
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := admin.New(c, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	st, err := a.Status(ctx, srv.Addr)
	if err != nil || !st.Ready || st.State != "leader" || len(st.Members) != 1 || !st.Members[0].Leader || st.ClusterID == "" {
		t.Fatalf("status = %+v, %v; want a ready leader, the one member", st, err)
	}
	if _, err := a.Status(ctx, cfg.Endpoints[0]); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Errorf("status of a closed port = %v, want ErrUnavailable (no failover for Status)", err)
	}
	k, err := a.Keys(ctx)
	if err != nil || len(k.Keys) != 1 || k.Roles[k.Keys[0].ID] != "signing" || k.ClusterID != st.ClusterID {
		t.Fatalf("keys = %+v, %v; want one signing key of cluster %s", k, err, st.ClusterID)
	}
	if k, err = a.RotateKey(ctx); err != nil || len(k.Keys) != 2 || k.Roles[k.Keys[1].ID] != "pending" {
		t.Fatalf("first rotation step = %+v, %v; want a second, pending key", k, err)
	}
	var buf bytes.Buffer
	var done, total int64
	if err := a.Backup(ctx, &buf, func(d, t int64) { done, total = d, t }); err != nil || buf.Len() == 0 || done != total || total != int64(buf.Len()) {
		t.Fatalf("backup: %v, %d bytes, progress %d of %d", err, buf.Len(), done, total)
	}
	if err := a.AddMember(ctx, "n2", testproc.FreeAddr(t), ""); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("add member without an API address = %v, want ErrInvalidArgument", err)
	}
	if err := a.RemoveMember(ctx, st.ID); !errors.Is(err, fencelock.ErrPreconditionFailed) {
		t.Errorf("remove the last voter = %v, want ErrPreconditionFailed", err)
	}
	if id, err := a.TransferLeader(ctx, "n9"); !errors.Is(err, fencelock.ErrNotFound) {
		t.Errorf("transfer leadership to a stranger = %q, %v; want ErrNotFound", id, err)
	}
}
