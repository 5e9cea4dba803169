package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/client"
)

func runLock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("lock", "lock NAME [flags] -- COMMAND [ARGS...]\n\n"+
		"Runs COMMAND while holding lock NAME, like etcdctl lock or consul lock.\n"+
		"COMMAND gets FENCELOCK_LOCK, FENCELOCK_TOKEN and FENCELOCK_LEASE_ID in its\n"+
		"environment: attach FENCELOCK_TOKEN to every write it makes. If the lease\n"+
		"is lost, COMMAND gets SIGTERM (then SIGKILL after --kill-after). The lock\n"+
		"is released when COMMAND exits; fencelock exits with COMMAND's status.", stderr)
	newClient := clientFlags(fs)
	ttl := fs.Duration("ttl", client.DefaultTTL, "lease TTL; renewed every TTL/3 while COMMAND runs")
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
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := c.Acquire(ctx, name, append(wait.options(), client.WithTTL(*ttl))...)
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
		"FENCELOCK_LEASE_ID="+string(l.LeaseID()))
	if err := cmd.Start(); err != nil {
		release()
		return fmt.Errorf("start %s: %w", rest[0], err)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var killTimer <-chan time.Time
	lost := l.Done()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig) // pass it on; we exit when COMMAND does
		case <-lost:
			lost = nil
			if errors.Is(l.Err(), client.ErrReleased) {
				continue
			}
			fmt.Fprintf(stderr, "fencelock: lease on %q lost (%v): sending SIGTERM to %s\n", name, l.Err(), rest[0])
			_ = cmd.Process.Signal(syscall.SIGTERM)
			killTimer = time.After(*killAfter)
		case <-killTimer:
			_ = cmd.Process.Kill()
		case err := <-exited:
			release()
			return exitStatus(err)
		}
	}
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
