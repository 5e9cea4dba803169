package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testproc"
)

func TestLock_PassesTokenAndRefusesSecondHolder(t *testing.T) {
	srv := testproc.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env := []string{"FENCELOCK_SERVER=" + srv.Addr}

	out, code := testproc.Run(ctx, t, env, "lock", "job", "--", "sh", "-c", "echo token=$FENCELOCK_TOKEN lock=$FENCELOCK_LOCK seq=$FENCELOCK_SEQUENCER")
	m := regexp.MustCompile(`token=(\d+) lock=job seq=fls1\.[A-Za-z0-9_-]+`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("lock -- sh -c echo: exit %d, output %q; want the token and the sequencer printed", code, out)
	}
	first, _ := strconv.ParseUint(m[1], 10, 64)
	if first == 0 {
		t.Fatalf("token printed is 0")
	}

	// The first holder keeps the lock while its command runs.
	holder := exec.CommandContext(ctx, testproc.Binary(t), "lock", "job", "--server", srv.Addr, "--", "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := testproc.Run(ctx, t, env, "describe", "job")
		if strings.Contains(out, "token=") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first holder never showed up in describe: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, code = testproc.Run(ctx, t, env, "lock", "job", "--wait", "0", "--", "true")
	if code == 0 || !strings.Contains(out, "is held") {
		t.Errorf("second lock --wait 0 while held: exit %d, output %q; want a failure saying the lock is held", code, out)
	}

	// The command's exit status is fencelock's.
	out, code = testproc.Run(ctx, t, env, "lock", "other", "--", "sh", "-c", "exit 7")
	if code != 7 {
		t.Errorf("lock -- sh -c 'exit 7': exit %d (%q), want 7", code, out)
	}
}

func TestRun_HelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string
		env      []string
	}{
		{[]string{"--help"}, 0, "Usage: fencelock COMMAND", nil},
		{[]string{"help", "lock"}, 0, "FENCELOCK_TOKEN", nil},
		{[]string{"renew", "x"}, 2, "--lease-id (or FENCELOCK_LEASE_ID) is required", nil},
		{[]string{"release", "x", "--lease-id", "0123456789abcdef0123456789abcdef"}, 2, "--token (or FENCELOCK_TOKEN) is required", nil},
		{[]string{"release", "x", "--lease-id", "0123456789abcdef0123456789abcdef"}, 2, "is not a token", []string{"FENCELOCK_TOKEN=abc"}},
		{[]string{"list", "--limit", "-1"}, 2, "--limit -1", nil},
		{[]string{"acquire", "bad\x01name"}, 2, "control character", nil},
		{[]string{"acquire", "x", "--ttl", "1s", "--server", "127.0.0.1:1", "--retry-timeout", "300ms"}, exitUnavailable, "fencelock serve", nil},
		{[]string{"demo", "extra"}, 2, "takes no arguments", nil},
		{[]string{"demo", "--color", "bogus"}, 2, "--color", nil},
		{[]string{"demo", "--ttl", "2h", "--pause", "3h"}, 2, "--ttl", nil},
		{[]string{"serve", "--min-ttl", "-1s"}, 2, "invalid server config", nil},
		{[]string{"serve", "--help"}, 0, "--data-dir", nil},
		{[]string{"lock", "--help"}, 0, "FENCELOCK_TOKEN", nil},
		{[]string{"nope"}, 2, "unknown command", nil},
		{[]string{"acquire", "x", "--ttl", "0"}, 2, "--ttl 0s", nil},
		{[]string{"lock", "x", "--ttl", "-1s", "--", "true"}, 2, "--ttl -1s", nil},
		{[]string{"lock", "x", "--kill-after", "-5s", "--", "true"}, 2, "--kill-after -5s", nil},
		{[]string{"members", "list", "extra"}, 2, "takes no arguments", nil},
		{[]string{"lock"}, 2, "missing lock NAME", nil},
		{[]string{"lock", "x"}, 2, "no COMMAND", nil},
		{[]string{"acquire", "x", "--ttl", "banana"}, 2, "invalid value", nil},
		{[]string{"acquire", "x", "--wait", "-3s"}, 2, "forever", nil},
		{[]string{"serve", "--procs", "-1"}, 2, "--procs -1", nil},
	}
	for _, tc := range tests {
		out, code := testproc.Run(ctx, t, tc.env, tc.args...)
		if code != tc.wantCode || !strings.Contains(out, tc.wantOut) {
			t.Errorf("fencelock %v: exit %d, output %q; want exit %d mentioning %q", tc.args, code, out, tc.wantCode, tc.wantOut)
		}
	}
}

