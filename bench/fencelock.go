package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/client"
)

// Server is a "fencelock serve" process started by StartServers.
type Server struct {
	Addr   string // API address, host:port
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited; then err is set
	err    error         // cmd.Wait's
	log    string
}

// PID returns the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// StartServers runs n "bin serve" processes on free loopback ports, each
// with its Raft log under dataDir/nI (fsync on, as shipped); n > 1 makes
// them one cluster (--bootstrap). It waits until a node's GET /readyz?leader
// answers 200 (a ready leader), for at most 30 s. Each node's log goes to
// dataDir/nI/serve.log. A node that exits before then (most often because
// another process took a port between its choice and the node's bind) is
// retried on fresh ports and data, up to three times in all.
//
// With tf (not nil) the nodes serve TLS everywhere with authentication
// (FencelockTLSSystem).
func StartServers(ctx context.Context, bin, dataDir string, n int, tf *TLSFiles) ([]*Server, error) {
	var err error
	for range 3 {
		var srvs []*Server
		if srvs, err = startServers(ctx, bin, dataDir, n, tf); !errors.Is(err, errExitedEarly) {
			return srvs, err
		}
		fmt.Fprintf(os.Stderr, "fencelock: %v; trying again on other ports\n", err)
		if rerr := os.RemoveAll(dataDir); rerr != nil {
			return nil, rerr
		}
	}
	return nil, err
}

// errExitedEarly: a node exited before any node was ready.
var errExitedEarly = errors.New("fencelock serve exited before ready")

func startServers(ctx context.Context, bin, dataDir string, n int, tf *TLSFiles) ([]*Server, error) {
	var conf *tls.Config
	if tf != nil {
		var err error
		if conf, err = tf.Client(); err != nil {
			return nil, err
		}
	}
	var apis, rafts, voters []string
	for i := range n {
		api, err := freePort()
		if err != nil {
			return nil, err
		}
		raftAddr, err := freePort()
		if err != nil {
			return nil, err
		}
		apis, rafts = append(apis, api), append(rafts, raftAddr)
		voters = append(voters, fmt.Sprintf("n%d=%s", i+1, raftAddr))
	}
	var srvs []*Server
	stopAll := func() {
		for _, s := range srvs {
			s.Stop()
		}
	}
	for i := range n {
		dir := filepath.Join(dataDir, fmt.Sprintf("n%d", i+1))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			stopAll()
			return nil, err
		}
		args := []string{"serve", "--listen", apis[i], "--raft-addr", rafts[i],
			"--data-dir", filepath.Join(dir, "data"), "--log-level", "warn",
			// One thread running Go code, as Redis runs its commands on
			// one: the load generator needs the machine's other core.
			"--procs", "1"}
		if n > 1 {
			args = append(args, "--node-id", fmt.Sprintf("n%d", i+1), "--bootstrap", strings.Join(voters, ","))
		}
		if tf != nil {
			args = append(args, tf.serveArgs()...)
		}
		s, err := startServer(bin, apis[i], filepath.Join(dir, "serve.log"), args)
		if err != nil {
			stopAll()
			return nil, err
		}
		srvs = append(srvs, s)
	}
	deadline := time.Now().Add(30 * time.Second)
	hc, scheme := web(conf)
	for time.Now().Before(deadline) {
		for _, s := range srvs {
			select {
			case <-s.exited:
				stopAll()
				return nil, fmt.Errorf("%w (%v); see %s", errExitedEarly, s.err, s.log)
			default:
			}
			resp, err := hc.Get(scheme + s.Addr + "/readyz?leader")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return srvs, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			stopAll()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopAll()
	return nil, fmt.Errorf("no fencelock node ready after 30 s; see the serve.log files under %s", dataDir)
}

func startServer(bin, api, logPath string, args []string) (*Server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start fencelock: %w", err)
	}
	s := &Server{Addr: api, cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// Stop ends the server with SIGTERM, and SIGKILL after 10 s.
func (s *Server) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		var ee *exec.ExitError
		if errors.As(s.err, &ee) {
			return nil // a signal exit (or an earlier failure) is expected
		}
		return s.err
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return errors.New("fencelock serve ignored SIGTERM for 10 s; killed")
	}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Fencelock is the Target of a fencelock service, through the real client
// package: one client shared by every locker (one HTTP/2 connection per
// node), or, as FencelockPerWorkerSystem, a client of its own per locker,
// as separate worker processes would have.
type Fencelock struct {
	name      string
	addrs     []string
	c         *client.Client
	ttl       time.Duration
	perWorker bool
	tls       *tls.Config // FencelockTLSSystem's
}

// The fencelock systems: one client shared by the workers, and a client per
// worker.
const (
	FencelockSystem          = "fencelock"
	FencelockPerWorkerSystem = "fencelock-perworker"
)

// IsFencelock reports whether system is one of the fencelock systems.
func IsFencelock(system string) bool {
	return system == FencelockSystem || system == FencelockPerWorkerSystem || system == FencelockTLSSystem
}

// NewFencelock returns a Target named system (one of the fencelock
// systems) of the service at addr (a comma-separated list for a cluster);
// grants have the given TTL (kept alive by the client while held). conf is
// the client's TLS (FencelockTLSSystem), or nil.
func NewFencelock(system, addr string, ttl time.Duration, conf *tls.Config) (*Fencelock, error) {
	name := system
	cfg := client.DefaultConfig(strings.Split(addr, ",")...)
	cfg.TLS = conf
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Fencelock{name: name, addrs: cfg.Endpoints, c: c, ttl: ttl, perWorker: system == FencelockPerWorkerSystem, tls: conf}, nil
}

// Renewals sums fencelock_renewals_total over the nodes.
func (f *Fencelock) Renewals(ctx context.Context) (int64, error) {
	return scrapeCounter(ctx, f.tls, f.addrs, "fencelock_renewals_total")
}

// Syncs sums the nodes' log appends, one sync each
// (fencelock_log_append_entries_count).
func (f *Fencelock) Syncs(ctx context.Context) (int64, error) {
	return scrapeCounter(ctx, f.tls, f.addrs, "fencelock_log_append_entries_count")
}

func (f *Fencelock) Name() string { return f.name }
func (f *Fencelock) Close() error { return f.c.Close() }

func (f *Fencelock) NewLocker(_ context.Context, id int) (Locker, error) {
	l := &fencelockLocker{f: f, c: f.c, holder: fmt.Sprintf("bench-%d", id)}
	if f.perWorker {
		c, err := client.New(f.addrs...)
		if err != nil {
			return nil, err
		}
		l.c, l.own = c, true
	}
	return l, nil
}

type fencelockLocker struct {
	f      *Fencelock
	c      *client.Client
	own    bool // c is this locker's own
	holder string
	l      *client.Lock
}

func (l *fencelockLocker) Acquire(ctx context.Context, name string) (uint64, error) {
	lk, err := l.c.Acquire(ctx, name, client.WithTTL(l.f.ttl), client.WithHolder(l.holder))
	if err != nil {
		return 0, err
	}
	l.l = lk
	return uint64(lk.Token()), nil
}

func (l *fencelockLocker) Release(ctx context.Context) error {
	lk := l.l
	l.l = nil
	return lk.Release(ctx)
}

func (l *fencelockLocker) Close() error {
	if l.own {
		return l.c.Close()
	}
	return nil
}
