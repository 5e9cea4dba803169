package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
	"github.com/fencelock/fencelock/server"
)

// clusterAPI adapts the node to the generated ClusterService interface.
type clusterAPI struct{ s *server.Server }

var _ fencelockv1connect.ClusterServiceHandler = (*clusterAPI)(nil)

func (a *clusterAPI) Status(ctx context.Context, req *connect.Request[fencelockv1.StatusRequest]) (*connect.Response[fencelockv1.StatusResponse], error) {
	st, err := a.s.Status()
	if err != nil {
		return nil, fail(a.s, "Status", err)
	}
	if a.s.RequireAdmin(ctx, req.Peer().Addr) != nil { // Raft addresses are for admins
		for i := range st.Members {
			st.Members[i].RaftAddr = ""
		}
	}
	return connect.NewResponse(wire.StatusMsg(st)), nil
}

// authorize checks a membership change: without an ACL or an admin token
// it is open (serve warns at start when the API listens beyond loopback);
// otherwise as requireAdmin.
func (a *clusterAPI) authorize(ctx context.Context, method string, req connect.AnyRequest) error {
	if cfg := a.s.Config(); !cfg.ACL.Active() && cfg.AdminToken == "" {
		return nil
	}
	return a.authorizeSecret(ctx, method, req)
}

// authorizeSecret checks a call of an admin-only surface (requireAdmin).
func (a *clusterAPI) authorizeSecret(ctx context.Context, method string, req connect.AnyRequest) error {
	if err := a.s.RequireAdmin(ctx, req.Peer().Addr); err != nil {
		return fail(a.s, method, fmt.Errorf("%s: %w", method, err))
	}
	return nil
}

func (a *clusterAPI) AddMember(ctx context.Context, req *connect.Request[fencelockv1.AddMemberRequest]) (*connect.Response[fencelockv1.AddMemberResponse], error) {
	if err := a.authorize(ctx, "AddMember", req); err != nil {
		return nil, err
	}
	m := req.Msg
	if err := a.s.AddMember(ctx, m.Id, m.RaftAddr, m.ApiAddr); err != nil {
		return nil, fail(a.s, "AddMember", err)
	}
	return connect.NewResponse(&fencelockv1.AddMemberResponse{}), nil
}

func (a *clusterAPI) RemoveMember(ctx context.Context, req *connect.Request[fencelockv1.RemoveMemberRequest]) (*connect.Response[fencelockv1.RemoveMemberResponse], error) {
	if err := a.authorize(ctx, "RemoveMember", req); err != nil {
		return nil, err
	}
	if err := a.s.RemoveMember(ctx, req.Msg.Id); err != nil {
		return nil, fail(a.s, "RemoveMember", err)
	}
	return connect.NewResponse(&fencelockv1.RemoveMemberResponse{}), nil
}

func (a *clusterAPI) TransferLeader(ctx context.Context, req *connect.Request[fencelockv1.TransferLeaderRequest]) (*connect.Response[fencelockv1.TransferLeaderResponse], error) {
	if err := a.authorize(ctx, "TransferLeader", req); err != nil {
		return nil, err
	}
	id, err := a.s.TransferLeader(ctx, req.Msg.Id)
	if err != nil {
		return nil, fail(a.s, "TransferLeader", err)
	}
	return connect.NewResponse(&fencelockv1.TransferLeaderResponse{LeaderId: id}), nil
}

func keysResponse(ks server.KeySet) *fencelockv1.KeysResponse {
	resp := &fencelockv1.KeysResponse{ClusterId: ks.ClusterID, Epoch: ks.Epoch}
	for _, k := range ks.Keys {
		resp.Keys = append(resp.Keys, &fencelockv1.PublicKey{Id: k.ID, Public: k.Public, Added: timestamppb.New(k.Added), Role: k.Role})
	}
	return resp
}

func (a *clusterAPI) Keys(context.Context, *connect.Request[fencelockv1.KeysRequest]) (*connect.Response[fencelockv1.KeysResponse], error) {
	return connect.NewResponse(keysResponse(a.s.Keys())), nil
}

func (a *clusterAPI) RotateKey(ctx context.Context, req *connect.Request[fencelockv1.RotateKeyRequest]) (*connect.Response[fencelockv1.KeysResponse], error) {
	if err := a.authorizeSecret(ctx, "RotateKey", req); err != nil {
		return nil, err
	}
	id, err := a.s.RotateKey(ctx)
	if err != nil {
		return nil, fail(a.s, "RotateKey", err)
	}
	return connect.NewResponse(keysResponse(id)), nil
}

// backupChunk is the size of Backup's messages.
const backupChunk = 1 << 20

func (a *clusterAPI) Backup(ctx context.Context, req *connect.Request[fencelockv1.BackupRequest], stream *connect.ServerStream[fencelockv1.BackupChunk]) error {
	if err := a.authorizeSecret(ctx, "Backup", req); err != nil {
		return err
	}
	b, err := a.s.Backup(ctx)
	if err != nil {
		return fail(a.s, "Backup", err)
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
