package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/buildinfo"
)

// Peers reaches other nodes' APIs (Config.Peers).
type Peers interface {
	// Status asks the node at api (host:port) for its status.
	Status(ctx context.Context, api string) (fencelock.NodeStatus, error)
	// AddMember asks the node at api, the leader, to add m as a voter,
	// or to record m's API address if m is one already.
	AddMember(ctx context.Context, api string, m fencelock.Member) error
}

// peerAddrs is a raft.ServerAddressProvider that overrides peers' addresses
// by node id; unknown ids fall back to the configured address.
type peerAddrs map[string]string

func (p peerAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if a, ok := p[string(id)]; ok {
		return raft.ServerAddress(a), nil
	}
	return "", fmt.Errorf("no address override for %s", id)
}

// recordAPIAddr publishes this leader's API address in the replicated state,
// so followers can point clients at it.
func (s *Server) recordAPIAddr() {
	if s.cfg.APIAddr == "" {
		return
	}
	if a, ok := s.fsm.MemberAPI(s.cfg.NodeID); ok && a == s.cfg.APIAddr {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	if _, err := s.Apply(ctx, fsm.SetMember{NodeID: s.cfg.NodeID, APIAddr: s.cfg.APIAddr}); err != nil {
		s.log.Warn("record API address failed", "err", err)
	}
}

// registerLoop makes sure this node's API address is in the replicated
// state: a follower asks the leader to record it (AddMember with its own
// address, which changes no membership); a leader records its own.
func (s *Server) registerLoop() {
	defer s.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if a, ok := s.fsm.MemberAPI(s.cfg.NodeID); ok && a == s.cfg.APIAddr {
			continue
		}
		_, leaderID := s.raft.LeaderWithID()
		if string(leaderID) == s.cfg.NodeID {
			if s.Ready() {
				s.recordAPIAddr() // its first try, on becoming ready, failed
			}
			continue
		}
		leaderAPI, _ := s.fsm.MemberAPI(string(leaderID))
		if leaderID == "" || leaderAPI == "" {
			continue
		}
		if s.cfg.Peers == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		err := s.cfg.Peers.AddMember(ctx, leaderAPI, fencelock.Member{ID: s.cfg.NodeID, RaftAddr: s.cfg.RaftAddr, APIAddr: s.cfg.APIAddr})
		cancel()
		if err != nil {
			s.log.Debug("register API address with the leader failed", "leader", leaderID, "err", err)
		}
	}
}

// Status returns this node's view of the cluster. It is served from local
// state: it decides nothing.
func (s *Server) Status() (fencelock.NodeStatus, error) {
	stats := s.raft.Stats()
	u := func(k string) uint64 { v, _ := strconv.ParseUint(stats[k], 10, 64); return v }
	_, leaderID := s.raft.LeaderWithID()
	id := s.fsm.Identity()
	st := fencelock.NodeStatus{
		ID: s.cfg.NodeID, State: strings.ToLower(s.raft.State().String()), LeaderID: string(leaderID),
		Term: u("term"), CommitIndex: u("commit_index"), AppliedIndex: u("applied_index"),
		LastLogIndex: u("last_log_index"), LastSnapshotIndex: u("last_snapshot_index"), Ready: s.Ready(),
		Version: buildinfo.Read().String(), ClusterID: id.ClusterID, Epoch: id.Epoch,
	}
	st.LeaderAPI, _ = s.fsm.MemberAPI(st.LeaderID)
	if lc := stats["last_contact"]; lc != "" && lc != "never" && lc != "0" {
		st.LastContact, _ = time.ParseDuration(lc)
	}
	members, err := s.members()
	if err != nil {
		return st, err
	}
	st.Members = members
	return st, nil
}

func (s *Server) members() ([]fencelock.Member, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read raft configuration: %v: %w", err, fencelock.ErrUnavailable)
	}
	_, leaderID := s.raft.LeaderWithID()
	apis := s.fsm.MemberAPIs()
	var out []fencelock.Member
	for _, srv := range f.Configuration().Servers {
		out = append(out, fencelock.Member{ID: string(srv.ID), RaftAddr: string(srv.Address), APIAddr: apis[string(srv.ID)],
			Voter: srv.Suffrage == raft.Voter, Leader: srv.ID == leaderID})
	}
	return out, nil
}

