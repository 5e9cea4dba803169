package client

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"time"

	"connectrpc.com/connect"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/sequencer"
)

// Member is one node of the service's Raft configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr,omitempty"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
}

// NodeStatus is one node's own view of the cluster.
type NodeStatus struct {
	ID                string        `json:"id"`
	State             string        `json:"state"`
	Ready             bool          `json:"ready"`
	LeaderID          string        `json:"leader_id,omitempty"`
	LeaderAPI         string        `json:"leader_api,omitempty"`
	Term              uint64        `json:"term"`
	CommitIndex       uint64        `json:"commit_index"`
	AppliedIndex      uint64        `json:"applied_index"`
	LastLogIndex      uint64        `json:"last_log_index"`
	LastSnapshotIndex uint64        `json:"last_snapshot_index"`
	LastContact       time.Duration `json:"last_contact"`
	Members           []Member      `json:"members"`
	Version           string        `json:"version,omitempty"` // the node's build (fencelock version)
	ClusterID         string        `json:"cluster_id,omitempty"`
	Epoch             uint64        `json:"epoch"` // of the tokens the cluster issues
}

// Status asks the node at addr (host:port or URL; it need not be one of the
// client's endpoints) for its view of the cluster. It does not retry.
func (c *Client) Status(ctx context.Context, addr string) (NodeStatus, error) {
	resp, err := fencelockv1connect.NewClusterServiceClient(c.hc, c.endpointURL(addr)).Status(ctx, connect.NewRequest(&fencelockv1.StatusRequest{}))
	if err != nil {
		return NodeStatus{}, fmt.Errorf("status of %s: %w", addr, wire.FromConnect(err))
	}
	m := resp.Msg
	st := NodeStatus{ID: m.Id, State: m.State, Ready: m.Ready, LeaderID: m.LeaderId, LeaderAPI: m.LeaderApi, Term: m.Term,
		CommitIndex: m.CommitIndex, AppliedIndex: m.AppliedIndex, LastLogIndex: m.LastLogIndex,
		LastSnapshotIndex: m.LastSnapshotIndex, LastContact: m.LastContact.AsDuration(), Version: m.Version,
		ClusterID: m.ClusterId, Epoch: m.Epoch}
	for _, mm := range m.Members {
		st.Members = append(st.Members, Member{ID: mm.Id, RaftAddr: mm.RaftAddr, APIAddr: mm.ApiAddr, Voter: mm.Voter, Leader: mm.Leader})
	}
	return st, nil
}

// AddMember adds a voter to the cluster (through the leader). apiAddr is
// the new node's API address, required: the leader asks the node's status
// there before it counts it as a voter, and records it so that followers
// can name it.
func (c *Client) AddMember(ctx context.Context, id, raftAddr, apiAddr string) error {
	err := c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		_, err := ep.cluster.AddMember(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.AddMemberRequest{Id: id, RaftAddr: raftAddr, ApiAddr: apiAddr}), c.cfg.AdminToken))
		return fromWire(err)
	})
	if err != nil {
		return fmt.Errorf("add member %s: %w", id, err)
	}
	return nil
}

// RemoveMember removes a member. The service refuses, with an error
// wrapping fencelock.ErrPreconditionFailed, a removal that would leave too
// few reachable voters for a quorum.
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	err := c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		_, err := ep.cluster.RemoveMember(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.RemoveMemberRequest{Id: id}), c.cfg.AdminToken))
		return fromWire(err)
	})
	if err != nil {
		return fmt.Errorf("remove member %s: %w", id, err)
	}
	return nil
}

// TransferLeader hands leadership to member id ("" for any up-to-date
// follower) and returns the new leader's id.
func (c *Client) TransferLeader(ctx context.Context, id string) (string, error) {
	var leader string
	err := c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.cluster.TransferLeader(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.TransferLeaderRequest{Id: id}), c.cfg.AdminToken))
		if err != nil {
			return fromWire(err)
		}
		leader = resp.Msg.LeaderId
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("transfer leadership: %w", err)
	}
	return leader, nil
}

// Endpoints returns the client's endpoints as host:port.
func (c *Client) Endpoints() []string {
	var out []string
	for _, ep := range *c.eps.Load() {
		out = append(out, ep.host)
	}
	return out
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
func (c *Client) Keys(ctx context.Context) (Keys, error) {
	var k Keys
	err := c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.cluster.Keys(ctx, connect.NewRequest(&fencelockv1.KeysRequest{}))
		if err != nil {
			return fromWire(err)
		}
		k = keysOf(resp.Msg)
		return nil
	})
	if err != nil {
		return Keys{}, fmt.Errorf("keys: %w", err)
	}
	return k, nil
}

// RotateKey takes one step of a key rotation (through the leader; with the
// admin token, if the cluster has one): it adds a pending key, published
// but not signing, or makes the pending key sign. It returns the keys
// after it.
func (c *Client) RotateKey(ctx context.Context) (Keys, error) {
	var k Keys
	err := c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.cluster.RotateKey(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.RotateKeyRequest{}), c.cfg.AdminToken))
		if err != nil {
			return fromWire(err)
		}
		k = keysOf(resp.Msg)
		return nil
	})
	if err != nil {
		return Keys{}, fmt.Errorf("rotate key: %w", err)
	}
	return k, nil
}

// CheckSequencer asks the leader whether the sequencer's grant is still the
// lock's current one, and returns the lock's current token (0: free). A
// sequencer the cluster did not sign fails with an error wrapping
// fencelock.ErrInvalidSequencer.
func (c *Client) CheckSequencer(ctx context.Context, seq string) (current bool, token fencelock.Token, err error) {
	err = c.call(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.node.checkSequencer(ctx, seq)
		if err != nil {
			return err
		}
		current, token = resp.Current, fencelock.Token(resp.Token)
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("check sequencer: %w", err)
	}
	return current, token, nil
}

// Backup writes a backup of the whole state, taken on the leader, to w, and
// calls progress (if not nil) with the bytes received and the total. Each
// attempt receives the whole backup before any of it is written to w, so a
// retried attempt never leaves part of another in w. With the admin token,
// if the cluster has one (without one, only from the node's machine). A
// backup holds the signing keys: keep it as secret as they are.
func (c *Client) Backup(ctx context.Context, w io.Writer, progress func(done, total int64)) error {
	var got []byte
	err := c.call(ctx, 5*time.Minute, func(ctx context.Context, ep *endpoint) error {
		b, err := c.backupFrom(ctx, ep, progress)
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

func (c *Client) backupFrom(ctx context.Context, ep *endpoint, progress func(done, total int64)) ([]byte, error) {
	stream, err := ep.cluster.Backup(ctx, wire.WithAdminToken(connect.NewRequest(&fencelockv1.BackupRequest{}), c.cfg.AdminToken))
	if err != nil {
		return nil, fromWire(err)
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
		return nil, fromWire(err)
	}
	if int64(buf.Len()) != total {
		return nil, fmt.Errorf("backup ended after %d of %d bytes: %w", buf.Len(), total, fencelock.ErrUnavailable)
	}
	return buf.Bytes(), nil
}
