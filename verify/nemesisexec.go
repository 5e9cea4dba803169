package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The nemesis hook (Config.NemesisExec, "fencelock verify --nemesis-exec")
// lets the server-fault scenarios run against an existing deployment. The
// harness runs it as
//
//	PATH ACTION NODE-INDEX API-ADDR
//
// where NODE-INDEX is the server's 0-based position in Config.Servers and
// API-ADDR its address there, and ACTION is one of
//
//	kill     kill -9 the server; return once it is dead
//	start    start it again on its data (a no-op if it runs); the harness
//	         then waits for its /healthz
//	pause    freeze it (SIGSTOP)
//	resume   unfreeze it (SIGCONT; a no-op if it runs)
//	isolate  cut its Raft traffic to and from every other server, ideally
//	         by dropping packets (a real partition hangs connections)
//	heal     undo isolate (a no-op if it is not isolated)
//
// Exit status 0 means done; HookUnsupported (3) means the hook does not do
// this action, and the scenarios that need it are skipped; anything else
// is a failure, recorded as a nemesis event. Before a scenario the harness
// calls the idempotent action of each pair (start, resume, heal) on every
// server, to learn whether the hook supports it and to begin from a whole
// cluster. The hook's output goes to nemesis-exec.log in the scenario's
// output directory.

// HookUnsupported is the exit status with which a nemesis hook says it
// does not support an action.
const HookUnsupported = 3

// errUnsupported marks an action the hook does not support.
var errUnsupported = errors.New("not supported by the nemesis hook (exit status 3)")

// hookTimeout bounds one run of the hook.
const hookTimeout = 60 * time.Second

// hook runs Config.NemesisExec.
type hook struct {
	path string
	mu   sync.Mutex
	log  io.Writer // nemesis-exec.log of the running scenario
}

// run runs the hook for action on node i.
func (h *hook) run(ctx context.Context, action string, i int, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, hookTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.path, action, strconv.Itoa(i), addr)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A server the hook starts in the background may keep the hook's
	// output open; the hook's own exit is what counts.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil
	}
	h.mu.Lock()
	if h.log != nil {
		fmt.Fprintf(h.log, "%s $ %s %s %d %s\n%s", time.Now().Format(time.RFC3339Nano), h.path, action, i, addr, out.String())
		if err != nil {
			fmt.Fprintf(h.log, "-> %v\n", err)
		}
	}
	h.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() == HookUnsupported:
		return fmt.Errorf("%s %s: %w", action, addr, errUnsupported)
	case errors.As(err, &ee):
		return fmt.Errorf("nemesis hook %s %d %s: %v: %s", action, i, addr, err, strings.TrimSpace(lastLine(out.String())))
	}
	return fmt.Errorf("nemesis hook %s %d %s: %w", action, i, addr, err)
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// errNoHook is the error of a fault on an existing deployment without a
// hook; the scenarios that inject such faults are skipped before.
var errNoHook = errors.New("an existing deployment's servers are faulted only through --nemesis-exec")

func (n *node) startExternal(ctx context.Context) error {
	if n.hook == nil {
		return nil // nothing to start: it is not ours
	}
	if err := n.hook.run(ctx, "start", n.index, n.addr); err != nil {
		return err
	}
	n.mu.Lock()
	n.down = false
	n.mu.Unlock()
	return n.waitHealthy(ctx)
}

func (n *node) killExternal() error {
	if n.hook == nil {
		return errNoHook
	}
	err := n.hook.run(context.Background(), "kill", n.index, n.addr)
	if err == nil {
		n.mu.Lock()
		n.down = true
		n.mu.Unlock()
	}
	return err
}

func (n *node) signalExternal(sig syscall.Signal) error {
	if n.hook == nil {
		return errNoHook
	}
	switch sig {
	case syscall.SIGSTOP:
		return n.hook.run(context.Background(), "pause", n.index, n.addr)
	case syscall.SIGCONT:
		return n.hook.run(context.Background(), "resume", n.index, n.addr)
	}
	return fmt.Errorf("signal %v: the nemesis hook only pauses and resumes", sig)
}

func (c *cluster) isolateExternal(i int) error {
	if c.hook == nil {
		return errNoHook
	}
	if err := c.hook.run(context.Background(), "isolate", i, c.nodes[i].addr); err != nil {
		return err
	}
	c.mu.Lock()
	c.isolated[i] = true
	c.mu.Unlock()
	return nil
}

func (c *cluster) healExternal() error {
	if c.hook == nil {
		return nil
	}
	c.mu.Lock()
	var which []int
	for i := range c.isolated {
		which = append(which, i)
	}
	c.mu.Unlock()
	var errs error
	for _, i := range which {
		if err := c.hook.run(context.Background(), "heal", i, c.nodes[i].addr); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		c.mu.Lock()
		delete(c.isolated, i)
		c.mu.Unlock()
	}
	return errs
}

// probe runs the idempotent action of each pair the scenario's nemesis
// needs (start, resume, heal) on every server. It returns errUnsupported
// (wrapped) if the hook does not do one, another error if the hook fails.
func (c *cluster) probe(ctx context.Context, needs []string) error {
	for _, a := range needs {
		for i, nd := range c.nodes {
			if err := c.hook.run(ctx, a, i, nd.addr); err != nil {
				return err
			}
			if a == "start" {
				if err := nd.waitHealthy(ctx); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
