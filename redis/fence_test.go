package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/prometheus/client_golang/prometheus/testutil"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/redis"
)

// testRedis is a client of the test server whose keys all start with a
// prefix of the test's own, deleted when the test ends.
type testRedis struct {
	rdb    *goredis.Client
	prefix string
}

func newTestRedis(tb testing.TB) *testRedis {
	tb.Helper()
	addr := fencelocktest.RedisAddr(tb)
	tr := &testRedis{prefix: fmt.Sprintf("fencelocktest:%x:", rand.Uint64())}
	tr.rdb = tr.client(tb, addr)
	tb.Cleanup(func() {
		ctx := context.Background()
		rdb := goredis.NewClient(&goredis.Options{Addr: addr})
		defer rdb.Close()
		iter := rdb.Scan(ctx, 0, tr.prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	return tr
}

func (tr *testRedis) client(tb testing.TB, addr string) *goredis.Client {
	tb.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	tb.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(tb.Context()).Err(); err != nil {
		tb.Fatalf("ping redis at %s: %v", addr, err)
	}
	return rdb
}

func (tr *testRedis) fence() *redis.Fence {
	return redis.New(tr.rdb, redis.WithKeyPrefix(tr.prefix+"fence:"))
}

func (tr *testRedis) target(tb testing.TB) fencelocktest.Target {
	tb.Helper()
	return fencelocktest.Target{
		Resource: redis.NewStrings(tr.rdb, tr.prefix, redis.WithKeyPrefix(tr.prefix+"fence:")),
		Restart: func(tb testing.TB) fencelocktest.Target {
			// A new connection to the same server; the server itself keeps
			// running (its durability is its configuration's, see doc.go).
			next := &testRedis{prefix: tr.prefix, rdb: tr.client(tb, tr.rdb.Options().Addr)}
			return next.target(tb)
		},
	}
}

func TestFence_Suite(t *testing.T) {
	tr := newTestRedis(t)
	fencelocktest.RunFenceSuite(t, tr.target)
}

func TestFence_writes(t *testing.T) {
	tests := []struct {
		name    string
		token   fencelock.Token
		write   func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error
		wantErr error
		want    map[string]string // string keys (and hash fields as key/field) afterwards
	}{
		{
			name: "set", token: 35,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.Set(ctx, "d", tok, p+"s", "new", 0)
			},
			want: map[string]string{"s": "new", "h/f": "old", "x": "old"},
		},
		{
			name: "stale set", token: 33, wantErr: fencelock.ErrStaleToken,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.Set(ctx, "d", tok, p+"s", "new", 0)
			},
			want: map[string]string{"s": "old", "h/f": "old", "x": "old"},
		},
		{
			name: "hset", token: 34,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.HSet(ctx, "d", tok, p+"h", map[string]any{"f": "new", "g": 7})
			},
			want: map[string]string{"s": "old", "h/f": "new", "h/g": "7", "x": "old"},
		},
		{
			name: "stale hset", token: 1, wantErr: fencelock.ErrStaleToken,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.HSet(ctx, "d", tok, p+"h", map[string]any{"f": "new"})
			},
			want: map[string]string{"s": "old", "h/f": "old", "x": "old"},
		},
		{
			name: "del", token: 34,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.Del(ctx, "d", tok, p+"s", p+"x")
			},
			want: map[string]string{"h/f": "old"},
		},
		{
			name: "stale del", token: 33, wantErr: fencelock.ErrStaleToken,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.Del(ctx, "d", tok, p+"s", p+"x")
			},
			want: map[string]string{"s": "old", "h/f": "old", "x": "old"},
		},
		{
			name: "set without a token", token: 0, wantErr: fencelock.ErrMissingToken,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.Set(ctx, "d", tok, p+"s", "new", 0)
			},
			want: map[string]string{"s": "old", "h/f": "old", "x": "old"},
		},
		{
			name: "del without keys", token: 35, wantErr: fencelock.ErrInvalidArgument,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.Del(ctx, "d", tok)
			},
			want: map[string]string{"s": "old", "h/f": "old", "x": "old"},
		},
		{
			// A cleanup of every key with the domain's hash tag would also
			// match its fence key; deleting it would drop the bar.
			name: "del of the domain's fence key", token: 34, wantErr: fencelock.ErrInvalidArgument,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.Del(ctx, "d", tok, p+"s", f.FenceKey("d"))
			},
			want: map[string]string{"s": "old", "h/f": "old", "x": "old"},
		},
		{
			name: "set of another domain's fence key", token: 35, wantErr: fencelock.ErrInvalidArgument,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.Set(ctx, "d", tok, f.FenceKey("e"), "1", 0)
			},
			want: map[string]string{"s": "old", "h/f": "old", "x": "old"},
		},
		{
			name: "invalid domain", token: 35, wantErr: fencelock.ErrInvalidName,
			write: func(ctx context.Context, f *redis.Fence, p string, tok fencelock.Token) error {
				return f.Set(ctx, "", tok, p+"s", "new", 0)
			},
			want: map[string]string{"s": "old", "h/f": "old", "x": "old"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTestRedis(t)
			ctx := t.Context()
			p := tr.prefix
			tr.rdb.Set(ctx, p+"s", "old", 0)
			tr.rdb.Set(ctx, p+"x", "old", 0)
			tr.rdb.HSet(ctx, p+"h", "f", "old")
			f := tr.fence()
			if err := f.Check(ctx, "d", 34); err != nil {
				t.Fatalf("Check(d, 34) returned %v", err)
			}
			staleBefore := testutil.ToFloat64(fence.Refusals.WithLabelValues("redis", "stale"))
			err := tt.write(ctx, f, p, tt.token)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("write with token %d returned %v, want %v", tt.token, err, tt.wantErr)
			}
			wantCounted := 0.0
			if errors.Is(tt.wantErr, fencelock.ErrStaleToken) {
				wantCounted = 1
			}
			if n := testutil.ToFloat64(fence.Refusals.WithLabelValues("redis", "stale")) - staleBefore; n != wantCounted {
				t.Errorf("stale refusals counted: %v, want %v", n, wantCounted)
			}
			for _, k := range []string{"s", "x", "h/f", "h/g"} {
				var got string
				var err error
				if k[0] == 'h' {
					got, err = tr.rdb.HGet(ctx, p+"h", k[2:]).Result()
				} else {
					got, err = tr.rdb.Get(ctx, p+k).Result()
				}
				if errors.Is(err, goredis.Nil) {
					got = ""
				}
				if got != tt.want[k] {
					t.Errorf("after the write, %s holds %q, want %q", k, got, tt.want[k])
				}
			}
			wantHighest := fencelock.Token(34)
			if tt.wantErr == nil {
				wantHighest = max(34, tt.token)
			}
			if got, _ := f.Highest(ctx, "d"); got != wantHighest {
				t.Errorf("Highest(d) = %d, want %d", got, wantHighest)
			}
		})
	}
}

