package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/fsm"
	"github.com/fencelock/fencelock/internal/rawio"
)

// Server is one node of the lock service.
type Server struct {
	cfg   Config
	log   *slog.Logger
	fsm   *fsm.FSM
	raft  *raft.Raft
	store *raftStore
	trans *raft.NetworkTransport
	// peers says who may speak Raft with this node (with PeerTLS).
	peers  *peerGate
	leases *leaseTable
	// claims ties waiting requests to the calls that wait for them.
	claims *claims
	// leaderCheck shares VerifyLeader rounds among concurrent renewals.
	leaderCheck *leaderCheck
	// signers caches the key that signs sequencers; toSign signs them.
	signers signerCache
	toSign  signQueue
	// acl authenticates callers and checks their permissions.
	acl *acl.ACL
	// backingUp is set while a Backup runs.
	backingUp atomic.Bool
	// clock stamps Command.Now.
	clock *cmdClock
	// membership serialises membership changes: each checks the quorum the
	// change leaves against the configuration as it is, which another
	// change under way would make stale.
	membership sync.Mutex
	metrics    *metrics
	events     events // the recent ones, for the dashboard
	// raftStarted is set once raft.NewRaft has returned. hashicorp/raft
	// restores the FSM from the node's own latest snapshot inside NewRaft,
	// and afterwards only when the leader installs a snapshot, so a restore
	// before this is set is a local one and one after it an installed one.
	raftStarted atomic.Bool
	// replayTo is the last index of the log at start: entries up to it
	// happened before this process and are not new events.
	replayTo uint64

	// slots bounds the proposals under way (maxProposals); timeouts bounds
	// the wait of those whose context has no deadline.
	slots    chan struct{}
	timeouts deadlines

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Open starts a node in cfg.DataDir, bootstrapping a one-node Raft group the
// first time. The server's background work lives until Close.
func Open(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := createDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if cfg.ACL == nil {
		cfg.ACL = &acl.ACL{}
	}
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: newMetrics(), clock: newCmdClock(), acl: cfg.ACL}
	s.claims = newClaims(s)
	s.slots = make(chan struct{}, maxProposals)
	s.timeouts.d = cfg.ApplyTimeout
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.leases = newLeaseTable(s.proposeExpire)
	s.fsm = fsm.New(cfg.DedupeWindow, (*observer)(s))

	raftLevel := hclog.Warn
	if cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		raftLevel = hclog.Info
	}
	raftLog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: raftLevel, Output: slogWriter{cfg.Logger}, DisableTime: true})
	store, err := openLogStore(cfg)
	if err != nil {
		return nil, err
	}
	s.store = store
	store.appended = func(n int) { s.metrics.appendEntries.Observe(float64(n)) }
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, raftLog)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	s.peers = &peerGate{allowed: cfg.PeerAllowedNames}
	trans, err := openTransport(cfg, raftLog, s.peers)
	if err != nil {
		store.Close()
		return nil, err
	}
	s.trans = trans
	fail := func(err error) (*Server, error) {
		trans.Close()
		store.Close()
		return nil, err
	}

	rc, notify := raftConfig(cfg, raftLog)
	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return fail(fmt.Errorf("inspect raft state: %w", err))
	}
	if !existing && !cfg.Join {
		if err := bootstrap(rc, cfg, store, snaps, trans); err != nil {
			return fail(err)
		}
		s.log.Info("bootstrapped raft group", "node", cfg.NodeID, "voters", max(1, len(cfg.Bootstrap)), "dir", cfg.DataDir)
	}
	if s.replayTo, err = store.LastIndex(); err != nil {
		return fail(fmt.Errorf("read the raft log's last index: %w", err))
	}
	r, err := s.newRaft(rc, store, snaps, trans)
	if err != nil {
		return fail(err)
	}
	s.raft = r
	s.peers.raft.Store(r)
	s.leaderCheck = &leaderCheck{verify: func() error { return r.VerifyLeader().Error() }}
	s.raftStarted.Store(true)
	s.metrics.reg.MustRegister(newGauges(s))
	s.wg.Add(3)
	go s.watchLeadership(notify)
	go s.countLeaderChanges()
	go s.claims.reapDue()
	if cfg.APIAddr != "" {
		s.wg.Add(1)
		go s.registerLoop()
	}
	return s, nil
}

