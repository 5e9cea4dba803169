package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testproc"
)

// restartableStore writes a script that (re)starts "fencelock store" on one
// port and data dir, runs it once, and returns the store's URL and the
// script's path.
func restartableStore(t *testing.T, extra string) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pid")
	script := filepath.Join(dir, "restart.sh")
	body := fmt.Sprintf(`#!/bin/sh
if [ -s %[1]s ]; then kill -9 "$(cat %[1]s)"; while kill -0 "$(cat %[1]s)" 2>/dev/null; do sleep 0.05; done; fi
%[2]s store --listen %[3]s --data-dir %[4]s %[5]s >>%[4]s.log 2>&1 &
echo $! >%[1]s
`, pidfile, testproc.Binary(t), addr, filepath.Join(dir, "data"), extra)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidfile); err == nil {
			var pid int
			fmt.Sscan(string(b), &pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := restartService(t.Context(), script, "http://"+addr, os.Stderr); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr, script
}

func conformanceResults(t *testing.T, out string) map[string]conformance.Result {
	t.Helper()
	rs := map[string]conformance.Result{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r conformance.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Case == "" {
			continue // the store's restart output
		}
		rs[r.Case] = r
	}
	return rs
}

// TestConformance_store: the fenced store passes every case, the restart
// across a kill -9 included.
func TestConformance_store(t *testing.T) {
	url, script := restartableStore(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, code := testproc.Run(ctx, t, nil, "conformance", url+"/v1/objects", "--fences", url+"/v1/fences", "--restart-cmd", script, "--json")
	rs := conformanceResults(t, out)
	if code != 0 || len(rs) != len(conformance.Cases()) {
		t.Fatalf("conformance exited %d with %d results, want 0 and %d:\n%s", code, len(rs), len(conformance.Cases()), out)
	}
	for _, r := range rs {
		if r.Outcome != conformance.Pass {
			t.Errorf("case %q: %s %v", r.Case, r.Outcome, r.Messages)
		}
	}
}

// TestConformance_unfencedStoreFails: a store that does not fence fails,
// and the command exits 1.
func TestConformance_unfencedStoreFails(t *testing.T) {
	url, _ := restartableStore(t, "--no-fencing")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, code := testproc.Run(ctx, t, nil, "conformance", url+"/v1/objects")
	if code != 1 || !strings.Contains(out, "FAIL  34 then 33") || !strings.Contains(out, "SKIP  restart") {
		t.Fatalf("conformance against an unfenced store exited %d, want 1 with the stale case failed and restart skipped:\n%s", code, out)
	}
}
