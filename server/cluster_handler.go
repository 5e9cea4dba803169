package server

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/fsm"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
)

// clusterAPI adapts Server to the generated ClusterService interface.
type clusterAPI Server

var _ fencelockv1connect.ClusterServiceHandler = (*clusterAPI)(nil)

func (a *clusterAPI) Status(ctx context.Context, req *connect.Request[fencelockv1.StatusRequest]) (*connect.Response[fencelockv1.StatusResponse], error) {
	st, err := (*Server)(a).Status()
	if err != nil {
		return nil, (*api)(a).fail("Status", err)
	}
	resp := &fencelockv1.StatusResponse{
		Id: st.ID, State: st.State, LeaderId: st.LeaderID, LeaderApi: st.LeaderAPI, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, LastLogIndex: st.LastLogIndex,
		LastSnapshotIndex: st.LastSnapshotIndex, LastContact: durationpb.New(st.LastContact), Ready: st.Ready,
		Version: st.Version, ClusterId: st.ClusterID, Epoch: st.Epoch,
	}
	hideRaft := (*Server)(a).requireAdmin(ctx, req.Peer().Addr) != nil // Raft addresses are for admins
	for _, m := range st.Members {
		raftAddr := m.RaftAddr
		if hideRaft {
			raftAddr = ""
		}
		resp.Members = append(resp.Members, &fencelockv1.Member{Id: m.ID, RaftAddr: raftAddr, ApiAddr: m.APIAddr, Voter: m.Voter, Leader: m.Leader})
	}
	return connect.NewResponse(resp), nil
}

// authorize checks a membership change: without an ACL or an admin token
// it is open (serve warns at start when the API listens beyond loopback);
// otherwise as requireAdmin.
func (a *clusterAPI) authorize(ctx context.Context, method string, req connect.AnyRequest) error {
	if !a.acl.Active() && a.cfg.AdminToken == "" {
		return nil
	}
	return a.authorizeSecret(ctx, method, req)
}

// authorizeSecret checks a call of an admin-only surface (requireAdmin).
func (a *clusterAPI) authorizeSecret(ctx context.Context, method string, req connect.AnyRequest) error {
	if err := (*Server)(a).requireAdmin(ctx, req.Peer().Addr); err != nil {
		return (*api)(a).fail(method, fmt.Errorf("%s: %w", method, err))
	}
	return nil
}

func (a *clusterAPI) AddMember(ctx context.Context, req *connect.Request[fencelockv1.AddMemberRequest]) (*connect.Response[fencelockv1.AddMemberResponse], error) {
	if err := a.authorize(ctx, "AddMember", req); err != nil {
		return nil, err
	}
	m := req.Msg
	if err := (*Server)(a).AddMember(ctx, m.Id, m.RaftAddr, m.ApiAddr); err != nil {
		return nil, (*api)(a).fail("AddMember", err)
	}
	return connect.NewResponse(&fencelockv1.AddMemberResponse{}), nil
}

func (a *clusterAPI) RemoveMember(ctx context.Context, req *connect.Request[fencelockv1.RemoveMemberRequest]) (*connect.Response[fencelockv1.RemoveMemberResponse], error) {
	if err := a.authorize(ctx, "RemoveMember", req); err != nil {
		return nil, err
	}
	if err := (*Server)(a).RemoveMember(ctx, req.Msg.Id); err != nil {
		return nil, (*api)(a).fail("RemoveMember", err)
	}
	(*Server)(a).record(Event{Kind: "membership", Identity: acl.IdentityOf(ctx), Detail: "remove " + req.Msg.Id})
	return connect.NewResponse(&fencelockv1.RemoveMemberResponse{}), nil
}

func (a *clusterAPI) TransferLeader(ctx context.Context, req *connect.Request[fencelockv1.TransferLeaderRequest]) (*connect.Response[fencelockv1.TransferLeaderResponse], error) {
	if err := a.authorize(ctx, "TransferLeader", req); err != nil {
		return nil, err
	}
	id, err := (*Server)(a).TransferLeader(ctx, req.Msg.Id)
	if err != nil {
		return nil, (*api)(a).fail("TransferLeader", err)
	}
	(*Server)(a).record(Event{Kind: "membership", Identity: acl.IdentityOf(ctx), Detail: "leadership to " + id})
	return connect.NewResponse(&fencelockv1.TransferLeaderResponse{LeaderId: id}), nil
}

func keysResponse(id fsm.Identity) *fencelockv1.KeysResponse {
	resp := &fencelockv1.KeysResponse{ClusterId: id.ClusterID, Epoch: id.Epoch}
	signing := ""
	for _, k := range id.Keys {
		if !k.Pending {
			signing = k.ID
		}
	}
	for _, k := range id.Keys {
		pub := ed25519.NewKeyFromSeed(k.Seed).Public().(ed25519.PublicKey)
		role := "valid"
		switch {
		case k.Pending:
			role = "pending"
		case k.ID == signing:
			role = "signing"
		}
		resp.Keys = append(resp.Keys, &fencelockv1.PublicKey{Id: k.ID, Public: pub, Added: timestamppb.New(time.Unix(0, k.Added)), Role: role})
	}
	return resp
}

func (a *clusterAPI) Keys(context.Context, *connect.Request[fencelockv1.KeysRequest]) (*connect.Response[fencelockv1.KeysResponse], error) {
	return connect.NewResponse(keysResponse(a.fsm.Identity())), nil
}

func (a *clusterAPI) RotateKey(ctx context.Context, req *connect.Request[fencelockv1.RotateKeyRequest]) (*connect.Response[fencelockv1.KeysResponse], error) {
	if err := a.authorizeSecret(ctx, "RotateKey", req); err != nil {
		return nil, err
	}
	id, err := (*Server)(a).RotateKey(ctx)
	if err != nil {
		return nil, (*api)(a).fail("RotateKey", err)
	}
	return connect.NewResponse(keysResponse(id)), nil
}

// backupChunk is the size of Backup's messages.
const backupChunk = 1 << 20

func (a *clusterAPI) Backup(ctx context.Context, req *connect.Request[fencelockv1.BackupRequest], stream *connect.ServerStream[fencelockv1.BackupChunk]) error {
	if err := a.authorizeSecret(ctx, "Backup", req); err != nil {
		return err
	}
	b, err := (*Server)(a).Backup(ctx)
	if err != nil {
		return (*api)(a).fail("Backup", err)
	}
	size := uint64(len(b))
	for first := true; first || len(b) > 0; first = false {
		n := min(len(b), backupChunk)
		msg := &fencelockv1.BackupChunk{Data: b[:n]}
		if first {
			msg.Size = size
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