// newRaft starts Raft on the node's storage. The latest logCacheEntries
// entries stay in memory: the leader sends them to its followers, and a
// follower applies them, without reading them back.
func (s *Server) newRaft(rc *raft.Config, store *raftStore, snaps raft.SnapshotStore, trans raft.Transport) (*raft.Raft, error) {
	logs, err := raft.NewLogCache(logCacheEntries, store)
	if err != nil {
		return nil, err
	}
	r, err := raft.NewRaft(rc, s.fsm, logs, store, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("start raft: %w", err)
	}
	return r, nil
}

// rpcTimeout bounds a Raft RPC, its reply included: a reply that has not
// arrived within it fails the RPC and is never counted.
func rpcTimeout(cfg Config) time.Duration { return max(2*time.Second, 4*cfg.HeartbeatTimeout) }

// openTransport listens on the node's Raft address; with PeerTLS, gate
// says which peers may connect or be connected to. Raft's connections read
// and write with raw system calls (internal/rawio).
func openTransport(cfg Config, raftLog hclog.Logger, gate *peerGate) (*raft.NetworkTransport, error) {
	addr, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("resolve raft address %q: %w", cfg.RaftAddr, err)
	}
	if addr.IP == nil || addr.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft address %q: peers cannot reach an unspecified address: %w", cfg.RaftAddr, fencelock.ErrInvalidArgument)
	}
	tc := &raft.NetworkTransportConfig{Logger: raftLog, MaxPool: 3, Timeout: rpcTimeout(cfg)}
	if len(cfg.PeerAddrs) > 0 {
		tc.ServerAddressProvider = peerAddrs(cfg.PeerAddrs)
	}
	ln, err := net.Listen("tcp", cfg.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on raft address %q: %w", cfg.RaftAddr, err)
	}
	ln = rawio.Listener(ln)
	if cfg.PeerTLS == nil {
		tc.Stream = tcpStream{Listener: ln, addr: addr}
	} else {
		tc.Stream = newTLSStream(ln, addr, cfg.PeerTLS, gate, cfg.Logger)
	}
	return raft.NewNetworkTransportWithConfig(tc), nil
}

// tcpStream is a raft.StreamLayer over plain TCP.
type tcpStream struct {
	net.Listener
	addr net.Addr // advertised
}

func (s tcpStream) Addr() net.Addr { return s.addr }

func (s tcpStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return dialPeer(address, timeout)
}

// dialPeer connects to a peer's Raft address.
func dialPeer(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return rawio.Dialer(&net.Dialer{Timeout: timeout})(context.Background(), "tcp", string(address))
}

// logCacheEntries is how many of the latest log entries a node keeps in
// memory: as many as one append carries (MaxAppendEntries).
const logCacheEntries = 1024

// raftConfig is the Raft configuration of a node, and the channel that
// learns of its leadership changes.
func raftConfig(cfg Config, raftLog hclog.Logger) (*raft.Config, chan bool) {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = raftLog
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = min(cfg.HeartbeatTimeout, rc.LeaderLeaseTimeout)
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	// Raft's queue holds maxProposals, the most one append (one sync)
	// carries (hashicorp/raft allows up to 1024): a proposal with a slot
	// never waits to join it (Apply).
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = maxProposals
	notify := make(chan bool, 8)
	rc.NotifyCh = notify
	return rc, notify
}

// bootstrap writes the first configuration of a new Raft group: this node
// alone, or cfg.Bootstrap.
func bootstrap(rc *raft.Config, cfg Config, store *raftStore, snaps raft.SnapshotStore, trans raft.Transport) error {
	boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}}}
	if len(cfg.Bootstrap) > 0 {
		boot.Servers = nil
		for _, p := range cfg.Bootstrap {
			boot.Servers = append(boot.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
	}
	if err := raft.BootstrapCluster(rc, store, store, snaps, trans, boot); err != nil {
		return fmt.Errorf("bootstrap raft: %w", err)
	}
	return nil
}

// Close stops the node: timers, waiters and Raft. It is safe to call twice.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.cancel()
		s.leases.deactivate()
		s.claims.failAll() // waiting acquires go to the next leader now
		err = s.raft.Shutdown().Error()
		s.wg.Wait()
		err = errors.Join(err, s.trans.Close(), s.store.Close())
	})
	return err
}