func TestLock_CommandGetsSIGTERMWhenTheLeaseIsLost(t *testing.T) {
	srv := testproc.StartServer(t)
	proxy := testproc.StartProxy(t, srv.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The command runs once Acquire has returned: the grant's answer has
	// come through the proxy before the proxy cuts the holder off.
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.CommandContext(ctx, testproc.Binary(t), "lock", "job", "--server", proxy.Addr, "--ttl", "1s",
		"--", "sh", "-c", "trap 'echo got-sigterm; exit 42' TERM; echo $$ > "+pidFile+"; while :; do sleep 0.1; done")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readPID(t, pidFile, nil)
	proxy.Block() // the holder can no longer renew: its lease context must end
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 42 || !strings.Contains(out.String(), "got-sigterm") {
		t.Fatalf("fencelock lock: %v, output %q; want the command stopped by SIGTERM (exit 42)", err, out.String())
	}
	if !strings.Contains(out.String(), "lease on \"job\" lost") {
		t.Errorf("fencelock lock did not say the lease was lost: %q", out.String())
	}
}

// TestLock_LostLeaseStopsWhatTheCommandStarted: off a terminal, COMMAND
// runs in a process group of its own; when the lease is lost, the signal
// reaches the processes COMMAND started too, and whatever of the group
// outlives COMMAND (here a process that ignores SIGTERM) is killed, since
// it runs with a token that is no longer good.
func TestLock_LostLeaseStopsWhatTheCommandStarted(t *testing.T) {
	srv := testproc.StartServer(t)
	proxy := testproc.StartProxy(t, srv.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	inner := `trap '' TERM; echo \$\$ > ` + pidFile + "; exec sleep 60" // $$: the inner shell's pid
	cmd := exec.CommandContext(ctx, testproc.Binary(t), "lock", "job", "--server", proxy.Addr, "--ttl", "1s",
		"--", "sh", "-c", "sh -c \""+inner+"\" & wait")
	// A file, not a pipe: Wait must not wait for the survivor to close it.
	outFile, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	out := &fileText{outFile}
	cmd.Stdout, cmd.Stderr = outFile, outFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, pidFile, out)
	proxy.Block() // the holder can no longer renew: its lease context must end
	_ = cmd.Wait()
	if !strings.Contains(out.String(), "lease on \"job\" lost") {
		t.Fatalf("fencelock lock did not say the lease was lost: %q", out.String())
	}
	for deadline := time.Now().Add(5 * time.Second); running(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d, started by the command and deaf to SIGTERM, still runs after the lease was lost and fencelock exited", pid)
		}
	}
}

// TestLock_CommandStopsWhenFencelockDies: if fencelock itself is killed,
// nothing renews the lease any more, so COMMAND gets SIGTERM from the
// kernel (the parent-death signal).
func TestLock_CommandStopsWhenFencelockDies(t *testing.T) {
	srv := testproc.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.CommandContext(ctx, testproc.Binary(t), "lock", "job", "--server", srv.Addr, "--ttl", "1s",
		"--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, pidFile, nil)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); running(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command (process %d) still runs 5 s after fencelock was killed", pid)
		}
	}
}

// readPID waits up to 10 s for a process id in file; out (if set) is the
// command's output, for the failure message.
func readPID(t *testing.T, file string, out fmt.Stringer) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return n
			}
		}
		if time.Now().After(deadline) {
			if out != nil {
				t.Fatalf("no process id in %s after 10 s; output %q", file, out.String())
			}
			t.Fatalf("no process id in %s after 10 s", file)
		}
	}
}

// fileText reads back what a command wrote to a file.
type fileText struct{ f *os.File }

func (ft *fileText) String() string {
	b, _ := os.ReadFile(ft.f.Name())
	return string(b)
}

// running reports whether process pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// TestServe_ProcsSetsGOMAXPROCS: serve runs Go code on --procs threads (Go's
// default without it), as the Go runtime's own metric reports.
func TestServe_ProcsSetsGOMAXPROCS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--procs", "1"}, "go_sched_gomaxprocs_threads 1\n"},
		{[]string{"--procs", "3"}, "go_sched_gomaxprocs_threads 3\n"},
	} {
		srv := testproc.StartServer(t, tc.args...)
		resp, err := http.Get("http://" + srv.Addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), tc.want) {
			t.Errorf("serve %v: /metrics lacks %q", tc.args, strings.TrimSpace(tc.want))
		}
	}
}
