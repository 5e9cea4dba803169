package fence

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fencelock/fencelock"
)

var _ fencelock.Fence = (*Memory)(nil)

// Memory is an in-memory fence. Its zero value is ready to use and it is safe
// for concurrent use. It forgets every highest token when the process ends.
type Memory struct {
	mu      sync.Mutex
	domains map[string]*memoryDomain
}

type memoryDomain struct {
	turn    chan struct{} // holds a value while a write of the domain runs
	highest atomic.Uint64 // written only during a turn
}

// NewMemory returns an empty in-memory fence.
func NewMemory() *Memory { return &Memory{} }

func (m *Memory) domain(name string) *memoryDomain {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.domains == nil {
		m.domains = make(map[string]*memoryDomain)
	}
	d, ok := m.domains[name]
	if !ok {
		d = &memoryDomain{turn: make(chan struct{}, 1)}
		m.domains[name] = d
	}
	return d
}

// Do runs write if token is admitted for domain (see Admit), and raises the
// domain's highest token to token if write returns nil. Writes of one domain
// run one at a time, so no lower token can be admitted while write runs;
// write must not call back into m for the same domain. Do returns Admit's
// error without running write, write's error unchanged (the highest token is
// then left as it was), or ctx's error if ctx ends before write's turn.
// Every domain named with a token stays in memory while m lives.
func (m *Memory) Do(ctx context.Context, domain string, token fencelock.Token, write func(ctx context.Context) error) error {
	if err := ValidateDomain(domain); err != nil {
		return fmt.Errorf("fence write: %w", err)
	}
	if token == 0 {
		return Refused("memory", Admit(domain, 0, 0))
	}
	d := m.domain(domain)
	select {
	case d.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("fence write: wait for the domain: %w", ctx.Err())
	}
	defer func() { <-d.turn }()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fence write: %w", err)
	}
	if err := Admit(domain, fencelock.Token(d.highest.Load()), token); err != nil {
		return Refused("memory", err)
	}
	if write != nil {
		if err := write(ctx); err != nil {
			return err
		}
	}
	d.highest.Store(uint64(token))
	return nil
}

// Check admits token for domain and makes it the domain's highest token,
// without writing anything else. It returns Admit's errors.
func (m *Memory) Check(ctx context.Context, domain string, token fencelock.Token) error {
	return m.Do(ctx, domain, token, nil)
}

// Highest returns the highest token domain has accepted, or 0.
func (m *Memory) Highest(ctx context.Context, domain string) (fencelock.Token, error) {
	if err := ValidateDomain(domain); err != nil {
		return 0, fmt.Errorf("read highest token: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("read highest token: %w", err)
	}
	m.mu.Lock()
	d, ok := m.domains[domain]
	m.mu.Unlock()
	if !ok {
		return 0, nil
	}
	return fencelock.Token(d.highest.Load()), nil
}
