package fencelock

import "time"

// LockInfo describes one lock, as Describe and List return it.
type LockInfo struct {
	Name    LockName  `json:"name"`
	Holder  string    `json:"holder,omitempty"` // the holder's label; "" when free
	Token   Token     `json:"token,omitempty"`
	Expires time.Time `json:"expires,omitzero"` // zero if free, or not known (asked of a follower)
	// Acquired is when the current grant was made (the leader's clock at
	// the granting entry); zero if free.
	Acquired time.Time     `json:"acquired,omitzero"`
	TTL      time.Duration `json:"ttl,omitempty"`
	Waiters  []WaiterInfo  `json:"waiters,omitempty"` // the first 100
	// WaiterCount is how many waiters the lock has.
	WaiterCount int `json:"waiter_count"`
}

// WaiterInfo describes one queued Acquire.
type WaiterInfo struct {
	Holder string        `json:"holder"`
	TTL    time.Duration `json:"ttl"`
}

// Member is one node of the service's Raft configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`          // "" when the caller may not see it (admin only)
	APIAddr  string `json:"api_addr,omitempty"` // "" if not recorded yet
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
