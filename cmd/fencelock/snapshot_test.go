package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/sequencer"
)

// grantAndRelease takes and releases lock n times through addrs and returns
// the last token.
func grantAndRelease(t *testing.T, addrs []string, lock string, n int) fencelock.Token {
	t.Helper()
	c, err := client.New(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var last fencelock.Token
	for range n {
		l, err := c.Acquire(t.Context(), lock)
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// TestSnapshot_RestoredTokensAreAboveEveryOldToken: tokens up to T1, a
// backup, more tokens up to T2, the cluster wiped, the backup restored
// into fresh data dirs (one node, then three): the first new token is above
// T2, and a resource that accepted T2 accepts it.
func TestSnapshot_RestoredTokensAreAboveEveryOldToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	old := testproc.StartServer(t)
	t1 := grantAndRelease(t, []string{old.Addr}, "reports", 3)
	file := filepath.Join(t.TempDir(), "backup.fls")
	out, code := testproc.Run(ctx, t, nil, "snapshot", "save", file, "--server", old.Addr)
	if code != 0 || !strings.Contains(out, "saved "+file) {
		t.Fatalf("snapshot save exited %d:\n%s", code, out)
	}
	t2 := grantAndRelease(t, []string{old.Addr}, "reports", 5)
	if t2 <= t1 {
		t.Fatalf("T2 %d not above T1 %d", t2, t1)
	}
	res := &fence.MemoryResource{}
	if _, err := res.Put(ctx, "reports", t2, "report.pdf", []byte("T2")); err != nil {
		t.Fatal(err)
	}
	old.Kill9()
	if err := os.RemoveAll(old.DataDir); err != nil {
		t.Fatal(err)
	}

	out, code = testproc.Run(ctx, t, nil, "snapshot", "inspect", file, "--json")
	if code != 0 || !strings.Contains(out, `"epoch":0`) {
		t.Fatalf("snapshot inspect exited %d:\n%s", code, out)
	}

	// One node.
	one := testproc.AttachServer(t, &testproc.Server{Addr: testproc.FreeAddr(t), RaftAddr: testproc.FreeAddr(t), DataDir: t.TempDir()})
	out, code = testproc.Run(ctx, t, nil, "snapshot", "restore", file, "--data-dir", one.DataDir, "--raft-addr", one.RaftAddr)
	if code != 0 || !strings.Contains(out, "epoch 1") {
		t.Fatalf("snapshot restore exited %d:\n%s", code, out)
	}
	one.Start()
	checkNewEra(t, []string{one.Addr}, res, t2, 1)
	one.Kill9()

	// Three nodes, each restored from the same backup with the same voters.
	// A second restore of one backup must name an epoch above the first's:
	// the resource accepted tokens of the first restored cluster.
	var nodes []*testproc.Server
	var boot []string
	for i := range 3 {
		s := testproc.AttachServer(t, &testproc.Server{Addr: testproc.FreeAddr(t), RaftAddr: testproc.FreeAddr(t), DataDir: t.TempDir(),
			Follower: true, Args: append([]string{"--node-id", testproc.NodeID(i)}, testproc.DefaultClusterFlags...)})
		nodes = append(nodes, s)
		boot = append(boot, testproc.NodeID(i)+"="+s.RaftAddr)
	}
	var addrs []string
	for i, s := range nodes {
		out, code = testproc.Run(ctx, t, nil, "snapshot", "restore", file, "--data-dir", s.DataDir,
			"--node-id", testproc.NodeID(i), "--raft-addr", s.RaftAddr, "--bootstrap", strings.Join(boot, ","), "--epoch", "2")
		if code != 0 {
			t.Fatalf("snapshot restore of %s exited %d:\n%s", testproc.NodeID(i), code, out)
		}
		s.Start()
		addrs = append(addrs, s.Addr)
	}
	checkNewEra(t, addrs, res, t2, 2)
}

// checkNewEra acquires "reports" on the restored cluster: its token must be
// above t2, in epoch, res must accept it, and its sequencer must verify
// with the cluster's keys.
func checkNewEra(t *testing.T, addrs []string, res *fence.MemoryResource, t2 fencelock.Token, epoch uint64) {
	t.Helper()
	c, err := client.New(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "reports")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	if l.Token() <= t2 || l.Token().Epoch() != epoch {
		t.Fatalf("the restored cluster's first token %d (epoch %d), want above %d, in epoch %d", l.Token(), l.Token().Epoch(), t2, epoch)
	}
	if _, err := res.Put(ctx, "reports", l.Token(), "report.pdf", []byte(fmt.Sprint(l.Token()))); err != nil {
		t.Fatalf("the resource that accepted T2 refused the new token: %v", err)
	}
	if _, err := res.Put(ctx, "reports", t2, "report.pdf", []byte("T2 again")); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("T2 after the new token: %v, want stale", err)
	}
	keys, err := admin.New(c, "").Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&sequencer.Verifier{Keys: keys.Keys}).Verify(l.Sequencer(), "reports"); err != nil || keys.Epoch != epoch {
		t.Fatalf("the restored cluster's sequencer: %v (keys %+v)", err, keys)
	}
	if cur, tok, err := c.CheckSequencer(ctx, l.Sequencer()); !cur || tok != l.Token() || err != nil {
		t.Fatalf("CheckSequencer of the held grant: %v, %d, %v; want current, token %d", cur, tok, err, l.Token())
	}
}

