package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencelock/fencelock/client"
)

// lockHelp is the help of "fencelock lock".
const lockHelp = "lock NAME [flags] -- COMMAND [ARGS...]\n\n" +
	"Runs COMMAND while holding lock NAME, like etcdctl lock or consul lock.\n" +
	"COMMAND gets FENCELOCK_LOCK, FENCELOCK_TOKEN, FENCELOCK_LEASE_ID and\n" +
	"FENCELOCK_SEQUENCER (the grant's signed proof, valid for the first lease)\n" +
	"in its environment: attach FENCELOCK_TOKEN to every write it makes. If the lease\n" +
	"is lost, COMMAND gets SIGTERM (then SIGKILL after --kill-after). The lock\n" +
	"is released when COMMAND exits; fencelock exits with COMMAND's status (a\n" +
	"COMMAND stopped by the SIGTERM of a lost lease: 143, or its own).\n\n" +
	"Unless fencelock runs on a terminal, COMMAND runs in a process group of its\n" +
	"own: signals reach everything it started, and after a lost lease whatever\n" +
	"is left of the group when COMMAND exits is killed. If fencelock itself dies,\n" +
	"COMMAND gets SIGTERM (Linux)."

func runLock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("lock", lockHelp, stderr)
	newClient := clientFlags(fs)
	ttl := fs.Duration("ttl", client.DefaultTTL, "lease TTL; renewed every TTL/3 while COMMAND runs")
	holder := fs.String("holder", "", "label of the grant, shown by describe (default host/pid)")
	wait := &waitFlag{forever: true}
	fs.Var(wait, "wait", "how long to wait for the lock: a duration, 0 to fail at once if held, or forever")
	killAfter := fs.Duration("kill-after", 10*time.Second, "after SIGTERM on lease loss, SIGKILL COMMAND if still running this long")
	name, rest, err := splitName(fs, args)
	switch {
	case err != nil:
		return err
	case len(rest) == 0:
		return usageErr("lock: no COMMAND given: fencelock lock NAME -- COMMAND [ARGS...]")
	case *ttl <= 0:
		return usageErr("--ttl %v: want a positive duration", *ttl)
	case *killAfter < 0:
		return usageErr("--kill-after %v: want 0 (SIGKILL at once) or more", *killAfter)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := c.Acquire(ctx, name, acquireOptions(wait, *ttl, *holder)...)
	if err != nil {
		return err
	}
	lc := &lockedCommand{l: l, name: name, args: rest, ttl: *ttl, killAfter: *killAfter, stderr: stderr}
	return lc.run(ctx, stdout)
}

// lockedCommand is COMMAND run under a held lock.
type lockedCommand struct {
	l              *client.Lock
	name           string
	args           []string
	ttl, killAfter time.Duration
	stderr         io.Writer
	cmd            *exec.Cmd
	group          bool // COMMAND leads a process group of its own
}

// release releases the lock, waiting at most the TTL (after it the grant
// has expired anyway).
func (lc *lockedCommand) release(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(5*time.Second, lc.ttl))
	defer cancel()
	if err := lc.l.Release(rctx); err != nil {
		fmt.Fprintln(lc.stderr, "fencelock: release:", err)
	}
}

// run starts COMMAND, watches it and the lease until COMMAND exits, then
// releases the lock and returns COMMAND's exit status.
func (lc *lockedCommand) run(ctx context.Context, stdout io.Writer) error {
	l := lc.l
	cmd := exec.Command(lc.args[0], lc.args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, lc.stderr
	cmd.Env = append(os.Environ(),
		"FENCELOCK_LOCK="+lc.name,
		"FENCELOCK_TOKEN="+l.Token().String(),
		"FENCELOCK_LEASE_ID="+string(l.LeaseID()),
		"FENCELOCK_SEQUENCER="+l.Sequencer())
	// On a terminal COMMAND stays in the terminal's process group, so that
	// it can read from it and Ctrl-C reaches it directly; elsewhere (cron,
	// a service manager, a script) it leads a group of its own, so that a
	// lost lease stops the processes it started too, not only COMMAND.
	lc.group = !onTerminal(os.Stdin)
	cmd.SysProcAttr = commandAttr(lc.group)
	lc.cmd = cmd
	// The parent-death signal is tied to the thread that starts COMMAND:
	// keep that thread until COMMAND is waited for.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		lc.release(ctx)
		return fmt.Errorf("start %s: %w", lc.args[0], err)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	err := lc.watch(sigs, exited)
	lc.release(ctx)
	return exitStatus(err)
}

// signal sends sig to COMMAND's process group, or to COMMAND alone.
func (lc *lockedCommand) signal(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && lc.group {
		_ = syscall.Kill(-lc.cmd.Process.Pid, s)
		return
	}
	_ = lc.cmd.Process.Signal(sig)
}

// watch passes signals on to COMMAND and stops it when the lease is lost,
// until COMMAND exits; it returns COMMAND's Wait error.
func (lc *lockedCommand) watch(sigs <-chan os.Signal, exited <-chan error) error {
	var killTimer <-chan time.Time
	lost := lc.l.Done()
	leaseLost := false
	for {
		select {
		case sig := <-sigs:
			if sig == os.Interrupt && !lc.group {
				// The terminal sent Ctrl-C to COMMAND too: once is enough.
				continue
			}
			lc.signal(sig) // pass it on; we exit when COMMAND does
		case <-lost:
			lost = nil
			if errors.Is(lc.l.Err(), client.ErrReleased) {
				continue
			}
			leaseLost = true
			fmt.Fprintf(lc.stderr, "fencelock: lease on %q lost (%v): sending SIGTERM to %s\n", lc.name, lc.l.Err(), lc.args[0])
			lc.signal(syscall.SIGTERM)
			killTimer = time.After(lc.killAfter)
		case <-killTimer:
			lc.signal(syscall.SIGKILL)
		case err := <-exited:
			if leaseLost && lc.group {
				// What COMMAND started still runs with a token that is
				// no longer good.
				_ = syscall.Kill(-lc.cmd.Process.Pid, syscall.SIGKILL)
			}
			return err
		}
	}
}

// onTerminal reports whether f is a terminal.
func onTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// commandAttr starts COMMAND in a process group of its own (group) and
// asks the kernel to send it SIGTERM if fencelock dies.
func commandAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGTERM}
}

// exitStatus turns a finished command's error into the status fencelock
// exits with: the command's own, or 128+signal.
func exitStatus(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitError{128 + int(ws.Signal())}
	}
	return exitError{ee.ExitCode()}
}
