package fence

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencelock/fencelock"
)

// Resource is a fenced key-value resource: a fence plus fenced writes and
// plain reads of values under keys. It is the one shape that the shared
// fence suite (package fencelocktest), the fault harness (package verify)
// and "fencelock conformance" drive, and each adapter implements it once:
// MemoryResource here, store.Client.Resource, postgres.Table, redis.Values,
// s3.Bucket and httpfence.Client.
//
// Implementations are safe for concurrent use.
type Resource interface {
	fencelock.Fence

	// Put stores value under key, fenced by token in domain: the token
	// check and the write are one atomic step, and a refused write stores
	// nothing. It returns the errors fencelock.Fence.Check documents, and
	// the version the write created: higher for every accepted write of
	// key, or 0 if the resource numbers none.
	Put(ctx context.Context, domain string, token fencelock.Token, key string, value []byte) (version int64, err error)

	// Get returns the value stored under key and its version (0 if the
	// resource numbers none), or an error wrapping fencelock.ErrNotFound
	// if key holds none.
	Get(ctx context.Context, key string) (value []byte, version int64, err error)
}

var _ Resource = (*MemoryResource)(nil)

// MemoryResource is a Resource in memory, fenced by a Memory: for tests and
// examples. Its zero value is ready to use.
type MemoryResource struct {
	Memory
	mu     sync.Mutex
	values map[string]memoryValue
}

type memoryValue struct {
	data    []byte
	version int64
}

// Put stores a copy of value under key if token is admitted for domain.
func (m *MemoryResource) Put(ctx context.Context, domain string, token fencelock.Token, key string, value []byte) (int64, error) {
	var version int64
	err := m.Do(ctx, domain, token, func(context.Context) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.values == nil {
			m.values = make(map[string]memoryValue)
		}
		version = m.values[key].version + 1
		m.values[key] = memoryValue{data: append([]byte(nil), value...), version: version}
		return nil
	})
	return version, err
}

// Get returns a copy of key's value and its version.
func (m *MemoryResource) Get(_ context.Context, key string) ([]byte, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.values[key]
	if !ok {
		return nil, 0, fmt.Errorf("get %q: %w", key, fencelock.ErrNotFound)
	}
	return append([]byte(nil), v.data...), v.version, nil
}
