package verify_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/redis"
	"github.com/fencelock/fencelock/verify"
)

// hashValues is a resource adapter of your own, a fence.Resource: each
// value is a field of a Redis hash, written with the fenced HSET of package
// redis.
type hashValues struct {
	*redis.Fence
	rdb *goredis.Client
}

func key(k string) string { return "orders:{" + k + "}" }

func (h hashValues) Put(ctx context.Context, domain string, token fencelock.Token, k string, value []byte) (int64, error) {
	return 0, h.HSet(ctx, domain, token, key(k), map[string]any{"value": value}) // 0: no version number
}

func (h hashValues) Get(ctx context.Context, k string) ([]byte, int64, error) {
	v, err := h.rdb.HGet(ctx, key(k), "value").Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, 0, fencelock.ErrNotFound
	}
	return v, 0, err
}

func (h hashValues) Close() error { return h.rdb.Close() }

// openHashValues is the OpenFunc of the workers: spec is Config.Resource.
func openHashValues(ctx context.Context, spec string) (fence.Resource, error) {
	opts, err := goredis.ParseURL(spec)
	if err != nil {
		return nil, err
	}
	rdb := goredis.NewClient(opts)
	return hashValues{Fence: redis.New(rdb), rdb: rdb}, nil
}

// Verify your own resource adapter: one program is both the harness and,
// started again by it with the argument "worker", each client process. The
// lock nodes are "fencelock serve" processes of the fencelock binary (or
// your cluster, with Servers and NemesisExec). Not run: it starts
// processes.
func Example_ownResource() {
	ctx := context.Background()
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		err := verify.RunWorker(ctx, verify.WorkerConfig{Open: openHashValues}, os.Stdin, os.Stdout)
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
	results, err := verify.Run(ctx, cfg, "zombie-client", "kill", "pause-leader", "neg")
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
