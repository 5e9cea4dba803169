package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquireScript is SET lock NX PX + INCR fence in one round trip (and, with
// appendfsync always, one fsync): the strongest form of the recipe.
var acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)

// releaseScript is the check-and-delete release.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// ErrRedisNotHolder is returned by a Redis release whose key no longer holds
// the locker's value (the lease expired).
var ErrRedisNotHolder = errors.New("redis release: not the holder")

// Redis is the Target of the Redis recipe: SET lock:N uuid NX PX ttl and
// INCR fence:N for the token, Lua check-and-delete release. Redis has no
// wait queue, so a client that finds the lock held sleeps a jittered Retry
// (uniform in [Retry/2, 3·Retry/2]) and tries again.
type Redis struct {
	name    string
	rdb     *redis.Client
	ttl     time.Duration
	retry   time.Duration
	twoStep bool
}

// NewRedis connects to the Redis at addr. label names the column. With
// twoStep, acquire is the usual two commands (SET NX PX, then INCR on
// success) instead of one Lua script.
func NewRedis(ctx context.Context, label, addr string, ttl, retry time.Duration, poolSize int, twoStep bool) (*Redis, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize, MinIdleConns: min(poolSize, 64)})
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	if err := acquireScript.Load(pctx, rdb).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	if err := releaseScript.Load(pctx, rdb).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	return &Redis{name: label, rdb: rdb, ttl: ttl, retry: retry, twoStep: twoStep}, nil
}

func (r *Redis) Name() string { return r.name }
func (r *Redis) Close() error { return r.rdb.Close() }

func (r *Redis) NewLocker(context.Context, int) (Locker, error) {
	return &redisLocker{r: r, value: rand.Text()}, nil
}

type redisLocker struct {
	r     *Redis
	value string // ownership token
	key   string
}

func (l *redisLocker) try(ctx context.Context, name string) (uint64, error) {
	lockKey, fenceKey := "lock:"+name, "fence:"+name
	if l.r.twoStep {
		ok, err := l.r.rdb.SetNX(ctx, lockKey, l.value, l.r.ttl).Result()
		if err != nil || !ok {
			return 0, err
		}
		n, err := l.r.rdb.Incr(ctx, fenceKey).Result()
		return uint64(n), err
	}
	n, err := acquireScript.Run(ctx, l.r.rdb, []string{lockKey, fenceKey}, l.value, l.r.ttl.Milliseconds()).Int64()
	return uint64(n), err
}

func (l *redisLocker) Acquire(ctx context.Context, name string) (uint64, error) {
	for {
		tok, err := l.try(ctx, name)
		if err != nil {
			return 0, err
		}
		if tok != 0 {
			l.key = "lock:" + name
			return tok, nil
		}
		d := l.r.retry/2 + time.Duration(mrand.Int64N(int64(l.r.retry)+1))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

func (l *redisLocker) Release(ctx context.Context) error {
	n, err := releaseScript.Run(ctx, l.r.rdb, []string{l.key}, l.value).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrRedisNotHolder
	}
	return nil
}

func (l *redisLocker) Close() error { return nil }
