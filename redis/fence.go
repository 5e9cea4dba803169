package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/sequencer"
)

// DefaultKeyPrefix starts the key holding a domain's highest token.
const DefaultKeyPrefix = "fencelock:fence:"

// fencedWrite checks and raises the domain's highest token, then writes.
//
// KEYS[1] is the domain's fence key, KEYS[2..] the keys the write touches.
// ARGV[1] is the token in decimal, ARGV[2] the operation (check, set, hset,
// del), ARGV[3..] its arguments. It returns {1, token} when applied and
// {0, highest} when the token is stale. Redis does not undo a script's
// writes on error, so everything is validated before the first write, and
// the highest token is raised last, after the write (one command, which
// either happens or fails) succeeded.
var fencedWrite = goredis.NewScript(fenceLua)

// fenceLua is the script, also shipped by the Python package
// (python/fencelock/fence.lua links to it).
//
//go:embed fence.lua
var fenceLua string

var readHighest = goredis.NewScript(`return redis.call('GET', KEYS[1])`)

var _ fencelock.Fence = (*Fence)(nil)

// Fence makes fenced writes to a Redis server. It is safe for concurrent use.
type Fence struct {
	rdb    goredis.Scripter
	prefix string
	err    error // why rdb cannot carry fenced writes, if it cannot
}

// Option configures a Fence.
type Option func(*Fence)

// WithKeyPrefix stores highest tokens under prefix + "{" + domain + "}"
// instead of DefaultKeyPrefix.
func WithKeyPrefix(prefix string) Option {
	return func(f *Fence) { f.prefix = prefix }
}

// New returns a fence writing through rdb: a *redis.Client, or a
// *redis.ClusterClient (a domain's keys then share its hash tag, see the
// package doc). A *redis.Ring is refused, by every call, with an error
// wrapping fencelock.ErrInvalidArgument: a Ring moves a key to another
// shard when its shard misses a few pings, and the domain's fence key,
// absent there, would let any token write.
func New(rdb goredis.Scripter, opts ...Option) *Fence {
	f := &Fence{rdb: rdb, prefix: DefaultKeyPrefix}
	for _, opt := range opts {
		opt(f)
	}
	if _, ok := rdb.(*goredis.Ring); ok {
		f.err = fmt.Errorf("redis fence: a *redis.Ring cannot hold a fence (a shard it drops takes the fence key's place with none): use a *redis.Client or a *redis.ClusterClient: %w", fencelock.ErrInvalidArgument)
	}
	return f
}

// FenceKey returns the Redis key holding domain's highest token.
func (f *Fence) FenceKey(domain string) string { return f.prefix + "{" + domain + "}" }

// run runs one fenced operation.
func (f *Fence) run(ctx context.Context, domain string, token fencelock.Token, op string, keys []string, args ...any) error {
	if f.err != nil {
		return f.err
	}
	if err := fence.ValidateDomain(domain); err != nil {
		return err
	}
	fk := f.FenceKey(domain)
	for _, k := range keys {
		// A write of a fence key would reset or drop a domain's bar (a
		// cleanup that deletes every key with the domain's hash tag).
		if k == fk || f.prefix != "" && strings.HasPrefix(k, f.prefix) {
			return fmt.Errorf("key %q is a fence key (prefix %q), which fenced writes may not touch: %w", k, f.prefix, fencelock.ErrInvalidArgument)
		}
	}
	if err := fence.Admit(domain, 0, token); err != nil {
		return fence.Refused("redis", err)
	}
	res, err := fencedWrite.Run(ctx, f.rdb, append([]string{fk}, keys...),
		append([]any{token.String(), op}, args...)...).Slice()
	if err != nil {
		return fmt.Errorf("run fenced %s: %w", op, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("run fenced %s: script returned %v", op, res)
	}
	if status, _ := res[0].(int64); status == 1 {
		return nil
	}
	s, _ := res[1].(string)
	highest, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("run fenced %s: fence key %s holds %q, not a token", op, f.FenceKey(domain), s)
	}
	return fence.Refused("redis", fence.Admit(domain, fencelock.Token(highest), token))
}