// Config returns the node's configuration (ACL set: an empty one if
// Open's had none).
func (s *Server) Config() Config { return s.cfg }

// Done is closed when the node starts to close.
func (s *Server) Done() <-chan struct{} { return s.ctx.Done() }

// Gatherer is the node's Prometheus registry, for /metrics.
func (s *Server) Gatherer() prometheus.Gatherer { return s.metrics.reg }

// Ready reports whether the node is the leader and has re-armed every lease,
// so it can serve requests.
func (s *Server) Ready() bool { return s.leases.isActive() }

// readyLag is how many committed entries a follower may have left to apply
// and still count as in sync.
const readyLag = 1024

// InSync reports whether this node is a follower that heard from a leader
// within twice the election timeout and whose state machine has applied
// what this node knows to be committed, within readyLag entries: it serves
// reads of its own state and forwards callers to the leader. /readyz
// answers 200 on such a node. A follower knows only the commit index of
// the entries it has received: one still receiving a long backlog counts
// as caught up with what it has so far.
func (s *Server) InSync() bool {
	if s.raft.State() != raft.Follower {
		return false
	}
	if addr, _ := s.raft.LeaderWithID(); addr == "" || time.Since(s.raft.LastContact()) > 2*s.cfg.ElectionTimeout {
		return false
	}
	return s.fsm.AppliedIndex()+readyLag >= s.raft.CommitIndex()
}

// WaitReady blocks until the node is ready or ctx ends.
func (s *Server) WaitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for leadership: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// watchLeadership arms leases when this node becomes leader (after a
// barrier) and stops them at once when it stops being leader.
func (s *Server) watchLeadership(notify <-chan bool) {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case leader := <-notify:
			if !leader {
				s.leases.deactivate()
				s.claims.failAll()
				s.log.Warn("lost leadership: lease timers stopped, waiting acquires sent to the new leader")
				continue
			}
			epoch := s.leases.currentEpoch()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.becomeReady(epoch)
			}()
		}
	}
}

// becomeReady waits for a barrier (retrying while this node stays leader),
// so that every entry of earlier terms is applied, then re-arms every lease
// with its full TTL and rpcTimeout. It gives up if leadership is lost
// meanwhile.
func (s *Server) becomeReady(epoch uint64) {
	for {
		err := s.barrier(s.ctx)
		if s.ctx.Err() != nil || s.leases.currentEpoch() != epoch || s.raft.State() != raft.Leader {
			return
		}
		if err == nil {
			break
		}
		s.log.Warn("barrier after election failed; retrying", "err", err)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.ensureIdentity()
	// The old leader may still confirm a renewal with a reply sent before
	// its followers voted for this node and delivered up to rpcTimeout
	// later (leaderCheck); the leases it extended so count from at most
	// that long after this moment.
	n, ok := s.leases.activate(epoch, s.fsm.Holders, time.Now(), rpcTimeout(s.cfg))
	if !ok {
		return
	}
	// Queued requests get a grace: one whose client died meanwhile would
	// otherwise be granted to nobody. A client still there comes to wait
	// for its request within it (its call to the old leader ended with
	// not_leader).
	queued := s.fsm.QueuedRequests()
	for _, q := range queued {
		s.claims.orphan(q.Name, q.RequestID, q.Owner, leaderGrace)
	}
	// A grant an old leader recorded as reaching nobody is taken back
	// after the grace a call of its own would have had, unless its caller
	// comes for it first.
	detached := 0
	for name, h := range s.fsm.Holders() {
		if h.Detached && h.RequestID != "" {
			s.claims.orphan(name, h.RequestID, h.Owner, callGrace)
			detached++
		}
	}
	s.log.Info("leader ready: leases re-armed with full TTL", "leases", n, "queued", len(queued), "detached", detached, "term", s.raft.Stats()["term"])
	s.recordAPIAddr()
}

// proposeExpire is the lease table's callback when a lease's deadline passes.
func (s *Server) proposeExpire(name fencelock.LockName, token fencelock.Token) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	res, err := s.Apply(ctx, fsm.Expire{Name: name, Token: token})
	if err != nil {
		return err
	}
	if res.Err == nil {
		s.metrics.expiries.Inc()
		s.record(Event{Kind: "expiry", Lock: string(name), Token: token})
		s.log.Info("lease expired", "lock", name, "token", token)
	}
	return nil
}

