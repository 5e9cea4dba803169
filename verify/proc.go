package verify

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/internal/netproxy"
)

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// node is one "fencelock serve" process. Its output goes to a log file.
type node struct {
	id       string
	bin      string
	addr     string // API
	raftAddr string
	dataDir  string
	logPath  string
	args     []string
	// external: a node of an existing deployment; the harness only talks
	// to it (it never starts, kills or signals it).
	external bool

	mu  sync.Mutex
	cmd *exec.Cmd
	log *os.File
}

func (n *node) start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil || n.external {
		return nil
	}
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("start node %s: %w", n.id, err)
	}
	args := append([]string{"serve", "--listen", n.addr, "--raft-addr", n.raftAddr, "--data-dir", n.dataDir,
		"--node-id", n.id, "--log-level", "warn"}, n.args...)
	cmd := exec.Command(n.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start node %s: %w", n.id, err)
	}
	n.cmd, n.log = cmd, f
	hc := http.Client{Timeout: 300 * time.Millisecond}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		resp, err := hc.Get("http://" + n.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("node %s on %s not healthy after 20s (log: %s)", n.id, n.addr, n.logPath)
}

// kill9 kills the process with SIGKILL (after SIGCONT, in case it was
// stopped) and waits for it.
func (n *node) kill9() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.log.Close()
	n.cmd = nil
}

func (n *node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("node %s is not running", n.id)
	}
	return n.cmd.Process.Signal(sig)
}

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil || n.external
}

// readyLeader reports whether /readyz answers 200: the node leads and has
// re-armed its leases.
func (n *node) readyLeader() bool {
	if !n.running() {
		return false
	}
	hc := http.Client{Timeout: 300 * time.Millisecond}
	resp, err := hc.Get("http://" + n.addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// cluster is n nodes of one Raft group with a proxy on every directed Raft
// link i->j (the connections node i opens to node j).
type cluster struct {
	nodes []*node
	links map[[2]int]*netproxy.Proxy
}

func nodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

func startCluster(ctx context.Context, bin, dir string, n int, extra []string) (*cluster, error) {
	c := &cluster{links: map[[2]int]*netproxy.Proxy{}}
	var boot []string
	for i := 0; i < n; i++ {
		api, err := freeAddr()
		if err != nil {
			return nil, err
		}
		raft, err := freeAddr()
		if err != nil {
			return nil, err
		}
		nd := &node{id: nodeID(i), bin: bin, addr: api, raftAddr: raft,
			dataDir: filepath.Join(dir, nodeID(i)), logPath: filepath.Join(dir, nodeID(i)+".log")}
		c.nodes = append(c.nodes, nd)
		boot = append(boot, nd.id+"="+raft)
	}
	for i, nd := range c.nodes {
		var over []string
		for j, t := range c.nodes {
			if i == j {
				continue
			}
			p, err := netproxy.Listen(t.raftAddr)
			if err != nil {
				c.close()
				return nil, err
			}
			c.links[[2]int{i, j}] = p
			over = append(over, t.id+"="+p.Addr)
		}
		nd.args = []string{"--heartbeat-timeout", "500ms", "--election-timeout", "500ms"}
		if n > 1 {
			nd.args = append(nd.args, "--bootstrap", strings.Join(boot, ","), "--raft-peer-addrs", strings.Join(over, ","))
		}
		nd.args = append(nd.args, extra...)
	}
	for _, nd := range c.nodes {
		if err := nd.start(ctx); err != nil {
			c.close()
			return nil, err
		}
	}
	if _, err := c.waitLeader(ctx, -1, 30*time.Second); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// externalCluster is an existing deployment, reached at its API addresses.
func externalCluster(servers []string) *cluster {
	c := &cluster{links: map[[2]int]*netproxy.Proxy{}}
	for i, s := range servers {
		c.nodes = append(c.nodes, &node{id: fmt.Sprintf("server%d", i+1), addr: s, external: true})
	}
	return c
}

func (c *cluster) endpoints() []string {
	var out []string
	for _, nd := range c.nodes {
		out = append(out, nd.addr)
	}
	return out
}

// leader returns the index of a ready leader, or -1.
func (c *cluster) leader() int {
	for i, nd := range c.nodes {
		if nd.readyLeader() {
			return i
		}
	}
	return -1
}

// waitLeader waits for a ready leader other than node not (-1: any).
func (c *cluster) waitLeader(ctx context.Context, not int, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for i, nd := range c.nodes {
			if i != not && nd.readyLeader() {
				return i, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1, fmt.Errorf("no ready leader (other than %d) within %v", not, timeout)
}

// isolate cuts every Raft link to and from node i.
func (c *cluster) isolate(i int) {
	for k, p := range c.links {
		if k[0] == i || k[1] == i {
			p.Block()
		}
	}
}

// cutOutbound cuts only the connections node i opens to its peers: its
// AppendEntries and vote requests hang, while its peers still reach it.
func (c *cluster) cutOutbound(i int) {
	for k, p := range c.links {
		if k[0] == i {
			p.Block()
		}
	}
}

// split cuts every link between the two sides of a partition.
func (c *cluster) split(side map[int]bool) {
	for k, p := range c.links {
		if side[k[0]] != side[k[1]] {
			p.Block()
		}
	}
}

func (c *cluster) heal() {
	for _, p := range c.links {
		p.Unblock()
	}
}

func (c *cluster) close() {
	for _, nd := range c.nodes {
		_ = nd.signal(syscall.SIGCONT)
		nd.kill9()
	}
	for _, p := range c.links {
		p.Close()
	}
}

// storeProc is a "fencelock store" process.
type storeProc struct {
	url string
	cmd *exec.Cmd
	log *os.File
}

func startStore(ctx context.Context, bin, dir string, noFencing bool) (*storeProc, error) {
	f, err := os.Create(filepath.Join(dir, "store.log"))
	if err != nil {
		return nil, fmt.Errorf("start store: %w", err)
	}
	args := []string{"store", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "store")}
	if noFencing {
		args = append(args, "--no-fencing")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = f
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("start store: %w", err)
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start store: %w", err)
	}
	s := &storeProc{cmd: cmd, log: f}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f, line)
			if u, ok := strings.CutPrefix(line, "listening on "); ok && !sent {
				found <- strings.TrimSpace(u)
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case u, ok := <-found:
		if !ok {
			s.close()
			return nil, errors.New("start store: it exited before listening (see store.log)")
		}
		s.url = u
		return s, nil
	case <-time.After(20 * time.Second):
	case <-ctx.Done():
	}
	s.close()
	return nil, errors.New("start store: not listening after 20s (see store.log)")
}

func (s *storeProc) close() {
	if s.cmd == nil {
		return // an existing store, not ours
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.log.Close()
}
