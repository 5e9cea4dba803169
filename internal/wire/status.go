package wire

import (
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// StatusMsg is st on the wire.
func StatusMsg(st fencelock.NodeStatus) *fencelockv1.StatusResponse {
	m := &fencelockv1.StatusResponse{
		Id: st.ID, State: st.State, LeaderId: st.LeaderID, LeaderApi: st.LeaderAPI, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, LastLogIndex: st.LastLogIndex,
		LastSnapshotIndex: st.LastSnapshotIndex, LastContact: durationpb.New(st.LastContact), Ready: st.Ready,
		Version: st.Version, ClusterId: st.ClusterID, Epoch: st.Epoch,
	}
	for _, mm := range st.Members {
		m.Members = append(m.Members, &fencelockv1.Member{Id: mm.ID, RaftAddr: mm.RaftAddr, ApiAddr: mm.APIAddr, Voter: mm.Voter, Leader: mm.Leader})
	}
	return m
}

// StatusOf is the node status m carries.
func StatusOf(m *fencelockv1.StatusResponse) fencelock.NodeStatus {
	st := fencelock.NodeStatus{ID: m.Id, State: m.State, Ready: m.Ready, LeaderID: m.LeaderId, LeaderAPI: m.LeaderApi, Term: m.Term,
		CommitIndex: m.CommitIndex, AppliedIndex: m.AppliedIndex, LastLogIndex: m.LastLogIndex,
		LastSnapshotIndex: m.LastSnapshotIndex, LastContact: m.LastContact.AsDuration(), Version: m.Version,
		ClusterID: m.ClusterId, Epoch: m.Epoch}
	for _, mm := range m.Members {
		st.Members = append(st.Members, fencelock.Member{ID: mm.Id, RaftAddr: mm.RaftAddr, APIAddr: mm.ApiAddr, Voter: mm.Voter, Leader: mm.Leader})
	}
	return st
}
