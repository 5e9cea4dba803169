// Package testproc starts real fencelock processes for tests: it builds the
// binary once per test binary, picks free loopback ports, waits for
// readiness, and kills what it started. Only tests import it.
package testproc

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildMu sync.Mutex
	built   = map[string]string{} // package -> executable
)

// Binary builds cmd/fencelock once and returns the path of the executable.
func Binary(tb testing.TB) string {
	tb.Helper()
	return Build(tb, "github.com/fencelock/fencelock/cmd/fencelock")
}

// Build builds the main package pkg once (without the race detector: the
// programs are peers of the test, not under test) and returns the path of
// the executable.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "fencelock-bin-")
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", p, pkg)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out.String())
	}
	built[pkg] = p
	return p
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago and that no other test process on this machine has been handed in the
// last 15 minutes (a reservation file per port under the temp dir: test
// binaries of several packages run at once, and a node binds its port only
// when it starts). Ports come from below Linux's ephemeral range (32768+),
// so outgoing connections cannot take them either.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(os.TempDir(), "fencelock-test-ports")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("port reservations: %v", err)
	}
	for i := 0; i < 1000; i++ {
		port := 20000 + rand.IntN(12000)
		if !reservePort(dir, port) {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	tb.Fatal("no free port found in 20000-32000")
	return ""
}

// reservePort claims port for this process unless another claimed it
// recently.
func reservePort(dir string, port int) bool {
	path := filepath.Join(dir, strconv.Itoa(port))
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
			return true
		}
		fi, serr := os.Stat(path)
		if serr != nil || time.Since(fi.ModTime()) < 15*time.Minute {
			return false
		}
		if os.Remove(path) != nil { // a stale claim: take it over
			return false
		}
	}
}

// Server is a running "fencelock serve" process.
type Server struct {
	tb       testing.TB
	Addr     string // API host:port
	RaftAddr string
	DataDir  string
	Args     []string // extra flags
	// Follower: Start waits only for /healthz, not for this node to lead.
	Follower bool
	cmd      *exec.Cmd
	log      *SyncBuffer // every run's output, across restarts
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers:
// a process's output, a logger's.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// StartServer starts "fencelock serve" on free ports in a fresh data dir,
// with extra flags, and waits until it is ready. The process is killed when
// the test ends.
func StartServer(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s := &Server{tb: tb, Addr: FreeAddr(tb), RaftAddr: FreeAddr(tb), DataDir: tb.TempDir(), Args: extra}
	s.Start()
	tb.Cleanup(func() {
		if s.cmd != nil {
			s.Kill9()
		}
	})
	return s
}

// Start (re)starts the process on the same addresses and data dir and waits
// until /readyz?leader answers 200 (/healthz for a Follower).
func (s *Server) Start() {
	s.tb.Helper()
	args := append([]string{"serve", "--listen", s.Addr, "--raft-addr", s.RaftAddr,
		"--data-dir", s.DataDir, "--log-level", "debug"}, s.Args...)
	if s.log == nil {
		s.log = new(SyncBuffer)
	}
	s.cmd = exec.Command(Binary(s.tb), args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("start fencelock serve: %v", err)
	}
	path := "/readyz?leader"
	if s.Follower {
		path = "/healthz"
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + s.Addr + path)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.tb.Fatalf("fencelock serve on %s not ready after 20s; log:\n%s", s.Addr, s.log.String())
}

// Kill9 kills the process with SIGKILL and waits for it.
func (s *Server) Kill9() {
	s.tb.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Running reports whether the process is running (not killed by Kill9).
func (s *Server) Running() bool { return s.cmd != nil }

// IsReadyLeader reports whether /readyz?leader answers 200: the node leads and
// has re-armed its leases.
func (s *Server) IsReadyLeader() bool {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://" + s.Addr + "/readyz?leader")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Signal sends sig to the process.
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Log returns what the process printed so far.
func (s *Server) Log() string { return s.log.String() }

// Run runs the fencelock binary with args and returns its combined output
// and exit code. It fails the test if the binary cannot be started or does
// not finish before ctx ends.
func Run(ctx context.Context, tb testing.TB, env []string, args ...string) (string, int) {
	tb.Helper()
	cmd := exec.CommandContext(ctx, Binary(tb), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		tb.Fatalf("fencelock %v did not finish: %v\n%s", args, ctx.Err(), out)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		tb.Fatalf("run fencelock %v: %v", args, err)
	}
	return string(out), 0
}

// AttachServer prepares a Server built by the caller (fields Addr,
// RaftAddr, DataDir, Args, Follower) and kills it when the test ends. Call
// Start to run it.
func AttachServer(tb testing.TB, s *Server) *Server {
	s.tb = tb
	tb.Cleanup(func() {
		if s.cmd != nil {
			s.Kill9()
		}
	})
	return s
}

// CPUTime returns the CPU time (user + system) the process has used so far,
// from /proc (Linux).
func (s *Server) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th of them, in clock ticks (100 per second).
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat: %q", rest)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}