// observer adapts the server to fsm.Observer.
type observer Server

func (o *observer) Granted(name fencelock.LockName, h fsm.Holder, waited time.Duration) {
	s := (*Server)(o)
	s.metrics.grants.Inc()
	if s.fresh() {
		s.metrics.waitSeconds.Observe(waited.Seconds())
		s.record(Event{Kind: "grant", Lock: string(name), Token: h.Token, Holder: h.Holder, Identity: h.Owner})
	}
	s.leases.granted(name, h, time.Now())
	s.claims.deliver(name, h)
}

// Restored records where a restored snapshot came from (a log line and
// fencelock_snapshot_restores_total) and hands grants that arrived inside an
// installed snapshot to the Acquire calls waiting for them here.
func (o *observer) Restored() {
	s := (*Server)(o)
	if s.raftStarted.Load() {
		s.metrics.restores.WithLabelValues(restoreLeader).Inc()
		s.log.Info("installed snapshot from leader", "index", s.fsm.AppliedIndex())
	} else {
		s.metrics.restores.WithLabelValues(restoreLocal).Inc()
		s.log.Info("restored local snapshot", "index", s.fsm.AppliedIndex())
	}
	for name, h := range s.fsm.Holders() {
		s.claims.deliver(name, h)
	}
}

func (o *observer) Ended(name fencelock.LockName, token fencelock.Token, held time.Duration) {
	s := (*Server)(o)
	if s.fresh() {
		s.metrics.holdSeconds.Observe(held.Seconds())
	}
	s.leases.ended(name, token)
}

// fresh reports whether the entry being applied is new, not one of the log
// replayed at start: only new ones are events and histogram samples.
func (s *Server) fresh() bool { return s.fsm.AppliedIndex() > s.replayTo }

// countLeaderChanges counts every new leader this node observes
// (fencelock_leader_changes_total), itself included; losing a leader
// without knowing the next is not counted.
func (s *Server) countLeaderChanges() {
	defer s.wg.Done()
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		lo, ok := o.Data.(raft.LeaderObservation)
		return ok && lo.LeaderID != ""
	})
	s.raft.RegisterObserver(obs)
	defer s.raft.DeregisterObserver(obs)
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-ch:
			s.metrics.leaderChanges.Inc()
		}
	}
}

// slogWriter routes Raft's own log lines into the server's slog logger.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if strings.Contains(line, "unable to get address for server, using fallback") {
		return len(p), nil // expected with --raft-peer-addrs naming only some peers
	}
	level := slog.LevelWarn
	switch {
	case strings.HasPrefix(line, "[INFO]"), strings.HasPrefix(line, "[DEBUG]"), strings.HasPrefix(line, "[TRACE]"):
		level = slog.LevelDebug
	case strings.HasPrefix(line, "[ERROR]"):
		level = slog.LevelError
	case strings.Contains(line, "starting election") && strings.HasSuffix(line, "last-leader-id="):
		level = slog.LevelInfo // the first election of a node that never knew a leader: a normal start
	}
	w.log.Log(context.Background(), level, line, "component", "raft")
	return len(p), nil
}

// createDataDir creates dir if it does not exist, and then syncs its parent,
// so that a crash cannot lose the directory with the log synced inside it.
func createDataDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	parent, err := os.Open(filepath.Dir(filepath.Clean(dir)))
	if err != nil {
		return fmt.Errorf("sync data dir's parent: %w", err)
	}
	defer parent.Close()
	if err := parent.Sync(); err != nil {
		return fmt.Errorf("sync data dir's parent: %w", err)
	}
	return nil
}
