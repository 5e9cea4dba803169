package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/sequencer"
	"github.com/fencelock/fencelock/store"
)

const storeSynopsis = `store [flags]

Run the fenced object store: an HTTP object store that refuses writes whose
fencing token is lower than the highest its fence domain has accepted.

  PUT    /v1/objects/{key}   headers Fencing-Token: N, Fencing-Domain: NAME (default: the key),
                             If-Match, If-None-Match: *, Idempotency-Key
  GET    /v1/objects/{key}   answers ETag, Fencing-Token and Fencing-Domain of the version
  DELETE /v1/objects/{key}   fenced like PUT
  POST   /v1/fences/{domain} raise a domain's highest token (Fencing-Token header)
  GET    /v1/fences/{domain} read it
  GET    /metrics, /healthz

A stale token is 409 {"error":"stale_fencing_token","domain":..,"token":..,"highest":..},
a missing token 428. The store prints "listening on http://ADDR" on stdout once
it serves (use --listen 127.0.0.1:0 for a free port) and logs on stderr.

Example:
  fencelock store --listen 127.0.0.1:7080 --data-dir ./store-data
  curl -X PUT -H 'Fencing-Token: 34' --data-binary @report.pdf \
    http://127.0.0.1:7080/v1/objects/reports/report.pdf`

func runStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := store.DefaultConfig()
	fs := newFlags("store", storeSynopsis, stderr)
	listen := fs.String("listen", "127.0.0.1:7080", "HTTP address to serve on")
	fs.StringVar(&cfg.DataDir, "data-dir", "./fencelock-store", "directory of the store's database (created if missing)")
	maxSize := sizeFlag(cfg.MaxObjectSize)
	fs.Var(&maxSize, "max-object-size", "largest object body accepted, in bytes or with a KiB, MiB or GiB suffix")
	maxBuffered := sizeFlag(store.DefaultMaxBufferedBytes)
	fs.Var(&maxBuffered, "max-buffered", "write bodies held in memory at once, in bytes or with a suffix (at least --max-object-size); more writes wait")
	fs.DurationVar(&cfg.IdempotencyTTL, "idempotency-ttl", cfg.IdempotencyTTL, "how long the first answer to an Idempotency-Key is kept (a repeat within it gets that answer)")
	fs.BoolVar(&cfg.DisableFencing, "no-fencing", false, "UNSAFE: accept every write whatever its token (for the split-brain demo only)")
	keysFile := fs.String("sequencer-keys", "", "accept a write only with a Fencing-Sequencer signed by these keys (the JSON of \"fencelock keys --json\"; several clusters' one after another) for the write's domain and token")
	skew := fs.Duration("sequencer-skew", time.Second, "with --sequencer-keys: how long past its lease end a sequencer still passes (clock differences)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	var tf tlsFlags
	tf.register(fs, false)
	if err := parse(fs, args); err != nil {
		return err
	}
	tlsConf, err := tf.server()
	if err != nil {
		return err
	}
	if cfg.ACL, err = tf.acl(); err != nil {
		return err
	}
	if err := tf.exposed("--listen", *listen, tlsConf != nil && (tf.clientCertAuth || cfg.ACL != nil)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("store takes no arguments, got %q (see fencelock store --help)", fs.Args())
	}
	if *keysFile != "" {
		f, err := os.Open(*keysFile)
		if err != nil {
			return usageErr("--sequencer-keys: %v", err)
		}
		keys, err := sequencer.ReadKeys(f)
		f.Close()
		if err != nil {
			return usageErr("--sequencer-keys %s: %v", *keysFile, err)
		}
		cfg.Verifier = &sequencer.Verifier{Keys: keys, Skew: *skew}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageErr("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	cfg.MaxObjectSize, cfg.MaxBufferedBytes = int64(maxSize), int64(maxBuffered)
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	s, err := store.Open(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	scheme := "http"
	if tlsConf != nil {
		ln, scheme = tls.NewListener(ln, tlsConf), "https"
	}
	fmt.Fprintf(stdout, "listening on %s://%s\n", scheme, ln.Addr())
	cfg.Logger.Info("fencelock store serving", "addr", ln.Addr().String(), "data_dir", cfg.DataDir)
	serveErr := s.Serve(ctx, ln) // closes ln
	cfg.Logger.Info("fencelock store stopped")
	return errors.Join(serveErr, s.Close())
}

// sizeFlag is a byte count that accepts KiB, MiB and GiB suffixes.
type sizeFlag int64

func (f *sizeFlag) String() string { return strconv.FormatInt(int64(*f), 10) }

func (f *sizeFlag) Set(s string) error {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return fmt.Errorf("want a positive size such as 67108864 or 64MiB")
	}
	*f = sizeFlag(n * mult)
	return nil
}
