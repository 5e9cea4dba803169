package verify

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redis"
)

// redisResource keeps each list as a string at fencelock:verify:{DOMAIN}
// (the domain as hash tag, so list and fence key share a Redis Cluster
// slot), written with package redis's fenced SET. Redis keeps no version
// number the script could return, so versions are 0: the store checker's
// version-order test is skipped for Redis, its real-time and final-list
// tests still apply.
type redisResource struct {
	rdb     *goredis.Client
	fence   *redis.Fence
	fencing bool
}

var _ Resource = (*redisResource)(nil)

func openRedisResource(ctx context.Context, url string, fencing bool) (*redisResource, error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("open redis resource: %w: %w", fencelock.ErrInvalidArgument, err)
	}
	rdb := goredis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("open redis resource: %w", err)
	}
	return &redisResource{rdb: rdb, fence: redis.New(rdb), fencing: fencing}, nil
}

func listKey(domain string) string { return "fencelock:verify:{" + domain + "}" }

func (r *redisResource) Fence(ctx context.Context, domain string, token fencelock.Token) error {
	if !r.fencing {
		return nil
	}
	return r.fence.Check(ctx, domain, token)
}

func (r *redisResource) Read(ctx context.Context, domain string) ([]string, int64, error) {
	s, err := r.rdb.Get(ctx, listKey(domain)).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read list %q: %w", domain, err)
	}
	return splitList([]byte(s)), 0, nil
}

func (r *redisResource) Write(ctx context.Context, domain string, token fencelock.Token, list []string) (int64, error) {
	if !r.fencing {
		if err := r.rdb.Set(ctx, listKey(domain), joinList(list), 0).Err(); err != nil {
			return 0, fmt.Errorf("write list %q: %w", domain, err)
		}
		return 0, nil
	}
	return 0, r.fence.Set(ctx, domain, token, listKey(domain), joinList(list), 0)
}

func (r *redisResource) Close() error { return r.rdb.Close() }
