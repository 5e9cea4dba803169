// Package admin holds a fencelock cluster's administrative calls: each
// node's status, membership changes, leadership transfer, the signing keys
// and backups. It runs them through a client.Client, on the same
// connections and with the same failover as the client's lock calls.
//
//	c, _ := client.New("127.0.0.1:7070")
//	a := admin.New(c, os.Getenv("FENCELOCK_ADMIN_TOKEN"))
//	st, err := a.Status(ctx, "127.0.0.1:7070")
package admin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/sequencer"
)

// Client runs administrative calls through a client.Client. It is safe for
// concurrent use.
type Client struct {
	c     *client.Client
	token string
}

// New returns the administrative calls of c. adminToken, if not empty, is
// sent with membership changes, key rotations and backups, for a cluster
// started with an admin token (it replaces c's own token on those calls).
func New(c *client.Client, adminToken string) *Client {
	return &Client{c: c, token: adminToken}
}

// cluster runs fn on the cluster service as c's calls run: through the
// leader, retried on another node while the outcome is unknown.
func (a *Client) cluster(ctx context.Context, extra time.Duration, fn func(context.Context, fencelockv1connect.ClusterServiceClient) error) error {
	return a.c.Call(ctx, extra, func(ctx context.Context, hc *http.Client, url string) error {
		return wire.FromCall(fn(ctx, fencelockv1connect.NewClusterServiceClient(hc, url)))
	})
}

// Status asks the node at addr (host:port or URL; it need not be one of the
// client's endpoints) for its view of the cluster. It does not retry.
func (a *Client) Status(ctx context.Context, addr string) (fencelock.NodeStatus, error) {
	var m *fencelockv1.StatusResponse
	err := a.c.CallNode(ctx, addr, func(ctx context.Context, hc *http.Client, url string) error {
		resp, err := fencelockv1connect.NewClusterServiceClient(hc, url).Status(ctx, connect.NewRequest(&fencelockv1.StatusRequest{}))
		if err == nil {
			m = resp.Msg
		}
		return wire.FromCall(err)
	})
	if err != nil {
		return fencelock.NodeStatus{}, fmt.Errorf("status of %s: %w", addr, err)
	}
	return wire.StatusOf(m), nil
}

// AddMember adds a voter to the cluster (through the leader). apiAddr is
// the new node's API address, required: the leader asks the node's status
// there before it counts it as a voter, and records it so that followers
// can name it.
func (a *Client) AddMember(ctx context.Context, id, raftAddr, apiAddr string) error {
	err := a.cluster(ctx, 0, func(ctx context.Context, cs fencelockv1connect.ClusterServiceClient) error {
		_, err := cs.AddMember(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.AddMemberRequest{Id: id, RaftAddr: raftAddr, ApiAddr: apiAddr}), a.token))
		return err
	})
	if err != nil {
		return fmt.Errorf("add member %s: %w", id, err)
	}
	return nil
}

// RemoveMember removes a member. The service refuses, with an error
// wrapping fencelock.ErrPreconditionFailed, a removal that would leave too
// few reachable voters for a quorum.
func (a *Client) RemoveMember(ctx context.Context, id string) error {
	err := a.cluster(ctx, 0, func(ctx context.Context, cs fencelockv1connect.ClusterServiceClient) error {
		_, err := cs.RemoveMember(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.RemoveMemberRequest{Id: id}), a.token))
		return err
	})
	if err != nil {
		return fmt.Errorf("remove member %s: %w", id, err)
	}
	return nil
}

// TransferLeader hands leadership to member id ("" for any up-to-date
// follower) and returns the new leader's id.
func (a *Client) TransferLeader(ctx context.Context, id string) (string, error) {
	var leader string
	err := a.cluster(ctx, 0, func(ctx context.Context, cs fencelockv1connect.ClusterServiceClient) error {
		resp, err := cs.TransferLeader(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.TransferLeaderRequest{Id: id}), a.token))
		if err == nil {
			leader = resp.Msg.LeaderId
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("transfer leadership: %w", err)
	}
	return leader, nil
}

