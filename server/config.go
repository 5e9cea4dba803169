package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
)

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// NodeID names this node in the Raft configuration.
	NodeID string
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string
	// RaftAddr is the Raft transport's listen address (host:port).
	RaftAddr string
	// APIAddr is the API address other nodes and clients reach this node
	// at; followers name the leader's in their not_leader answers.
	APIAddr string
	// PeerTLS, if set, makes Raft links mutual TLS (tlsconf.Peer). A
	// connection is accepted, and dialed, only when the peer's certificate
	// chains to the peer CA and names a member of the node's current Raft
	// configuration (its node id, as the Common Name or a DNS name) or one
	// of PeerAllowedNames; it is closed before Raft reads a byte, and an
	// open one fails at its next read once its peer is removed. A node
	// whose configuration is empty (Join, not yet added) admits any
	// certificate of the peer CA, or only PeerAllowedNames if set.
	PeerTLS *tls.Config
	// PeerAllowedNames names certificates admitted to Raft besides the
	// members' own (one certificate shared by every node, say).
	PeerAllowedNames []string
	// ACL, if set, authenticates callers and grants them permissions on
	// lock-name prefixes (ParseACL); nil lets everyone do everything.
	ACL *acl.ACL
	// Peers reaches the other nodes' APIs: a leader asks a node for its
	// status before it counts it toward a quorum (AddMember, RemoveMember),
	// and a follower asks the leader to record its API address. api.Peers
	// is the implementation; nil reaches nobody, so every status probe
	// fails.
	Peers Peers

	// Bootstrap lists the voters of a new cluster (this node among them).
	// Empty means a one-node group of this node alone. Ignored when the data
	// dir already holds Raft state, or when Join is set.
	Bootstrap []Peer
	// Join starts the node without bootstrapping: it waits to be added to an
	// existing cluster (see AddMember).
	Join bool
	// PeerAddrs overrides the Raft address used to reach a peer, by node id
	// (a proxy, a NAT address). Peers not listed use their configured address.
	PeerAddrs map[string]string
	// AdminToken, when set, is required (as "Authorization: Bearer TOKEN")
	// by the membership changes of the ClusterService: AddMember,
	// RemoveMember and TransferLeader. Every node of a cluster needs the same
	// token (a node sends it when it joins or records its API address).
	// It also opens the admin-only surfaces (backups, keys, the audit
	// trail, Raft addresses in Status, profiles) when there is no ACL;
	// with neither, they answer loopback callers only.
	AdminToken string
	// Profiling serves Go's profiles under /debug/pprof/ on the API, to
	// admins only.
	Profiling bool

	// MinTTL and MaxTTL bound the TTL a client may ask for.
	MinTTL, MaxTTL time.Duration
	// MaxWait bounds how long an Acquire may wait in a lock's queue.
	MaxWait time.Duration
	// MaxWaitersPerLock bounds the requests one lock's queue holds, and
	// MaxWaitersPerCaller (with an ACL) those one identity has queued on
	// all locks; beyond them Acquire fails with ErrResourceExhausted.
	MaxWaitersPerLock, MaxWaitersPerCaller int
	// DedupeWindow is how long the lease ids of expired grants are
	// remembered, and the longest the requests whose grant ended are (at
	// most fsm.EndedWindow). Every node of a cluster must have the same.
	DedupeWindow time.Duration

	// HeartbeatTimeout and ElectionTimeout tune Raft (see raft.Config).
	HeartbeatTimeout, ElectionTimeout time.Duration
	// SnapshotThreshold is the number of log entries between snapshots;
	// SnapshotInterval how often Raft checks it.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// TrailingLogs is how many log entries are kept after a snapshot; a
	// follower further behind catches up by InstallSnapshot.
	TrailingLogs uint64
	// ApplyTimeout bounds how long one proposal waits to be committed when
	// the caller's context has no earlier deadline.
	ApplyTimeout time.Duration

	// Logger receives the server's structured logs; by default nothing is
	// logged. At info level every grant and release is an audit line, and
	// a grant's is written from the goroutine that applies Raft's entries:
	// give it a handler whose writes are cheap (the fencelock command's
	// hands each line to a goroutine of its own).
	Logger *slog.Logger
}

// DefaultConfig returns the embedded one-node defaults.
func DefaultConfig() Config {
	return Config{
		NodeID:              "n1",
		DataDir:             "fencelock-data",
		RaftAddr:            "127.0.0.1:7071",
		MinTTL:              time.Second,
		MaxTTL:              time.Hour,
		MaxWait:             time.Hour,
		MaxWaitersPerLock:   50000,
		MaxWaitersPerCaller: 10000,
		DedupeWindow:        10 * time.Minute,
		HeartbeatTimeout:    500 * time.Millisecond,
		ElectionTimeout:     500 * time.Millisecond,
		SnapshotThreshold:   8192,
		SnapshotInterval:    30 * time.Second,
		TrailingLogs:        10240,
		ApplyTimeout:        10 * time.Second,
		Logger:              slog.New(slog.DiscardHandler),
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("node id is empty"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is empty"))
	}
	if c.RaftAddr == "" {
		errs = append(errs, errors.New("raft address is empty"))
	}
	if c.MinTTL <= 0 || c.MaxTTL < c.MinTTL {
		errs = append(errs, fmt.Errorf("ttl range [%v, %v] is empty or not positive", c.MinTTL, c.MaxTTL))
	}
	if c.MaxWaitersPerLock < 1 || c.MaxWaitersPerCaller < 1 {
		errs = append(errs, fmt.Errorf("max waiters per lock %d and per caller %d must be at least 1", c.MaxWaitersPerLock, c.MaxWaitersPerCaller))
	}
	if c.MaxWait < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("max wait %v is below 100ms (clients would ask again and again)", c.MaxWait))
	}
	if c.HeartbeatTimeout <= 0 || c.ElectionTimeout <= 0 {
		errs = append(errs, errors.New("raft timeouts must be positive"))
	}
	self := false
	for _, p := range c.Bootstrap {
		if p.ID == "" || p.RaftAddr == "" {
			errs = append(errs, fmt.Errorf("bootstrap peer %+v needs an id and a raft address", p))
		}
		self = self || p.ID == c.NodeID
	}
	if len(c.Bootstrap) > 0 && !self {
		errs = append(errs, fmt.Errorf("bootstrap list does not include this node (%s)", c.NodeID))
	}
	if c.ApplyTimeout <= 0 {
		errs = append(errs, errors.New("apply timeout must be positive"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("logger is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid server config: %w: %w", err, fencelock.ErrInvalidArgument)
	}
	return nil
}

// Peer is one voter of a bootstrap configuration.
type Peer struct {
	ID       string
	RaftAddr string
}
