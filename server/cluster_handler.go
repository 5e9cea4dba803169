package server

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
	"github.com/fencelock/fencelock/proto/fencelock/v1/fencelockv1connect"
)

// clusterAPI adapts Server to the generated ClusterService interface.
type clusterAPI Server

var _ fencelockv1connect.ClusterServiceHandler = (*clusterAPI)(nil)

func (a *clusterAPI) Status(_ context.Context, _ *connect.Request[fencelockv1.StatusRequest]) (*connect.Response[fencelockv1.StatusResponse], error) {
	st, err := (*Server)(a).Status()
	if err != nil {
		return nil, (*api)(a).fail("Status", err)
	}
	resp := &fencelockv1.StatusResponse{
		Id: st.ID, State: st.State, LeaderId: st.LeaderID, LeaderApi: st.LeaderAPI, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, LastLogIndex: st.LastLogIndex,
		LastSnapshotIndex: st.LastSnapshotIndex, LastContact: durationpb.New(st.LastContact), Ready: st.Ready,
	}
	for _, m := range st.Members {
		resp.Members = append(resp.Members, &fencelockv1.Member{Id: m.ID, RaftAddr: m.RaftAddr, ApiAddr: m.APIAddr, Voter: m.Voter, Leader: m.Leader})
	}
	return connect.NewResponse(resp), nil
}

func (a *clusterAPI) AddMember(ctx context.Context, req *connect.Request[fencelockv1.AddMemberRequest]) (*connect.Response[fencelockv1.AddMemberResponse], error) {
	m := req.Msg
	if err := (*Server)(a).AddMember(ctx, m.Id, m.RaftAddr, m.ApiAddr); err != nil {
		return nil, (*api)(a).fail("AddMember", err)
	}
	return connect.NewResponse(&fencelockv1.AddMemberResponse{}), nil
}

func (a *clusterAPI) RemoveMember(ctx context.Context, req *connect.Request[fencelockv1.RemoveMemberRequest]) (*connect.Response[fencelockv1.RemoveMemberResponse], error) {
	if err := (*Server)(a).RemoveMember(ctx, req.Msg.Id); err != nil {
		return nil, (*api)(a).fail("RemoveMember", err)
	}
	return connect.NewResponse(&fencelockv1.RemoveMemberResponse{}), nil
}

func (a *clusterAPI) TransferLeader(ctx context.Context, req *connect.Request[fencelockv1.TransferLeaderRequest]) (*connect.Response[fencelockv1.TransferLeaderResponse], error) {
	id, err := (*Server)(a).TransferLeader(ctx, req.Msg.Id)
	if err != nil {
		return nil, (*api)(a).fail("TransferLeader", err)
	}
	return connect.NewResponse(&fencelockv1.TransferLeaderResponse{LeaderId: id}), nil
}
