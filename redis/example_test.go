package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redis"
)

// Redis as the resource: the holder of "order:42" writes the order's status
// with its token; a paused holder with an older token is refused. Not run:
// it needs a Redis server.
func ExampleFence_Set() {
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	f := redis.New(rdb)

	// The data key carries the domain as a hash tag, for Redis Cluster.
	if err := f.Set(ctx, "order:42", 34, "{order:42}:status", "paid", 0); err != nil {
		log.Fatal(err)
	}
	err := f.Set(ctx, "order:42", 33, "{order:42}:status", "pending", 0)
	var stale *fencelock.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("refused: token %d, highest %d\n", stale.Token, stale.Highest)
	}
}

// Several keys of one critical section, one domain. Not run: it needs a
// Redis server.
func ExampleFence_HSet() {
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	f := redis.New(rdb)

	var token fencelock.Token = 34 // from the lock grant of "order:42"
	if err := f.HSet(ctx, "order:42", token, "{order:42}:order", map[string]any{"status": "paid", "amount": 100}); err != nil {
		log.Fatal(err)
	}
	if err := f.Del(ctx, "order:42", token, "{order:42}:pending-charge"); err != nil {
		log.Fatal(err)
	}
}