// A Ring moves a key to another shard when its shard misses pings, where
// the domain's fence key is absent: New's fence refuses every call.
func TestNew_RingRefused(t *testing.T) {
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	f := redis.New(ring)
	ctx := t.Context()
	if err := f.Set(ctx, "d", 1, "k", "v", 0); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Set through a Ring = %v, want ErrInvalidArgument", err)
	}
	if err := f.Check(ctx, "d", 1); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Check through a Ring = %v, want ErrInvalidArgument", err)
	}
	if _, err := f.Highest(ctx, "d"); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Highest through a Ring = %v, want ErrInvalidArgument", err)
	}
}

// Tokens beyond 2^53 differ by one here; Lua numbers could not tell them
// apart, the script's string comparison must.
func TestFence_Check_largeTokens(t *testing.T) {
	tr := newTestRedis(t)
	f := tr.fence()
	ctx := t.Context()
	const top = ^fencelock.Token(0)
	steps := []struct {
		token   fencelock.Token
		wantErr error
	}{
		{token: 9},
		{token: 10},
		{token: 9, wantErr: fencelock.ErrStaleToken},
		{token: top - 1},
		{token: top},
		{token: top - 1, wantErr: fencelock.ErrStaleToken},
		{token: top},
	}
	for _, s := range steps {
		err := f.Check(ctx, "big", s.token)
		if !errors.Is(err, s.wantErr) || (err != nil) != (s.wantErr != nil) {
			t.Fatalf("Check(big, %d) returned %v, want %v", s.token, err, s.wantErr)
		}
	}
	if got, _ := f.Highest(ctx, "big"); got != top {
		t.Fatalf("Highest(big) = %d, want %d", got, top)
	}
}

func TestFence_Set_expiration(t *testing.T) {
	tr := newTestRedis(t)
	f := tr.fence()
	ctx := t.Context()
	if err := f.Set(ctx, "d", 1, tr.prefix+"k", "v", time.Hour); err != nil {
		t.Fatalf("Set with an expiration returned %v", err)
	}
	if ttl := tr.rdb.PTTL(ctx, tr.prefix+"k").Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("key TTL is %v, want at most an hour and positive", ttl)
	}
	if err := f.Set(ctx, "d", 1, tr.prefix+"k", "v", -time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Set with a negative expiration returned %v, want ErrInvalidArgument", err)
	}
}

// TestFence_FailedWriteLeavesTheFenceAlone: a write the data command
// refuses (here HSET on a key holding a string) does not raise the domain's
// highest token: the caller saw an error, and Redis does not undo a
// script's earlier writes, so the fence is raised only after the write.
func TestFence_FailedWriteLeavesTheFenceAlone(t *testing.T) {
	tr := newTestRedis(t)
	ctx := t.Context()
	f := tr.fence()
	if err := f.Set(ctx, "d", 40, tr.prefix+"s", "a string", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.HSet(ctx, "d", 50, tr.prefix+"s", map[string]any{"f": "v"}); err == nil {
		t.Fatal("HSET on a string key succeeded")
	}
	if h, err := f.Highest(ctx, "d"); err != nil || h != 40 {
		t.Fatalf("highest after the failed write = %d, %v; want 40, as before it", h, err)
	}
}
