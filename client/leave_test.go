package client_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/testproc"
)

// TestClient_LeavesANodeThatIsNotTheLeader: a client sent from a follower
// to the leader keeps no connection to the follower, so that many clients
// do not hold twice the connections they use.
func TestClient_LeavesANodeThatIsNotTheLeader(t *testing.T) {
	t.Parallel()
	c := testproc.StartCluster(t, 3)
	l := c.WaitLeader(-1)
	f := (l + 1) % len(c.Nodes)
	cl, err := client.New(c.Nodes[f].Addr, c.Nodes[l].Addr) // the follower first
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lock, err := cl.Acquire(ctx, "x", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // the cluster's readiness probes
	if n := connsTo(t, c.Nodes[l].Addr); n == 0 {
		t.Fatal("no connection to the leader counted: the count does not work")
	}
	for deadline := time.Now().Add(5 * time.Second); connsTo(t, c.Nodes[f].Addr) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the follower %s remain after the client moved to the leader", connsTo(t, c.Nodes[f].Addr), c.Nodes[f].Addr)
		}
	}
}

// connsTo counts this process's established TCP connections to addr.
func connsTo(t *testing.T, addr string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	mine := map[string]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		fh, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// sl local rem st ... inode (the 10th field)
			if len(fs) > 9 && fs[3] == "01" && strings.HasSuffix(fs[2], fmt.Sprintf(":%04X", p)) && mine[fs[9]] {
				n++
			}
		}
		fh.Close()
	}
	return n
}
