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

func runLock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("lock", "lock NAME [flags] -- COMMAND [ARGS...]\n\n"+
		"Runs COMMAND while holding lock NAME, like etcdctl lock or consul lock.\n"+
		"COMMAND gets FENCELOCK_LOCK, FENCELOCK_TOKEN, FENCELOCK_LEASE_ID and\n"+
		"FENCELOCK_SEQUENCER (the grant's signed proof, valid for the first lease)\n"+
		"in its environment: attach FENCELOCK_TOKEN to every write it makes. If the lease\n"+
		"is lost, COMMAND gets SIGTERM (then SIGKILL after --kill-after). The lock\n"+
		"is released when COMMAND exits; fencelock exits with COMMAND's status (a\n"+
		"COMMAND stopped by the SIGTERM of a lost lease: 143, or its own).\n\n"+
		"Unless fencelock runs on a terminal, COMMAND runs in a process group of its\n"+
		"own: signals reach everything it started, and after a lost lease whatever\n"+
		"is left of the group when COMMAND exits is killed. If fencelock itself dies,\n"+
		"COMMAND gets SIGTERM (Linux).", stderr)
	newClient := clientFlags(fs)
	ttl := fs.Duration("ttl", client.DefaultTTL, "lease TTL; renewed every TTL/3 while COMMAND runs")
	holder := fs.String("holder", "", "label of the grant, shown by describe (default host/pid)")
	wait := &waitFlag{forever: true}
	fs.Var(wait, "wait", "how long to wait for the lock: a duration, 0 to fail at once if held, or forever")
	killAfter := fs.Duration("kill-after", 10*time.Second, "after SIGTERM on lease loss, SIGKILL COMMAND if still running this long")
	name, rest, err := splitName(fs, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usageErr("lock: no COMMAND given: fencelock lock NAME -- COMMAND [ARGS...]")
	}
	if *ttl <= 0 {
		return usageErr("--ttl %v: want a positive duration", *ttl)
	}
	if *killAfter < 0 {
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
	release := func() {
		// After the TTL the grant has expired anyway; do not wait longer.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(5*time.Second, *ttl))
		defer cancel()
		if err := l.Release(rctx); err != nil {
			fmt.Fprintln(stderr, "fencelock: release:", err)
		}
	}

	cmd := exec.Command(rest[0], rest[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(),
		"FENCELOCK_LOCK="+name,
		"FENCELOCK_TOKEN="+l.Token().String(),
		"FENCELOCK_LEASE_ID="+string(l.LeaseID()),
		"FENCELOCK_SEQUENCER="+l.Sequencer())
	// On a terminal COMMAND stays in the terminal's process group, so that
	// it can read from it and Ctrl-C reaches it directly; elsewhere (cron,
	// a service manager, a script) it leads a group of its own, so that a
	// lost lease stops the processes it started too, not only COMMAND.
	group := !onTerminal(os.Stdin)
	cmd.SysProcAttr = commandAttr(group)
	// The parent-death signal is tied to the thread that starts COMMAND:
	// keep that thread until COMMAND is waited for.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		release()
		return fmt.Errorf("start %s: %w", rest[0], err)
	}
	signalCommand := func(sig os.Signal) {
		if s, ok := sig.(syscall.Signal); ok && group {
			_ = syscall.Kill(-cmd.Process.Pid, s)
			return
		}
		_ = cmd.Process.Signal(sig)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var killTimer <-chan time.Time
	lost := l.Done()
	leaseLost := false
	for {
		select {
		case sig := <-sigs:
			if sig == os.Interrupt && !group {
				// The terminal sent Ctrl-C to COMMAND too: once is enough.
				continue
			}
			signalCommand(sig) // pass it on; we exit when COMMAND does
		case <-lost:
			lost = nil
			if errors.Is(l.Err(), client.ErrReleased) {
				continue
			}
			leaseLost = true
			fmt.Fprintf(stderr, "fencelock: lease on %q lost (%v): sending SIGTERM to %s\n", name, l.Err(), rest[0])
			signalCommand(syscall.SIGTERM)
			killTimer = time.After(*killAfter)
		case <-killTimer:
			signalCommand(syscall.SIGKILL)
		case err := <-exited:
			if leaseLost && group {
				// What COMMAND started still runs with a token that is
				// no longer good.
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
			release()
			return exitStatus(err)
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