// Keys is the cluster's identity as resources need it.
type Keys struct {
	ClusterID string          `json:"cluster_id"`
	Epoch     uint64          `json:"epoch"`
	Keys      []sequencer.Key `json:"keys"` // oldest first
	// Roles maps each key's id to signing, valid or pending.
	Roles map[string]string `json:"roles"`
}

func keysOf(m *fencelockv1.KeysResponse) Keys {
	k := Keys{ClusterID: m.ClusterId, Epoch: m.Epoch, Keys: []sequencer.Key{}, Roles: map[string]string{}}
	for _, pk := range m.Keys {
		k.Keys = append(k.Keys, sequencer.Key{ClusterID: m.ClusterId, ID: pk.Id, Public: pk.Public})
		k.Roles[pk.Id] = pk.Role
	}
	return k
}

// Keys returns the cluster's id, token epoch and public signing keys: what
// a sequencer.Verifier trusts.
func (a *Client) Keys(ctx context.Context) (Keys, error) {
	var k Keys
	err := a.cluster(ctx, 0, func(ctx context.Context, cs fencelockv1connect.ClusterServiceClient) error {
		resp, err := cs.Keys(ctx, connect.NewRequest(&fencelockv1.KeysRequest{}))
		if err == nil {
			k = keysOf(resp.Msg)
		}
		return err
	})
	if err != nil {
		return Keys{}, fmt.Errorf("keys: %w", err)
	}
	return k, nil
}

// RotateKey takes one step of a key rotation (through the leader): it adds
// a pending key, published but not signing, or makes the pending key sign.
// It returns the keys after it.
func (a *Client) RotateKey(ctx context.Context) (Keys, error) {
	var k Keys
	err := a.cluster(ctx, 0, func(ctx context.Context, cs fencelockv1connect.ClusterServiceClient) error {
		resp, err := cs.RotateKey(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.RotateKeyRequest{}), a.token))
		if err == nil {
			k = keysOf(resp.Msg)
		}
		return err
	})
	if err != nil {
		return Keys{}, fmt.Errorf("rotate key: %w", err)
	}
	return k, nil
}

// Backup writes a backup of the whole state, taken on the leader, to w, and
// calls progress (if not nil) with the bytes received and the total. Each
// attempt receives the whole backup before any of it is written to w, so a
// retried attempt never leaves part of another in w. It needs the admin
// token, if the cluster has one (without one, it works only from the
// node's machine). A backup holds the signing keys: keep it as secret as
// they are.
func (a *Client) Backup(ctx context.Context, w io.Writer, progress func(done, total int64)) error {
	var got []byte
	err := a.cluster(ctx, 5*time.Minute, func(ctx context.Context, cs fencelockv1connect.ClusterServiceClient) error {
		b, err := a.backupFrom(ctx, cs, progress)
		got = b
		return err
	})
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if _, err := w.Write(got); err != nil {
		return fmt.Errorf("backup: write: %w", err)
	}
	return nil
}

func (a *Client) backupFrom(ctx context.Context, cs fencelockv1connect.ClusterServiceClient, progress func(done, total int64)) ([]byte, error) {
	stream, err := cs.Backup(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.BackupRequest{}), a.token))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var buf bytes.Buffer
	var total int64
	for stream.Receive() {
		m := stream.Msg()
		if m.Size > 0 {
			total = int64(m.Size)
		}
		buf.Write(m.Data)
		if progress != nil {
			progress(int64(buf.Len()), total)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if int64(buf.Len()) != total {
		return nil, fmt.Errorf("backup ended after %d of %d bytes: %w", buf.Len(), total, fencelock.ErrUnavailable)
	}
	return buf.Bytes(), nil
}
