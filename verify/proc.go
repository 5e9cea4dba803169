package verify

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// handedOut holds the ports freeAddr returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freeAddr returns a loopback address whose port was free a moment ago. A
// node binds it only when it starts, so the port comes from below Linux's
// ephemeral range (32768+, where the kernel picks ports for port-0 listens
// and outgoing connections, which could take it meanwhile) and from a range
// (10000-19999) that the test helpers, which pick 20000-31999, do not use.
func freeAddr() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for i := 0; i < 1000; i++ {
		port := 10000 + rand.IntN(10000)
		if handedOut.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		ln.Close()
		handedOut.ports[port] = true
		return ln.Addr().String(), nil
	}
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
	// external: a node of an existing deployment. The harness starts,
	// kills or signals it only through its hook (Config.NemesisExec), and
	// not at all without one.
	external bool
	hook     *hook   // nil: no NemesisExec
	index    int     // in the cluster, for the hook
	tls      *tlsRun // nil: plain HTTP and TCP

	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *os.File
	down bool // an external node the hook killed
}

func (n *node) start(ctx context.Context) error {
	if n.external {
		return n.startExternal(ctx)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("start node %s: %w", n.id, err)
	}
	args := append([]string{"serve", "--listen", n.addr, "--raft-addr", n.raftAddr, "--data-dir", n.dataDir,
		"--node-id", n.id, "--log-level", "info"}, n.args...)
	cmd := exec.Command(n.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start node %s: %w", n.id, err)
	}
	n.cmd, n.log = cmd, f
	if err := n.waitHealthy(ctx); err != nil {
		return fmt.Errorf("%w (log: %s)%s", err, n.logPath, logTail(n.logPath, 15))
	}
	return nil
}

// waitHealthy waits up to 20 s for the node's /healthz.
func (n *node) waitHealthy(ctx context.Context) error {
	hc, scheme := n.tls.httpGet()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		resp, err := hc.Get(scheme + n.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("node %s on %s not healthy after 20s", n.id, n.addr)
}

// kill9 kills the process with SIGKILL (which ends a stopped process too)
// and waits for it; an external node, through the hook.
func (n *node) kill9() error {
	if n.external {
		return n.killExternal()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return nil
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.log.Close()
	n.cmd = nil
	return nil
}

// signal sends SIGSTOP or SIGCONT; to an external node, through the hook
// (pause, resume).
func (n *node) signal(sig syscall.Signal) error {
	if n.external {
		return n.signalExternal(sig)
	}
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
	return n.cmd != nil || n.external && !n.down
}

// readyLeader reports whether /readyz?leader answers 200: the node leads and has
// re-armed its leases.
func (n *node) readyLeader() bool {
	if !n.running() {
		return false
	}
	hc, scheme := n.tls.httpGet()
	resp, err := hc.Get(scheme + n.addr + "/readyz?leader")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// cluster is n nodes of one Raft group with a proxy on every directed Raft
// link i->j (the connections node i opens to node j). An existing
// deployment has no proxies: its partitions, if any, go through the hook.
type cluster struct {
	nodes []*node
	links map[[2]int]*netproxy.Proxy
	hook  *hook // an existing deployment's NemesisExec, or nil

	mu       sync.Mutex
	isolated map[int]bool // external nodes the hook isolated
}

func nodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

func startCluster(ctx context.Context, bin, dir string, n int, extra []string, tr *tlsRun) (*cluster, error) {
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
		nd := &node{id: nodeID(i), bin: bin, addr: api, raftAddr: raft, tls: tr,
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
		nd.args = append(append(nd.args, extra...), tr.serveArgs()...)
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

// externalCluster is an existing deployment, reached at its API addresses,
// with its fault hook h (nil: none).
func externalCluster(servers []string, h *hook) *cluster {
	c := &cluster{links: map[[2]int]*netproxy.Proxy{}, hook: h, isolated: map[int]bool{}}
	for i, s := range servers {
		c.nodes = append(c.nodes, &node{id: fmt.Sprintf("server%d", i+1), addr: s, external: true, hook: h, index: i})
	}
	return c
}

// external reports whether c is an existing deployment.
func (c *cluster) external() bool { return len(c.nodes) > 0 && c.nodes[0].external }

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
func (c *cluster) isolate(i int) error {
	if c.external() {
		return c.isolateExternal(i)
	}
	for k, p := range c.links {
		if k[0] == i || k[1] == i {
			p.Block()
		}
	}
	return nil
}

// cutOutbound cuts only the connections node i opens to its peers: its
// AppendEntries and vote requests hang, while its peers still reach it.
// The hook has no one-way cut: an external node is isolated instead.
func (c *cluster) cutOutbound(i int) error {
	if c.external() {
		return c.isolateExternal(i)
	}
	for k, p := range c.links {
		if k[0] == i {
			p.Block()
		}
	}
	return nil
}

// split cuts every link between the two sides of a partition. On an
// external cluster every node of side is isolated (for three nodes, the
// same partition).
func (c *cluster) split(side map[int]bool) error {
	if c.external() {
		for i := range side {
			if err := c.isolateExternal(i); err != nil {
				return err
			}
		}
		return nil
	}
	for k, p := range c.links {
		if side[k[0]] != side[k[1]] {
			p.Block()
		}
	}
	return nil
}

// heal restores every link.
func (c *cluster) heal() error {
	if c.external() {
		return c.healExternal()
	}
	for _, p := range c.links {
		p.Unblock()
	}
	return nil
}

// close kills the harness's own nodes; an existing deployment's are left
// running.
func (c *cluster) close() {
	for _, nd := range c.nodes {
		if nd.external {
			continue
		}
		_ = nd.signal(syscall.SIGCONT)
		_ = nd.kill9()
	}
	for _, p := range c.links {
		p.Close()
	}
}

// The log lines a node writes when it restores a snapshot (server.observer).
const (
	logLocalRestore = `msg="restored local snapshot"`
	logInstalled    = `msg="installed snapshot from leader"`
)

// restoresFromLogs counts the snapshot restores in the nodes' log files,
// which span every restart of the node.
func (c *cluster) restoresFromLogs() (local, installed int) {
	for _, nd := range c.nodes {
		b, err := os.ReadFile(nd.logPath)
		if err != nil {
			continue
		}
		local += bytes.Count(b, []byte(logLocalRestore))
		installed += bytes.Count(b, []byte(logInstalled))
	}
	return local, installed
}

// storeProc is a "fencelock store" process.
type storeProc struct {
	url string
	cmd *exec.Cmd
	log *os.File
}

func startStore(ctx context.Context, bin, dir string) (*storeProc, error) {
	f, err := os.Create(filepath.Join(dir, "store.log"))
	if err != nil {
		return nil, fmt.Errorf("start store: %w", err)
	}
	args := []string{"store", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "store")}
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

// logTail returns the last lines of the log at path, indented, for an error
// message (a test's temporary files are gone when someone reads it).
func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	all = all[max(0, len(all)-lines):]
	return "; its last lines:\n    " + strings.Join(all, "\n    ")
}