// TestSnapshot_LastEpochTokensAreExact: a cluster restored into the last
// epoch issues tokens near 2^53; the JSON API and the CLI's JSON carry them
// exactly, and one below is refused by a resource.
func TestSnapshot_LastEpochTokensAreExact(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := testproc.StartServer(t)
	grantAndRelease(t, []string{old.Addr}, "x", 1)
	file := filepath.Join(t.TempDir(), "backup.fls")
	if out, code := testproc.Run(ctx, t, nil, "snapshot", "save", file, "--server", old.Addr); code != 0 {
		t.Fatalf("snapshot save exited %d:\n%s", code, out)
	}
	old.Kill9()
	s := testproc.AttachServer(t, &testproc.Server{Addr: testproc.FreeAddr(t), RaftAddr: testproc.FreeAddr(t), DataDir: t.TempDir()})
	epoch := fmt.Sprint(fencelock.MaxTokenEpoch)
	if out, code := testproc.Run(ctx, t, nil, "snapshot", "restore", file, "--data-dir", s.DataDir, "--raft-addr", s.RaftAddr, "--epoch", epoch); code != 0 {
		t.Fatalf("snapshot restore exited %d:\n%s", code, out)
	}
	s.Start()

	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr+"/fencelock.v1.LockService/Acquire",
		strings.NewReader(`{"name":"reports","ttl":"10s"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Grant struct {
			Token string `json:"token"`
		} `json:"grant"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		t.Fatal(err)
	}
	tok, err := fencelock.ParseToken(ans.Grant.Token)
	if err != nil || tok.Epoch() != fencelock.MaxTokenEpoch || tok > fencelock.MaxToken {
		t.Fatalf("JSON API token %q (%v): want one of epoch %d, at most %d", ans.Grant.Token, err, fencelock.MaxTokenEpoch, fencelock.MaxToken)
	}
	out, code := testproc.Run(ctx, t, nil, "acquire", "other", "--json", "--server", s.Addr)
	var g struct {
		Token uint64 `json:"token"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &g) != nil || fencelock.Token(g.Token) <= tok || fencelock.Token(g.Token).Epoch() != fencelock.MaxTokenEpoch {
		t.Fatalf("acquire --json exited %d: %s; want a token above %d in the last epoch", code, out, tok)
	}
	res := &fence.MemoryResource{}
	if _, err := res.Put(ctx, "d", fencelock.Token(g.Token), "k", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Put(ctx, "d", fencelock.Token(g.Token)-1, "k", nil); !errors.Is(err, fencelock.ErrStaleToken) {
		t.Fatalf("one below the last epoch's token: %v, want stale", err)
	}
}

// TestKeys_rotateInTwoSteps: keys prints the cluster's keys; a first
// rotate adds a pending key, a second makes it sign.
func TestKeys_rotateInTwoSteps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := testproc.StartServer(t)
	roles := func(args ...string) map[string]string {
		t.Helper()
		out, code := testproc.Run(ctx, t, nil, append([]string{"keys", "--json", "--server", s.Addr}, args...)...)
		var k admin.Keys
		if code != 0 || json.Unmarshal([]byte(out), &k) != nil || k.ClusterID == "" {
			t.Fatalf("keys %v exited %d: %s", args, code, out)
		}
		count := map[string]string{}
		for _, key := range k.Keys {
			count[k.Roles[key.ID]] += key.ID
		}
		return count
	}
	first := roles()
	if len(first) != 1 || first["signing"] == "" {
		t.Fatalf("a new cluster's keys: %v, want one signing key", first)
	}
	if r := roles("rotate"); r["signing"] != first["signing"] || r["pending"] == "" {
		t.Fatalf("after one rotate: %v, want the same signing key and a pending one", r)
	}
	if r := roles("rotate"); r["valid"] != first["signing"] || r["signing"] == "" || r["signing"] == first["signing"] || r["pending"] != "" {
		t.Fatalf("after the second rotate: %v, want the new key signing and %s valid", r, first["signing"])
	}
}

// TestSnapshot_RestoredVotersSignWithOneKey: a backup restored into three
// voters (with the same options) and started; a resource trusts the keys
// that "fencelock keys --json" prints on the leader. After the leader is
// killed, the new leader's sequencers verify with those same keys.
func TestSnapshot_RestoredVotersSignWithOneKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	old := testproc.StartServer(t)
	grantAndRelease(t, []string{old.Addr}, "reports", 2)
	file := filepath.Join(t.TempDir(), "backup.fls")
	if out, code := testproc.Run(ctx, t, nil, "snapshot", "save", file, "--server", old.Addr); code != 0 {
		t.Fatalf("snapshot save exited %d:\n%s", code, out)
	}
	old.Kill9()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"new cluster id", []string{"--new-cluster-id", "staging"}},
		{"same cluster id", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := restoreVoters(ctx, t, file, tc.args...)
			leader := waitLeader(t, nodes, -1)
			out, code := testproc.Run(ctx, t, nil, "keys", "--json", "--server", nodes[leader].Addr)
			keys, err := sequencer.ReadKeys(strings.NewReader(out))
			if code != 0 || err != nil {
				t.Fatalf("keys --json exited %d (%v):\n%s", code, err, out)
			}
			resource := &sequencer.Verifier{Keys: keys}
			acquireAndVerify(ctx, t, nodes[leader].Addr, resource, "before the failover")
			nodes[leader].Kill9()
			next := waitLeader(t, nodes, leader)
			acquireAndVerify(ctx, t, nodes[next].Addr, resource, "after the failover")
		})
	}
}

// restoreVoters restores file into three new data dirs with one bootstrap
// list and extra restore flags, and starts the three nodes.
func restoreVoters(ctx context.Context, t *testing.T, file string, extra ...string) []*testproc.Server {
	t.Helper()
	var nodes []*testproc.Server
	var boot []string
	for i := range 3 {
		s := testproc.AttachServer(t, &testproc.Server{Addr: testproc.FreeAddr(t), RaftAddr: testproc.FreeAddr(t), DataDir: t.TempDir(),
			Follower: true, Args: append([]string{"--node-id", testproc.NodeID(i)}, testproc.DefaultClusterFlags...)})
		nodes = append(nodes, s)
		boot = append(boot, testproc.NodeID(i)+"="+s.RaftAddr)
	}
	for i, s := range nodes {
		args := append([]string{"snapshot", "restore", file, "--data-dir", s.DataDir, "--node-id", testproc.NodeID(i),
			"--raft-addr", s.RaftAddr, "--bootstrap", strings.Join(boot, ",")}, extra...)
		if out, code := testproc.Run(ctx, t, nil, args...); code != 0 {
			t.Fatalf("snapshot restore of %s exited %d:\n%s", testproc.NodeID(i), code, out)
		}
	}
	for _, s := range nodes {
		s.Start()
	}
	return nodes
}

// waitLeader waits up to 30s for a running node other than not (-1: any)
// to be a ready leader and returns its index.
func waitLeader(t *testing.T, nodes []*testproc.Server, not int) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for i, s := range nodes {
			if i != not && s.Running() && s.IsReadyLeader() {
				return i
			}
		}
	}
	t.Fatalf("no ready leader (other than node %d) within 30s", not)
	return -1
}

// acquireAndVerify acquires "reports" on addr and checks its sequencer for
// a write with its token as a resource with the verifier v would.
func acquireAndVerify(ctx context.Context, t *testing.T, addr string, v *sequencer.Verifier, when string) {
	t.Helper()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "reports")
	if err != nil {
		t.Fatalf("acquire %s: %v", when, err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	if _, err := v.VerifyWrite(l.Sequencer(), "reports", l.Token()); err != nil {
		t.Fatalf("the sequencer of token %d, %s, with the keys the resource trusts: %v", l.Token(), when, err)
	}
}
