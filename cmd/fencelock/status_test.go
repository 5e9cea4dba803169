package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testproc"
)

// readyz returns the status code of GET path on the node at addr.
func readyz(addr, path string) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitCode polls until GET path on addr answers want, or fails t after 15 s.
func waitCode(t *testing.T, addr, path string, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for readyz(addr, path) != want {
		if time.Now().After(deadline) {
			t.Fatalf("GET %s on %s: want %d, got %d", path, addr, want, readyz(addr, path))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStatusAndReadyz_FollowReadinessAndExitCodes(t *testing.T) {
	c := testproc.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leader := c.Leader()
	env := []string{"FENCELOCK_SERVER=" + strings.Join(c.Endpoints(), ",")}

	// Every in-sync node is ready; only the leader is ready as a leader.
	for i, s := range c.Nodes {
		waitCode(t, s.Addr, "/readyz", http.StatusOK)
		want := http.StatusServiceUnavailable
		if i == leader {
			want = http.StatusOK
		}
		if got := readyz(s.Addr, "/readyz?leader"); got != want {
			t.Errorf("node %d (leader %d): /readyz?leader = %d, want %d", i, leader, got, want)
		}
	}
	// The members' API addresses are recorded a moment after the election.
	var out string
	code := -1
	for deadline := time.Now().Add(15 * time.Second); code != 0 && time.Now().Before(deadline); {
		out, code = testproc.Run(ctx, t, env, "status")
		time.Sleep(100 * time.Millisecond)
	}
	if code != 0 || !strings.Contains(out, "VERSION") || strings.Count(out, "(devel)") != 3 {
		t.Fatalf("status of a healthy cluster: exit %d, want 0 with each node's version:\n%s", code, out)
	}

	// A follower cut off from Raft stops being ready, and is again once healed.
	follower := (leader + 1) % 3
	c.Isolate(follower)
	waitCode(t, c.Nodes[follower].Addr, "/readyz", http.StatusServiceUnavailable)
	c.Heal()
	waitCode(t, c.Nodes[follower].Addr, "/readyz", http.StatusOK)

	// A member that does not answer makes status fail, table and all.
	c.Nodes[follower].Kill9()
	out, code = testproc.Run(ctx, t, env, "status")
	if code != 1 || !strings.Contains(out, "unreachable") || !strings.Contains(out, "do not answer") {
		t.Errorf("status with a member down: exit %d, want 1 naming it unreachable:\n%s", code, out)
	}
	out, code = testproc.Run(ctx, t, env, "status", "--json")
	var doc struct {
		Nodes []struct {
			Status *struct {
				LastContact string `json:"last_contact"`
			} `json:"status"`
		} `json:"nodes"`
	}
	if code != 1 || json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &doc) != nil || len(doc.Nodes) != 3 {
		t.Errorf("status --json with a member down: exit %d, want 1 and three nodes:\n%s", code, out)
	}
	for _, n := range doc.Nodes {
		if n.Status != nil && !strings.HasSuffix(n.Status.LastContact, "s") {
			t.Errorf("status --json: last_contact %q, want a duration string", n.Status.LastContact)
		}
	}
	out, code = testproc.Run(ctx, t, env, "members", "list", "--json")
	var members []struct {
		ID       string `json:"id"`
		RaftAddr string `json:"raft_addr"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &members) != nil || len(members) != 3 || members[0].RaftAddr == "" {
		t.Errorf("members list --json: exit %d, want three members with snake_case keys:\n%s", code, out)
	}
}

func TestVersion_PrintsTheBuildAndMetricsCarryIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, code := testproc.Run(ctx, t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "fencelock (devel) (") || !strings.Contains(out, "go1.") {
		t.Errorf("version: exit %d, output %q", code, out)
	}
	out, code = testproc.Run(ctx, t, nil, "version", "--json")
	var v struct{ Version, GoVersion string }
	if err := json.Unmarshal([]byte(out), &struct {
		Version   *string `json:"version"`
		GoVersion *string `json:"go_version"`
	}{&v.Version, &v.GoVersion}); code != 0 || err != nil || v.Version == "" || v.GoVersion == "" {
		t.Errorf("version --json: exit %d, output %q (%v)", code, out, err)
	}
	srv := testproc.StartServer(t)
	resp, err := http.Get("http://" + srv.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `fencelock_build_info{go_version="go1.`) {
		t.Errorf("/metrics has no fencelock_build_info gauge:\n%.2000s", body)
	}
}

func TestDeployThreeNodes_StartsAClusterThatStatusSees(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	script := func(cmd string) (string, error) {
		c := exec.CommandContext(ctx, "bash", "../../deploy/three-nodes.sh", cmd, dir)
		c.Env = append(os.Environ(), "FENCELOCK_BIN="+testproc.Binary(t), "FENCELOCK_PORT_BASE=17200")
		out, err := c.Output()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = script("down") })
	out, err := script("up")
	if err != nil || !strings.HasPrefix(out, "export FENCELOCK_SERVER=127.0.0.1:17271,127.0.0.1:17272,127.0.0.1:17273") {
		t.Fatalf("three-nodes.sh up: %v, output %q", err, out)
	}
	env := []string{strings.TrimPrefix(strings.TrimSpace(out), "export ")}
	var st string
	code := -1
	for deadline := time.Now().Add(15 * time.Second); code != 0 && time.Now().Before(deadline); {
		st, code = testproc.Run(ctx, t, env, "status")
		time.Sleep(100 * time.Millisecond)
	}
	if code != 0 || strings.Count(st, " ok\n") != 3 {
		t.Fatalf("status of the deploy/ cluster: exit %d\n%s", code, st)
	}
	if _, err := script("down"); err != nil {
		t.Fatal(err)
	}
	if _, code := testproc.Run(ctx, t, env, "status"); code == 0 {
		t.Errorf("status after three-nodes.sh down: exit 0, want a failure")
	}
}

func TestServe_AFirstStartLogsNoWarning(t *testing.T) {
	srv := testproc.StartServer(t, "--log-level", "info")
	if log := srv.Log(); strings.Contains(log, "level=WARN") || strings.Contains(log, "level=ERROR") {
		t.Errorf("a normal first start logged a warning or an error:\n%s", log)
	}
}
