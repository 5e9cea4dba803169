package verify_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/fencelock/fencelock/verify"
)

// TestScenarios runs the short mode of scenarios 1-7 and the negative
// controls, one at a time (about 15 s each). FENCELOCK_VERIFY_SEED fixes the
// seed; FENCELOCK_VERIFY_OUT keeps the histories in that directory.
func TestScenarios(t *testing.T) {
	bin := testproc.Binary(t)
	seed := uint64(time.Now().UnixNano() % 1e9)
	if s := os.Getenv("FENCELOCK_VERIFY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FENCELOCK_VERIFY_SEED=%q: %v", s, err)
		}
		seed = v
	}
	out := os.Getenv("FENCELOCK_VERIFY_OUT")
	if out == "" {
		out = t.TempDir()
	}
	t.Logf("seed %d (rerun with FENCELOCK_VERIFY_SEED=%d), output in %s", seed, seed, out)
	for i, sc := range verify.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			cfg := verify.DefaultConfig()
			cfg.Binary, cfg.OutDir, cfg.Seed = bin, out, seed+uint64(i)
			cfg.Duration = 12 * time.Second
			if testing.Short() {
				cfg.Duration = 8 * time.Second
			}
			cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rs, err := verify.Run(ctx, cfg, sc.Name)
			if err != nil {
				t.Fatalf("run scenario %s: %v", sc.Name, err)
			}
			var table bytes.Buffer
			verify.WriteTable(&table, rs)
			t.Logf("\n%s", table.String())
			r := rs[0]
			if !r.Pass {
				t.Errorf("scenario %s: got verdict %q, want PASS (seed %d; history in %s)", sc.Name, r.Verdict, r.Seed, r.Dir)
			}
			if sc.Caught != "" && r.Pass {
				for _, c := range r.Checks {
					if c.Name == sc.Caught && c.Valid {
						t.Errorf("negative control %s: the %s checker found no violation", sc.Name, sc.Caught)
					}
				}
			}
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// TestOwnCluster points the harness at a cluster it did not start (started
// here with testproc, as a user's deployment would be) and at a store it
// did not start, without a nemesis hook: the client-side scenario runs and
// must pass, and so must the negative control (it needs nothing of the
// store); the scenario that needs to kill servers is skipped with a note.
func TestOwnCluster(t *testing.T) {
	bin := testproc.Binary(t)
	c := testproc.StartCluster(t, 3)
	storeURL := startStore(t, bin)
	cfg := verify.DefaultConfig()
	cfg.Binary, cfg.OutDir, cfg.Seed = bin, t.TempDir(), uint64(time.Now().UnixNano()%1e9)
	if out := os.Getenv("FENCELOCK_VERIFY_OUT"); out != "" {
		cfg.OutDir = filepath.Join(out, "own-cluster")
	}
	cfg.Duration = 10 * time.Second
	if testing.Short() {
		cfg.Duration = 8 * time.Second
	}
	cfg.Servers, cfg.StoreURL = c.Endpoints(), storeURL
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := verify.Run(ctx, cfg, "zombie-client", "kill", "neg")
	if err != nil {
		t.Fatalf("run against own cluster: %v", err)
	}
	var table bytes.Buffer
	verify.WriteTable(&table, rs)
	t.Logf("seed %d\n%s", cfg.Seed, table.String())
	if len(rs) != 3 {
		t.Fatalf("got %d results, want 3", len(rs))
	}
	if r := rs[0]; !r.Pass || r.Skipped != "" || r.Nodes != 3 {
		t.Errorf("zombie-client against own cluster: verdict %q, skipped %q, nodes %d; want PASS on 3 nodes (history in %s)",
			r.Verdict, r.Skipped, r.Nodes, r.Dir)
	}
	if r := rs[1]; r.Skipped == "" || !r.Pass {
		t.Errorf("%s against own cluster and store: verdict %q, want skipped", r.Scenario, r.Verdict)
	}
	if r := rs[2]; r.Skipped != "" || !r.Pass {
		t.Errorf("%s against own cluster and store: verdict %q, skipped %q; want the violation detected", r.Scenario, r.Verdict, r.Skipped)
	}
	if why := rs[1].Skipped; !strings.Contains(why, "--nemesis-exec") {
		t.Errorf("kill without a nemesis hook: skipped because %q, want a reason that names --nemesis-exec", why)
	}
	if !strings.Contains(table.String(), "SKIPPED") {
		t.Errorf("table does not show the skipped scenarios:\n%s", table.String())
	}
}

// startStore starts "fencelock store" and returns its URL.
func startStore(t *testing.T, bin string) string {
	t.Helper()
	cmd := exec.Command(bin, "store", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				found <- strings.TrimSpace(u)
			}
		}
	}()
	select {
	case u := <-found:
		return u
	case <-time.After(20 * time.Second):
		t.Fatal("store not listening after 20s")
		return ""
	}
}

// TestScenarios_TLS runs a server-fault and the client-fault scenario on
// nodes with HTTPS, client certificates and mutual TLS on Raft.
func TestScenarios_TLS(t *testing.T) {
	bin := testproc.Binary(t)
	cfg := verify.DefaultConfig()
	cfg.Binary, cfg.OutDir, cfg.Seed, cfg.TLS = bin, t.TempDir(), uint64(time.Now().UnixNano()%1e9), true
	cfg.Duration = 8 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := verify.Run(ctx, cfg, "kill", "zombie-client")
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	verify.WriteTable(&table, rs)
	t.Logf("TLS, seed %d\n%s", cfg.Seed, table.String())
	for _, r := range rs {
		if !r.Pass {
			t.Errorf("%s on TLS: %q (history in %s)", r.Scenario, r.Verdict, r.Dir)
		}
	}
}
