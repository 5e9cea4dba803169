package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

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
	fs.DurationVar(&cfg.MaxWait, "max-wait", cfg.MaxWait, "longest a client may wait in a lock's queue per call")
	fs.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", cfg.SnapshotThreshold, "log entries between snapshots")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("serve takes no arguments, got %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageErr("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Logger = log

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	s, err := server.Open(ctx, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	defer s.Close()

	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC without TLS
	hs := &http.Server{Handler: s.Handler(), Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	log.Info("fencelock serving", "api", ln.Addr().String(), "raft", cfg.RaftAddr, "data_dir", cfg.DataDir, "node", cfg.NodeID)

	readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := s.WaitReady(readyCtx); err == nil {
		log.Info("ready", "api", ln.Addr().String())
	} else if ctx.Err() == nil {
		log.Warn("not leader yet; serving anyway", "err", err)
	}
	cancel()

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve api: %w", err)
		}
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	_ = hs.Shutdown(sctx)
	return s.Close()
}
