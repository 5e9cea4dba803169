package main

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/store"
)

// startStore runs "fencelock store" and returns its URL and the process.
func startStore(tb testing.TB, dir string, extra ...string) (string, *exec.Cmd) {
	tb.Helper()
	args := append([]string{"store", "--listen", "127.0.0.1:0", "--data-dir", dir}, extra...)
	cmd := exec.Command(testproc.Binary(tb), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				lines <- u
			}
		}
	}()
	select {
	case u := <-lines:
		return u, cmd
	case <-time.After(20 * time.Second):
		tb.Fatal("fencelock store did not print its address within 20s")
	}
	return "", nil
}

func TestStoreCommand_RejectsStaleTokensAcrossKill9(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	url, cmd := startStore(t, dir)
	c, err := store.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "report.pdf", 34, strings.NewReader("B's report")); err != nil {
		t.Fatalf("put with token 34: %v", err)
	}
	_ = cmd.Process.Kill() // kill -9: the highest token must be on disk already
	_ = cmd.Wait()

	url, _ = startStore(t, dir)
	c, _ = store.NewClient(url)
	_, err = c.Put(ctx, "report.pdf", 33, strings.NewReader("A's stale write"))
	var stale *fencelock.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 33 || stale.Highest != 34 {
		t.Fatalf("put with token 33 after restart: got %v, want StaleTokenError{Token: 33, Highest: 34}", err)
	}
	got, _, err := c.Get(ctx, "report.pdf")
	if err != nil || string(got) != "B's report" {
		t.Errorf("after the stale write, object is %q (%v), want B's report", got, err)
	}
	if _, err := c.Put(ctx, "report.pdf", 0, strings.NewReader("x")); !errors.Is(err, fencelock.ErrMissingToken) {
		t.Errorf("put without token: got %v, want ErrMissingToken", err)
	}
}

func TestStoreCommand_NoFencingAcceptsStaleWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, _ := startStore(t, t.TempDir(), "--no-fencing")
	c, _ := store.NewClient(url)
	if _, err := c.Put(ctx, "k", 34, strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "k", 33, strings.NewReader("stale")); err != nil {
		t.Errorf("--no-fencing refused a stale write: %v (the demo relies on it landing)", err)
	}
}
