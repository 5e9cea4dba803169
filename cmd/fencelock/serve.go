package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/server"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := server.DefaultConfig()
	fs := newFlags("serve", "serve [flags]", stderr)
	listen := fs.String("listen", "127.0.0.1:7070", "API address: Connect, gRPC and JSON, plus /metrics, /healthz, /readyz")
	fs.StringVar(&cfg.DataDir, "data-dir", "./fencelock-data", "directory of the Raft log and snapshots (created if missing)")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "Raft transport address")
	fs.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "this node's id in the Raft group")
	fs.DurationVar(&cfg.MinTTL, "min-ttl", cfg.MinTTL, "shortest lease TTL a client may ask for")
	fs.DurationVar(&cfg.MaxTTL, "max-ttl", cfg.MaxTTL, "longest lease TTL a client may ask for")
	fs.IntVar(&cfg.MaxWaitersPerLock, "max-waiters-per-lock", cfg.MaxWaitersPerLock, "requests one lock's queue may hold; more get resource_exhausted")
	fs.IntVar(&cfg.MaxWaitersPerCaller, "max-waiters-per-caller", cfg.MaxWaitersPerCaller, "with --tokens-file or --policy-file: requests one identity may have queued on all locks")
	fs.DurationVar(&cfg.MaxWait, "max-wait", cfg.MaxWait, "longest one Acquire call waits in a lock's queue; the client asks again for a longer wait and keeps its place in the queue")
	fs.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", cfg.SnapshotThreshold, "log entries between snapshots")
	fs.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", cfg.SnapshotInterval, "how often to check whether a snapshot is due")
	fs.Uint64Var(&cfg.TrailingLogs, "trailing-logs", cfg.TrailingLogs, "log entries kept after a snapshot; a follower further behind gets the snapshot")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", cfg.HeartbeatTimeout, "Raft heartbeat timeout")
	fs.DurationVar(&cfg.ElectionTimeout, "election-timeout", cfg.ElectionTimeout, "Raft election timeout")
	advertise := fs.String("advertise", "", "API address other nodes and clients use for this node (default: --listen)")
	bootstrap := fs.String("bootstrap", "", "voters of a NEW cluster, id=raft-addr,... including this node (default: this node alone)")
	join := fs.String("join", "", "join an existing cluster through any member's API address(es), comma-separated")
	peerAddrs := fs.String("raft-peer-addrs", "", "override the Raft address used to reach peers, id=addr,... for every peer (proxies, NAT)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&cfg.Profiling, "pprof", false, "serve Go profiles under /debug/pprof/ on the API address, to admins only (docs/SECURITY.md)")
	procs := fs.Int("procs", 0, "OS threads that run Go code at once (GOMAXPROCS); 0: Go's default (every CPU, or the GOMAXPROCS environment variable). On one thread a node hands requests between its goroutines without waking another (faster on a machine whose other cores run the clients), but a burst of calls then delays every other client's answers for as long as it takes to read it (docs/PERFORMANCE.md)")
	tokenFile := fs.String("admin-token-file", "", "file holding the cluster's admin token, required by membership changes and admin-only surfaces (default: env FENCELOCK_ADMIN_TOKEN; without it or a policy, membership changes are open and the other admin-only surfaces answer loopback callers only)")
	var tf tlsFlags
	tf.register(fs, true)
	if err := parse(fs, args); err != nil {
		return err
	}
	apiTLS, nodeTLS, err := applyTLS(&cfg, &tf, *listen)
	if err != nil {
		return err
	}
	token, err := adminToken(*tokenFile)
	if err != nil {
		return err
	}
	cfg.AdminToken = token
	if fs.NArg() > 0 {
		return usageErr("serve takes no arguments, got %q", fs.Args())
	}
	if *procs < 0 {
		return usageErr("--procs %d: want 0 (Go's default) or more", *procs)
	}
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageErr("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	lw := newLineWriter(stderr)
	defer lw.Close()
	log := slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: level}))
	cfg.Logger = log
	peers, err := parsePairs(*bootstrap, "--bootstrap")
	if err != nil {
		return err
	}
	for _, p := range peers {
		cfg.Bootstrap = append(cfg.Bootstrap, server.Peer{ID: p[0], RaftAddr: p[1]})
	}
	overrides, err := parsePairs(*peerAddrs, "--raft-peer-addrs")
	if err != nil {
		return err
	}
	cfg.PeerAddrs = map[string]string{}
	for _, p := range overrides {
		cfg.PeerAddrs[p[0]] = p[1]
	}
	if *join != "" && *bootstrap != "" {
		return usageErr("--join and --bootstrap exclude each other: bootstrap a new cluster, or join one")
	}
	cfg.Join = *join != ""
	return serveNode(ctx, cfg, serveOpts{listen: *listen, advertise: *advertise, join: *join, tls: apiTLS, nodeTLS: nodeTLS})
}

