package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	bolt "go.etcd.io/bbolt"

	"github.com/fencelock/fencelock"
)

var _ fencelock.Fence = (*Server)(nil)

// Server is a fenced object store: an http.Handler over a bbolt database. It
// is safe for concurrent use. It also implements fencelock.Fence directly,
// for callers in the same process, which Config.ACL does not check.
type Server struct {
	cfg     Config
	db      *bolt.DB
	log     *slog.Logger
	metrics *metrics
	metricz http.Handler
	// buffered bounds the write bodies in memory at once.
	buffered *semaphore.Weighted

	stopSweep chan struct{} // closed by Close, once
	stopOnce  sync.Once
	swept     chan struct{} // closed when the sweeper has stopped
}

// Open opens (or creates) the store in cfg.DataDir. Only one Server may use a
// data dir at a time; Open fails after a second if another holds it. Close
// the Server when done.
func Open(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	cfg = cfg.withDefaults()
	db, err := openDB(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s := &Server{cfg: cfg, db: db, log: cfg.Logger, metrics: newMetrics(), buffered: semaphore.NewWeighted(cfg.MaxBufferedBytes),
		stopSweep: make(chan struct{}), swept: make(chan struct{})}
	s.metricz = promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})
	if cfg.DisableFencing {
		s.log.Warn("FENCING DISABLED: this store accepts every write whatever its fencing token, " +
			"so a paused lock holder can overwrite newer data. Use it only to demonstrate that corruption.")
	}
	s.log.Info("store opened", "data_dir", cfg.DataDir, "max_object_size", cfg.MaxObjectSize, "fencing", !cfg.DisableFencing,
		"idempotency_ttl", cfg.IdempotencyTTL)
	go s.sweepLoop()
	return s, nil
}

// sweepLoop deletes expired idempotency answers every IdempotencyTTL/24
// (at least every second, at most every hour), until Close.
func (s *Server) sweepLoop() {
	defer close(s.swept)
	t := time.NewTicker(min(max(s.cfg.IdempotencyTTL/24, time.Second), time.Hour))
	defer t.Stop()
	for {
		select {
		case <-s.stopSweep:
			return
		case <-t.C:
		}
		for more := true; more; {
			var n int
			var err error
			n, more, err = sweepIdempotency(s.db, time.Now(), s.cfg.IdempotencyTTL, 10000)
			if err != nil {
				s.log.Warn("sweep of expired idempotency answers failed", "err", err)
				break
			}
			s.metrics.idemExpired.Add(float64(n))
		}
	}
}

// Close stops the background sweep and closes the database. Requests still
// being served fail.
func (s *Server) Close() error {
	s.stopOnce.Do(func() { close(s.stopSweep) })
	<-s.swept
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// Serve answers HTTP requests on ln until ctx is done, then stops accepting,
// lets requests in flight finish for up to 10 seconds, and returns nil. It
// does not close s.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	stopped := make(chan error, 1)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		stopped <- hs.Shutdown(sctx)
	}()
	err := hs.Serve(ln)
	if !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve store: %w", err)
	}
	if err := <-stopped; err != nil {
		return fmt.Errorf("shut down store: %w", err)
	}
	return nil
}

// Route prefixes of the API.
const (
	objectsPrefix = "/v1/objects/"
	fencesPrefix  = "/v1/fences/"
)

// ServeHTTP routes a request of the store's API (see the package doc). Keys
// are taken from the path as sent, never cleaned: a key with a ".." segment
// is refused, not redirected.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.ACL.Active() {
		s.cfg.ACL.Middleware("", http.HandlerFunc(s.route)).ServeHTTP(w, r)
		return
	}
	s.route(w, r)
}

// route serves one request of the API.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if s.cfg.DisableFencing {
		w.Header().Set(HeaderFencing, "disabled")
	}
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, objectsPrefix):
		key := strings.TrimPrefix(path, objectsPrefix)
		switch r.Method {
		case http.MethodPut:
			s.handlePut(w, r, key)
		case http.MethodGet, http.MethodHead:
			s.handleGet(w, r, key)
		case http.MethodDelete:
			s.handleDelete(w, r, key)
		default:
			methodNotAllowed(w, "GET, HEAD, PUT, DELETE")
		}
	case strings.HasPrefix(path, fencesPrefix):
		domain := strings.TrimPrefix(path, fencesPrefix)
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			s.handleGetFence(w, r, domain)
		case http.MethodPost:
			s.handlePostFence(w, r, domain)
		default:
			methodNotAllowed(w, "GET, HEAD, POST")
		}
	case path == "/metrics":
		s.metricz.ServeHTTP(w, r)
	case path == "/healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	default:
		errorAnswer(fmt.Errorf("no route for %s %s; objects live under %s: %w", r.Method, path, objectsPrefix, fencelock.ErrNotFound)).write(w)
	}
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	err := fmt.Errorf("method not allowed, use one of %s: %w", allow, fencelock.ErrInvalidArgument)
	ans := errorAnswer(err)
	ans.Status = http.StatusMethodNotAllowed
	ans.write(w)
}

// Check raises domain's highest token to token, writing nothing else (see
// fencelock.Fence). It returns a *fencelock.StaleTokenError for a lower
// token, an error wrapping fencelock.ErrMissingToken for 0, and one wrapping
// fencelock.ErrInvalidName for a malformed domain. With DisableFencing it
// accepts every token.
func (s *Server) Check(ctx context.Context, domain string, token fencelock.Token) error {
	if err := ValidateDomain(domain); err != nil {
		return fmt.Errorf("check fence: %w", err)
	}
	ans, _, err := s.apply(ctx, write{op: opCheck, domain: domain, token: token})
	if err != nil {
		return fmt.Errorf("check fence: %w", err)
	}
	if ans.Status != http.StatusOK {
		return answerError(ans)
	}
	return nil
}

// Highest returns the highest token domain has accepted, or 0.
func (s *Server) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	if err := ValidateDomain(domain); err != nil {
		return 0, fmt.Errorf("read highest token: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("read highest token: %w", err)
	}
	var highest fencelock.Token
	err := s.db.View(func(tx *bolt.Tx) error {
		highest, _ = highestIn(tx, domain)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read highest token: %w", err)
	}
	return highest, nil
}