// Set sets key to value (with an expiration unless it is 0), fenced by token
// in domain. It returns a *fencelock.StaleTokenError if the domain has
// accepted a higher token, and errors wrapping fencelock.ErrMissingToken for
// token 0, fencelock.ErrInvalidName for a malformed domain and
// fencelock.ErrInvalidArgument for a key under the fence keys' prefix.
func (f *Fence) Set(ctx context.Context, domain string, token fencelock.Token, key string, value any, expiration time.Duration) error {
	if expiration < 0 {
		return fmt.Errorf("fenced set of %q: negative expiration %v: %w", key, expiration, fencelock.ErrInvalidArgument)
	}
	if expiration > 0 && expiration < time.Millisecond {
		expiration = time.Millisecond
	}
	if err := f.run(ctx, domain, token, "set", []string{key}, value, expiration.Milliseconds()); err != nil {
		return fmt.Errorf("fenced set of %q: %w", key, err)
	}
	return nil
}

// HSet sets fields of the hash at key, fenced by token in domain. It returns
// Set's errors, and one wrapping fencelock.ErrInvalidArgument without fields.
func (f *Fence) HSet(ctx context.Context, domain string, token fencelock.Token, key string, fields map[string]any) error {
	if len(fields) == 0 {
		return fmt.Errorf("fenced hset of %q: no fields: %w", key, fencelock.ErrInvalidArgument)
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	args := make([]any, 0, 2*len(fields))
	for _, name := range names {
		args = append(args, name, fields[name])
	}
	if err := f.run(ctx, domain, token, "hset", []string{key}, args...); err != nil {
		return fmt.Errorf("fenced hset of %q: %w", key, err)
	}
	return nil
}

// Del deletes keys, fenced by token in domain. It returns Set's errors, and
// one wrapping fencelock.ErrInvalidArgument without keys.
func (f *Fence) Del(ctx context.Context, domain string, token fencelock.Token, keys ...string) error {
	if len(keys) == 0 {
		return fmt.Errorf("fenced del: no keys: %w", fencelock.ErrInvalidArgument)
	}
	if err := f.run(ctx, domain, token, "del", keys); err != nil {
		return fmt.Errorf("fenced del of %q: %w", keys, err)
	}
	return nil
}

// Check raises domain's highest token to token without writing anything
// else. It returns Set's errors.
func (f *Fence) Check(ctx context.Context, domain string, token fencelock.Token) error {
	if err := f.run(ctx, domain, token, "check", nil); err != nil {
		return fmt.Errorf("check fence: %w", err)
	}
	return nil
}

// Highest returns the highest token domain has accepted, or 0.
func (f *Fence) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	if f.err != nil {
		return 0, f.err
	}
	if err := fence.ValidateDomain(domain); err != nil {
		return 0, fmt.Errorf("read highest token: %w", err)
	}
	s, err := readHighest.Run(ctx, f.rdb, []string{f.FenceKey(domain)}).Text()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read highest token of %q: %w", domain, err)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read highest token of %q: fence key holds %q, not a token", domain, s)
	}
	return fencelock.Token(v), nil
}

// SetSequencer is Set for the grant a sequencer proves: v verifies seq for
// lock domain (the domain is the lock's name), and key is set fenced by
// the sequencer's token. A write with a sequencer cannot carry an invented
// token. Errors: v's (each wraps fencelock.ErrInvalidSequencer), then
// Set's.
func (f *Fence) SetSequencer(ctx context.Context, v *sequencer.Verifier, seq, domain, key string, value any, expiration time.Duration) error {
	s, err := v.Verify(seq, fencelock.LockName(domain))
	if err != nil {
		return fmt.Errorf("fenced set of %q: %w", key, err)
	}
	return f.Set(ctx, domain, s.Token, key, value, expiration)
}