// applyTLS sets the node's Raft TLS and its ACL from the flags, refuses
// unprotected addresses beyond loopback, and returns the API listener's
// TLS configuration and that of the node's calls to other nodes' APIs
// (nil: plain HTTP).
func applyTLS(cfg *server.Config, tf *tlsFlags, listen string) (apiTLS, nodeTLS *tls.Config, err error) {
	if apiTLS, err = tf.server(); err != nil {
		return nil, nil, err
	}
	if cfg.PeerTLS, err = tf.peer(); err != nil {
		return nil, nil, err
	}
	if tf.peerAllowed != "" {
		if cfg.PeerTLS == nil {
			return nil, nil, usageErr("--peer-allowed-names needs --peer-cert-file, --peer-key-file and --peer-trusted-ca-file")
		}
		cfg.PeerAllowedNames = strings.Split(tf.peerAllowed, ",")
	}
	if nodeTLS, err = tf.nodeClient(); err != nil {
		return nil, nil, usageErr("%v", err)
	}
	if cfg.ACL, err = tf.acl(); err != nil {
		return nil, nil, err
	}
	if err := tf.exposed("--listen", listen, apiTLS != nil && (tf.clientCertAuth || cfg.ACL != nil)); err != nil {
		return nil, nil, err
	}
	if err := tf.exposed("--raft-addr", cfg.RaftAddr, cfg.PeerTLS != nil); err != nil {
		return nil, nil, err
	}
	return apiTLS, nodeTLS, nil
}

// serveOpts are the flags of serve that are not the node's Config.
type serveOpts struct {
	listen, advertise, join string
	tls                     *tls.Config // the API's; nil: plain HTTP (h2c)
	nodeTLS                 *tls.Config // of this node's calls to other nodes' APIs; nil: plain HTTP
}

// serveNode runs the node of cfg on its API address until ctx ends. On the
// way out it closes the node first: that ends the Session streams and waits
// that would otherwise hold the HTTP server's shutdown for its whole grace.
func serveNode(ctx context.Context, cfg server.Config, o serveOpts) error {
	log := cfg.Logger
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	cfg.APIAddr = o.advertise
	if cfg.APIAddr == "" {
		cfg.APIAddr = ln.Addr().String()
	}
	cfg.Peers = api.Peers(o.nodeTLS, cfg.AdminToken)
	s, err := server.Open(ctx, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	defer s.Close()

	hs := api.HTTPServer(api.Handler(s))
	ln = api.BufferReads(ln)
	serveErr := make(chan error, 1)
	if o.tls != nil {
		hs.TLSConfig = o.tls
		go func() { serveErr <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- hs.Serve(ln) }()
	}
	log.Info("fencelock serving", "api", ln.Addr().String(), "raft", cfg.RaftAddr, "data_dir", cfg.DataDir, "node", cfg.NodeID, "procs", runtime.GOMAXPROCS(0))
	if cfg.AdminToken == "" && cfg.ACL == nil && !loopback(o.listen) {
		log.Warn("membership changes are open to every caller that reaches the API: give --admin-token-file, or --tokens-file and --policy-file")
	}

	if cfg.Join {
		if err := joinCluster(ctx, o.join, cfg, o.nodeTLS); err != nil {
			return err
		}
		log.Info("joined cluster", "via", o.join)
	} else if len(cfg.Bootstrap) <= 1 {
		readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := s.WaitReady(readyCtx); err == nil {
			log.Info("ready", "api", ln.Addr().String())
		} else if ctx.Err() == nil {
			log.Warn("not leader yet; serving anyway", "err", err)
		}
		cancel()
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve api: %w", err)
		}
	}
	err = s.Close()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	_ = hs.Shutdown(sctx)
	return err
}

// parsePairs parses "a=b,c=d".
func parsePairs(s, flagName string) ([][2]string, error) {
	var out [][2]string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok || k == "" || v == "" {
			return nil, usageErr("%s: %q is not id=address", flagName, item)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// joinCluster asks the cluster, through any of the given members, to add
// this node as a voter, retrying until it succeeds or ctx ends.
func joinCluster(ctx context.Context, via string, cfg server.Config, nodeTLS *tls.Config) error {
	ccfg := client.DefaultConfig(strings.Split(via, ",")...)
	ccfg.Logger = cfg.Logger
	ccfg.TLS = nodeTLS
	c, err := client.NewFromConfig(ccfg)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := admin.New(c, cfg.AdminToken).AddMember(actx, cfg.NodeID, cfg.RaftAddr, cfg.APIAddr)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, fencelock.ErrUnauthenticated) {
			return fmt.Errorf("join cluster via %s: give this node the cluster's admin token (--admin-token-file or FENCELOCK_ADMIN_TOKEN): %w", via, err)
		}
		cfg.Logger.Warn("join failed; retrying", "via", via, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("join cluster via %s: %w", via, err)
		case <-time.After(time.Second):
		}
	}
}

// adminToken reads the admin token from path, or from FENCELOCK_ADMIN_TOKEN
// when path is "". Surrounding white space is dropped.
func adminToken(path string) (string, error) {
	if path == "" {
		return strings.TrimSpace(os.Getenv("FENCELOCK_ADMIN_TOKEN")), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--admin-token-file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", usageErr("--admin-token-file %s is empty", path)
	}
	return t, nil
}