func (s *Server) requireLeader() error {
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	return nil
}

// AddMember adds a voter, or updates its API address if it is already one.
// A new voter needs its API address. It is refused with ErrPreconditionFailed when the voters that
// answer a status probe and follow this leader (see follows; the new one,
// at apiAddr, need only answer) would not be a majority of the new
// configuration: the new voter counts toward quorum at
// once, and a node that cannot be reached (a mistyped address) would leave
// the cluster unable to elect a leader, with no leader to undo it.
// Errors: ErrNotLeader, ErrInvalidArgument, ErrUnavailable,
// ErrPreconditionFailed.
func (s *Server) AddMember(ctx context.Context, id, raftAddr, apiAddr string) error {
	if id == "" || raftAddr == "" || len(id) > 128 || len(raftAddr) > 256 || len(apiAddr) > 256 {
		return fmt.Errorf("add member: id and raft address are required, at most 128 and 256 bytes: %w", fencelock.ErrInvalidArgument)
	}
	if err := s.requireLeader(); err != nil {
		return err
	}
	s.membership.Lock()
	defer s.membership.Unlock()
	members, err := s.members()
	if err != nil {
		return err
	}
	present := false
	for _, m := range members {
		present = present || m.ID == id && m.RaftAddr == raftAddr && m.Voter
	}
	if !present {
		voters, healthy := 1, 0 // the new voter
		st, err := s.statusOf(ctx, apiAddr)
		if err == nil && st.ID != id {
			err = fmt.Errorf("it answers as %q", st.ID)
		}
		if err == nil {
			healthy++
		}
		if apiAddr == "" {
			return fmt.Errorf("add member %s: its API address is required (members add ID RAFT-ADDR API-ADDR): the leader asks the new node's status there before it counts it as a voter: %w", id, fencelock.ErrInvalidArgument)
		}
		for _, m := range members {
			if m.ID == id || !m.Voter {
				continue
			}
			voters++
			if s.follows(ctx, m) {
				healthy++
			}
		}
		if healthy < voters/2+1 {
			return fmt.Errorf("add member %s: only %d of the %d voters it would make answer (the new one at API address %q included); a quorum needs %d: %w",
				id, healthy, voters, apiAddr, voters/2+1, fencelock.ErrPreconditionFailed)
		}
		if err := s.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, s.cfg.ApplyTimeout).Error(); err != nil {
			return s.raftErr("add member "+id, err)
		}
		s.record(Event{Kind: "membership", Identity: acl.IdentityOf(ctx), Detail: "add " + id + " at " + apiAddr})
	}
	if a, ok := s.fsm.MemberAPI(id); ok && a == apiAddr {
		return nil
	}
	if apiAddr != "" {
		if _, err := s.Apply(ctx, fsm.SetMember{NodeID: id, APIAddr: apiAddr}); err != nil {
			return err
		}
	}
	s.log.Info("member added", "id", id, "raft", raftAddr, "api", apiAddr)
	return nil
}

