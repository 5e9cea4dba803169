package server_test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
)

// TestRequestID_AnotherProcessMakesItsOwnRequest: two processes use the
// same request id on one lock, the first stopped (SIGSTOP) while it holds
// the grant. A second one that gives up leaves the first one's grant in
// place, and one that waits is granted a higher token once the stopped
// holder's lease ends: never the first one's grant.
func TestRequestID_AnotherProcessMakesItsOwnRequest(t *testing.T) {
	srv := testproc.StartServer(t)
	bin := testproc.Build(t, "github.com/fencelock/fencelock/internal/testproc/waiters")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	args := []string{"-addr", srv.Addr, "-lock", "job", "-n", "1", "-request-id", "job-42", "-ttl", "3s"}
	first, lines := startWaiter(t, bin, args...)
	held := tokenOf(t, <-lines)
	if err := first.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Signal(syscall.SIGCONT)

	out, err := exec.CommandContext(ctx, bin, append(args, "-wait", "300ms")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gave up") {
		t.Fatalf("a second process that waits 300 ms with the same request id: %v: %s; want it to give up", err, out)
	}
	c := newClient(t, srv.Addr)
	if li, err := c.Describe(ctx, "job"); err != nil || li.Token != held {
		t.Fatalf("after the second process gave up: %+v, %v; want the stopped holder's grant %d still in place", li, err, held)
	}

	_, lines2 := startWaiter(t, bin, args...)
	select {
	case l := <-lines2:
		if got := tokenOf(t, l); got <= held {
			t.Fatalf("the second process got token %d, want one above the stopped holder's %d", got, held)
		}
	case <-ctx.Done():
		t.Fatal("the second process was not granted once the stopped holder's lease ended")
	}
}

// startWaiter starts the waiters command and returns its output lines.
func startWaiter(t *testing.T, bin string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return cmd, lines
}

// tokenOf parses a "granted TOKEN" line.
func tokenOf(t *testing.T, line string) fencelock.Token {
	t.Helper()
	s, ok := strings.CutPrefix(line, "granted ")
	n, err := strconv.ParseUint(s, 10, 64)
	if !ok || err != nil {
		t.Fatalf("waiters printed %q, want \"granted TOKEN\"", line)
	}
	return fencelock.Token(n)
}
