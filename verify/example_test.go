package verify_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redis"
	"github.com/fencelock/fencelock/verify"
)

// hashLists is a resource adapter of your own: each list is a field of a
// Redis hash, written with the fenced HSET of package redis.
type hashLists struct {
	rdb   *goredis.Client
	fence *redis.Fence
}

func key(domain string) string { return "orders:{" + domain + "}" }

func (h hashLists) Fence(ctx context.Context, domain string, token fencelock.Token) error {
	return h.fence.Check(ctx, domain, token)
}

func (h hashLists) Read(ctx context.Context, domain string) ([]string, int64, error) {
	s, err := h.rdb.HGet(ctx, key(domain), "list").Result()
	if errors.Is(err, goredis.Nil) {
		return nil, 0, nil
	}
	return strings.Fields(s), 0, err // 0: no version number
}

func (h hashLists) Write(ctx context.Context, domain string, token fencelock.Token, list []string) (int64, error) {
	return 0, h.fence.HSet(ctx, domain, token, key(domain), map[string]any{"list": strings.Join(list, " ")})
}

func (h hashLists) Close() error { return h.rdb.Close() }

// openHashLists is the OpenFunc of the workers: spec is Config.Resource.
// The negative control (fencing false) needs a mode that skips the token
// check; this adapter has none, so it runs only the other scenarios.
func openHashLists(ctx context.Context, spec string, fencing bool) (verify.Resource, error) {
	if !fencing {
		return nil, errors.New("hashLists always fences")
	}
	opts, err := goredis.ParseURL(spec)
	if err != nil {
		return nil, err
	}
	rdb := goredis.NewClient(opts)
	return hashLists{rdb: rdb, fence: redis.New(rdb)}, nil
}

// Verify your own resource adapter: one program is both the harness and,
// started again by it with the argument "worker", each client process. The
// lock nodes are "fencelock serve" processes of the fencelock binary (or
// your cluster, with Servers and NemesisExec). Not run: it starts
// processes.
func Example_ownResource() {
	ctx := context.Background()
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		err := verify.RunWorker(ctx, verify.WorkerConfig{Open: openHashLists}, os.Stdin, os.Stdout)
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cfg := verify.DefaultConfig()
	cfg.Binary = "/usr/local/bin/fencelock" // runs the lock nodes
	cfg.OutDir = "verify-out"
	cfg.Worker = []string{self, "worker"}
	cfg.Resource = "redis://127.0.0.1:6379/0"
	results, err := verify.Run(ctx, cfg, "zombie-client", "kill", "pause-leader")
	if err != nil {
		log.Fatal(err)
	}
	verify.WriteTable(os.Stdout, results)
	for _, r := range results {
		if !r.Pass {
			fmt.Println("FAILED:", r.Scenario, r.Verdict)
		}
	}
}
