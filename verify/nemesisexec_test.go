package verify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/verify"
)

// hookScript is a nemesis hook as a user might write one: it manages
// "fencelock serve" processes by pid files (in its own directory), one
// start script per node. It cannot partition, and says so (exit 3).
const hookScript = `#!/bin/sh
# ACTION NODE-INDEX API-ADDR
dir=$(dirname "$0")
action=$1
pidf="$dir/n$2.pid"
alive() {
	[ -f "$pidf" ] || return 1
	state=$(cut -d' ' -f3 "/proc/$(cat "$pidf")/stat" 2>/dev/null)
	[ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
case $action in
start)
	alive && exit 0
	nohup sh "$dir/n$2.sh" >>"$dir/n$2.log" 2>&1 </dev/null &
	echo $! >"$pidf"
	;;
kill)
	alive || exit 0
	kill -9 "$(cat "$pidf")"
	for _ in $(seq 1 100); do alive || exit 0; sleep 0.1; done
	echo "node $2 still alive after kill -9" >&2
	exit 1
	;;
pause) kill -STOP "$(cat "$pidf")" ;;
resume) if alive; then kill -CONT "$(cat "$pidf")"; fi ;;
isolate | heal)
	echo "partitions need iptables, not in this test" >&2
	exit 3
	;;
*)
	echo "unknown action $action" >&2
	exit 2
	;;
esac
`

// hookCluster is three "fencelock serve" processes that only the hook
// script starts and stops, like a deployment the harness did not start.
type hookCluster struct {
	dir     string
	hook    string
	servers []string
}

func startHookCluster(t *testing.T, extra ...string) *hookCluster {
	t.Helper()
	bin := testproc.Binary(t)
	c := &hookCluster{dir: t.TempDir()}
	c.hook = filepath.Join(c.dir, "nemesis.sh")
	if err := os.WriteFile(c.hook, []byte(hookScript), 0o755); err != nil {
		t.Fatal(err)
	}
	var raft, boot []string
	for i := 0; i < 3; i++ {
		c.servers = append(c.servers, testproc.FreeAddr(t))
		raft = append(raft, testproc.FreeAddr(t))
		boot = append(boot, fmt.Sprintf("%s=%s", testproc.NodeID(i), raft[i]))
	}
	for i := range c.servers {
		args := append([]string{bin, "serve", "--listen", c.servers[i], "--raft-addr", raft[i],
			"--data-dir", filepath.Join(c.dir, testproc.NodeID(i)), "--node-id", testproc.NodeID(i),
			"--bootstrap", strings.Join(boot, ","), "--heartbeat-timeout", "500ms", "--election-timeout", "500ms"}, extra...)
		sh := "exec " + strings.Join(args, " ") + "\n"
		if err := os.WriteFile(filepath.Join(c.dir, fmt.Sprintf("n%d.sh", i)), []byte(sh), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c.stop(t, bin) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, s := range c.servers {
		if out, err := exec.CommandContext(ctx, c.hook, "start", strconv.Itoa(i), s).CombinedOutput(); err != nil {
			t.Fatalf("hook start %d: %v: %s", i, err, out)
		}
	}
	for ctx.Err() == nil {
		for _, s := range c.servers {
			if resp, err := http.Get("http://" + s + "/readyz?leader"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return c
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no leader among the hook's servers within 30s; logs in %s", c.dir)
	return nil
}

// stop kills the servers the hook started: the processes named in its pid
// files that are still this test's fencelock binary.
func (c *hookCluster) stop(t *testing.T, bin string) {
	for i := range c.servers {
		b, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("n%d.pid", i)))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.HasPrefix(string(cmdline), bin+"\x00") {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if t.Failed() {
		for i := range c.servers {
			b, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("n%d.log", i)))
			t.Logf("--- log of %s:\n%s", testproc.NodeID(i), tailLines(string(b), 60))
		}
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestOwnCluster_NemesisExec runs server-fault scenarios against servers
// the harness did not start, through "fencelock verify --servers
// --nemesis-exec": the hook kills and restarts them (scenario 5, which must
// see InstallSnapshot in the servers' metrics) and pauses them (scenario
// 3); it cannot partition, so scenario 2 is skipped.
func TestOwnCluster_NemesisExec(t *testing.T) {
	c := startHookCluster(t, "--snapshot-threshold", "16", "--trailing-logs", "4", "--snapshot-interval", "100ms")
	out := t.TempDir()
	if o := os.Getenv("FENCELOCK_VERIFY_OUT"); o != "" {
		out = filepath.Join(o, "nemesis-exec")
	}
	seed := time.Now().UnixNano() % 1e9
	duration := "10s"
	if testing.Short() {
		duration = "8s"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stdout, code := testproc.Run(ctx, t, nil, "verify", "--servers", strings.Join(c.servers, ","), "--nemesis-exec", c.hook,
		"--scenario", "snapshot-kill,pause-leader,partition", "--duration", duration, "--seed", strconv.FormatInt(seed, 10), "--out", out)
	t.Logf("fencelock verify (exit %d):\n%s", code, stdout)
	if code != 0 {
		t.Errorf("fencelock verify with the nemesis hook: exit status %d, want 0 (output in %s)", code, out)
	}
	read := func(name string) verify.Result {
		t.Helper()
		var r verify.Result
		b, err := os.ReadFile(filepath.Join(out, name, "result.json"))
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			t.Fatalf("result of %s: %v", name, err)
		}
		return r
	}
	for _, name := range []string{"snapshot-kill", "pause-leader"} {
		r := read(name)
		if !r.Pass || r.Skipped != "" || r.Faults < 1 || r.Nodes != 3 {
			t.Errorf("%s through the hook: verdict %q, skipped %q, %d faults on %d nodes; want PASS with faults on 3 nodes",
				name, r.Verdict, r.Skipped, r.Faults, r.Nodes)
		}
		if b, err := os.ReadFile(filepath.Join(out, name, "nemesis-exec.log")); err != nil || !strings.Contains(string(b), c.hook) {
			t.Errorf("%s: nemesis-exec.log does not record the hook's runs (%v)", name, err)
		}
	}
	if r := read("snapshot-kill"); r.InstalledSnapshots < 1 || r.LocalRestores < 1 {
		t.Errorf("snapshot-kill through the hook: %d local restores and %d installed snapshots read from the servers' metrics, want at least 1 each",
			r.LocalRestores, r.InstalledSnapshots)
	}
	if !strings.Contains(stdout, "SKIPPED") || !strings.Contains(stdout, "does not support heal") {
		t.Errorf("partition: want it skipped because the hook exits 3 for heal; output:\n%s", stdout)
	}
}
