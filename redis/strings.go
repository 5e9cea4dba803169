package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

var _ fence.Resource = (*Strings)(nil)

// Strings is a fenced key-value resource over Redis strings, a
// fence.Resource: Put is Fence.Set of prefix + key, Get a GET of it. It is
// what the shared fence suite, the fault harness and small programs use.
// Redis keeps no version numbers, so versions are 0. In Redis Cluster,
// give key the domain's hash tag (see the package doc).
type Strings struct {
	*Fence
	rdb    goredis.Cmdable
	prefix string
}

// NewStrings returns the strings under prefix of rdb, fenced with New(rdb,
// opts...).
func NewStrings(rdb goredis.Cmdable, prefix string, opts ...Option) *Strings {
	return &Strings{Fence: New(rdb, opts...), rdb: rdb, prefix: prefix}
}

// Put sets prefix + key to value, fenced by token in domain. It returns 0.
func (s *Strings) Put(ctx context.Context, domain string, token fencelock.Token, key string, value []byte) (int64, error) {
	return 0, s.Set(ctx, domain, token, s.prefix+key, value, 0)
}

// Get returns the value of prefix + key, and version 0.
func (s *Strings) Get(ctx context.Context, key string) ([]byte, int64, error) {
	v, err := s.rdb.Get(ctx, s.prefix+key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, 0, fmt.Errorf("get %q: %w", s.prefix+key, fencelock.ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %q: %w", s.prefix+key, err)
	}
	return v, 0, nil
}
