package verify

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/fencelock/fencelock"
)

// Resource is the fenced resource the workload protects: it keeps one list
// of strings per fence domain (the workload uses the lock's name as domain
// and object key) and enforces fencing tokens on it. The harness's object
// store is one implementation, PostgreSQL and Redis are two more
// (OpenResource); a custom adapter implements Resource and runs the
// workers itself (WorkerConfig.Open, Config.Worker).
//
// A worker process opens one Resource and calls it from one goroutine at a
// time. Every call gets a context that ends at the worker's operation
// timeout. The harness records an error that wraps fencelock.ErrStaleToken
// as a refusal (the call certainly changed nothing); any other error as an
// unknown outcome (it may or may not have taken effect).
type Resource interface {
	// Fence raises domain's highest token to token without writing the
	// list (fencelock.Fence.Check): from then on, writes with lower tokens
	// are refused. It returns an error wrapping fencelock.ErrStaleToken if
	// the domain has accepted a higher token.
	Fence(ctx context.Context, domain string, token fencelock.Token) error

	// Read returns domain's list (nil if it was never written) and its
	// version: the resource's commit sequence number of the list, higher
	// for every accepted write, or 0 if the resource has none. The harness
	// also uses Read for the final read it checks, after every fault has
	// been healed.
	Read(ctx context.Context, domain string) (list []string, version int64, err error)

	// Write replaces domain's list with list, fenced by token in domain:
	// the token check and the write are one atomic step, and a refused
	// write (an error wrapping fencelock.ErrStaleToken) changes nothing.
	// It returns the new version (0 if the resource has none).
	Write(ctx context.Context, domain string, token fencelock.Token, list []string) (version int64, err error)

	// Close releases the resource's connections.
	Close() error
}

// OpenFunc opens the Resource a worker process writes to. spec is
// Config.Resource as given to the harness (for the object store, the
// store's URL). fencing is false only in the negative control: the
// resource must then accept every write whatever its token (or, like the
// object store, ignore the flag when the harness switches fencing off on
// the resource's side).
type OpenFunc func(ctx context.Context, spec string, fencing bool) (Resource, error)

// OpenResource opens the built-in resources by the scheme of spec:
//
//   - http:// or https://: the fenced object store at that URL ("fencelock
//     store"); fencing is switched off at the store (--no-fencing), not
//     here;
//   - postgres:// or postgresql://: a PostgreSQL database (a pgx DSN); the
//     lists live in the table fencelock_verify_lists, fenced by the domain
//     fence of package postgres (table fencelock_fences); both tables are
//     created if missing;
//   - redis:// or rediss://: a Redis server (go-redis URL); the lists are
//     strings at fencelock:verify:{DOMAIN}, fenced by package redis.
//
// Without fencing, the PostgreSQL and Redis resources skip the token check
// (Fence does nothing, Write writes unconditionally).
func OpenResource(ctx context.Context, spec string, fencing bool) (Resource, error) {
	scheme, _, _ := strings.Cut(spec, "://")
	switch strings.ToLower(scheme) {
	case "http", "https":
		return openStoreResource(spec)
	case "postgres", "postgresql":
		return openPostgresResource(ctx, spec, fencing)
	case "redis", "rediss":
		return openRedisResource(ctx, spec, fencing)
	}
	return nil, fmt.Errorf("open resource %q: want an http://, postgres:// or redis:// URL: %w", Redact(spec), fencelock.ErrInvalidArgument)
}

// Redact returns spec with the password of a URL replaced by "xxxxx", for
// printing.
func Redact(spec string) string {
	u, err := url.Parse(spec)
	if err != nil || u.User == nil {
		return spec
	}
	return u.Redacted()
}

// builtinResource reports whether spec names a resource OpenResource can
// open ("" and "store" mean the harness's object store).
func builtinResource(spec string) bool {
	if spec == "" || spec == ResourceStore {
		return true
	}
	scheme, _, ok := strings.Cut(spec, "://")
	if !ok {
		return false
	}
	switch strings.ToLower(scheme) {
	case "http", "https", "postgres", "postgresql", "redis", "rediss":
		return true
	}
	return false
}