// RemoveMember removes a member. It is refused with ErrPreconditionFailed
// when the voters left, counting only those that answer a status probe and
// follow this leader over Raft (see follows), would not be a majority of
// the new configuration. The leader may remove
// itself; it steps down once the change commits.
func (s *Server) RemoveMember(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("remove member: empty id: %w", fencelock.ErrInvalidArgument)
	}
	if err := s.requireLeader(); err != nil {
		return err
	}
	s.membership.Lock()
	defer s.membership.Unlock()
	members, err := s.members()
	if err != nil {
		return err
	}
	found, voters, healthy := false, 0, 0
	for _, m := range members {
		if m.ID == id {
			found = true
			continue
		}
		if !m.Voter {
			continue
		}
		voters++
		if s.follows(ctx, m) {
			healthy++
		}
	}
	if !found {
		return fmt.Errorf("remove member %s: not in the configuration: %w", id, fencelock.ErrNotFound)
	}
	if voters == 0 && found {
		return fmt.Errorf("remove member %s: it is the last voter; a cluster cannot remove its last voter (stop the node instead): %w", id, fencelock.ErrPreconditionFailed)
	}
	if voters == 0 || healthy < voters/2+1 {
		return fmt.Errorf("remove member %s: only %d of the %d voters left answer; a quorum needs %d: %w",
			id, healthy, voters, voters/2+1, fencelock.ErrPreconditionFailed)
	}
	if err := s.raft.RemoveServer(raft.ServerID(id), 0, s.cfg.ApplyTimeout).Error(); err != nil {
		return s.raftErr("remove member "+id, err)
	}
	if id != s.cfg.NodeID {
		if _, err := s.Apply(ctx, fsm.DropMember{NodeID: id}); err != nil {
			s.log.Warn("forget removed member's API address failed", "id", id, "err", err)
		}
	}
	s.record(Event{Kind: "membership", Identity: acl.IdentityOf(ctx), Detail: "remove " + id})
	s.log.Info("member removed", "id", id)
	return nil
}

// follows reports whether voter m counts toward a quorum: this node, or a
// node that answers a status request within a second, as m, and follows
// this node over Raft (a follower that names it as leader and heard from it
// within the heartbeat timeout). A node whose API answers while its Raft
// link is cut does not count: it campaigns, or its last contact grows.
func (s *Server) follows(ctx context.Context, m fencelock.Member) bool {
	if m.ID == s.cfg.NodeID {
		return true
	}
	st, err := s.statusOf(ctx, m.APIAddr)
	return err == nil && st.ID == m.ID && st.LeaderID == s.cfg.NodeID &&
		strings.EqualFold(st.State, raft.Follower.String()) && st.LastContact <= s.cfg.HeartbeatTimeout
}

// statusOf asks the node at api for its status, waiting at most a second.
func (s *Server) statusOf(ctx context.Context, api string) (fencelock.NodeStatus, error) {
	switch {
	case api == "":
		return fencelock.NodeStatus{}, errors.New("no API address recorded")
	case s.cfg.Peers == nil:
		return fencelock.NodeStatus{}, errors.New("this node reaches no peers (Config.Peers)")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return s.cfg.Peers.Status(ctx, api)
}

// TransferLeader hands leadership to member id, or to any up-to-date
// follower when id is "". It returns the new leader's id.
func (s *Server) TransferLeader(ctx context.Context, id string) (string, error) {
	if err := s.requireLeader(); err != nil {
		return "", err
	}
	var f raft.Future
	if id == "" {
		f = s.raft.LeadershipTransfer()
	} else {
		members, err := s.members()
		if err != nil {
			return "", err
		}
		addr := ""
		for _, m := range members {
			if m.ID == id {
				addr = m.RaftAddr
			}
		}
		if addr == "" {
			return "", fmt.Errorf("transfer leadership to %s: not a member: %w", id, fencelock.ErrNotFound)
		}
		f = s.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr))
	}
	if err := f.Error(); err != nil {
		return "", s.raftErr("transfer leadership", err)
	}
	for ctx.Err() == nil {
		if _, lid := s.raft.LeaderWithID(); lid != "" && string(lid) != s.cfg.NodeID {
			s.record(Event{Kind: "membership", Identity: acl.IdentityOf(ctx), Detail: "leadership to " + string(lid)})
			return string(lid), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("transfer leadership: %w: %w", fencelock.ErrUnavailable, ctx.Err())
}

func (s *Server) raftErr(what string, err error) error {
	if errors.Is(err, raft.ErrNotLeader) {
		return fmt.Errorf("%s: %w", what, s.notLeader())
	}
	// ErrLeadershipLost: the change was appended and may have taken
	// effect; its outcome is unknown (ErrUnavailable), not refused.
	return fmt.Errorf("%s: %v: %w", what, err, fencelock.ErrUnavailable)
}
