package store

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/sequencer"

	"github.com/fencelock/fencelock"
)

// DefaultMaxObjectSize is the largest object body the store accepts unless
// configured otherwise: 64 MiB.
const DefaultMaxObjectSize int64 = 64 << 20

// DefaultMaxBufferedBytes bounds the write bodies held in memory at once
// unless configured otherwise: four of the largest.
const DefaultMaxBufferedBytes = 4 * DefaultMaxObjectSize

// DefaultIdempotencyTTL is how long an Idempotency-Key's first answer is
// kept unless configured otherwise: a day, far longer than any retry loop.
const DefaultIdempotencyTTL = 24 * time.Hour

// Config configures a Server.
type Config struct {
	// DataDir holds the store's database (store.db). Required; created if
	// missing.
	DataDir string

	// MaxObjectSize is the largest body, in bytes, a PUT may carry; larger
	// ones are refused with 413 and nothing is stored. Zero means
	// DefaultMaxObjectSize.
	MaxObjectSize int64

	// MaxBufferedBytes bounds the bytes of write bodies the store holds in
	// memory at once; a write waits for room (or its request ends). Zero
	// means DefaultMaxBufferedBytes; it is at least MaxObjectSize.
	MaxBufferedBytes int64

	// IdempotencyTTL is how long the first answer to an Idempotency-Key is
	// kept: a repeat within it gets that answer again, a request with the
	// key after it is a new write. Expired answers are deleted in the
	// background. Zero means DefaultIdempotencyTTL.
	IdempotencyTTL time.Duration

	// DisableFencing makes the store accept every write regardless of its
	// fencing token. It is unsafe: it exists only to demonstrate the
	// corruption fencing prevents.
	DisableFencing bool

	// Verifier, if set, makes every write carry a Fencing-Sequencer that
	// it verifies for the write's domain and token: an invented token is
	// refused (403 invalid_sequencer). Domains must then be lock names.
	Verifier *sequencer.Verifier

	// ACL, if set and Active, identifies each caller (bearer token or client
	// certificate) and checks every request of the API: a write of an
	// object needs acl.Lock on its key and on its fence domain, a fence
	// raise acl.Lock on the domain, a read acl.Read on the key (or, for a
	// fence, the domain). Idempotency-Keys are then scoped per caller too.
	ACL *acl.ACL

	// Logger receives the store's logs. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns a configuration with every default filled in; only
// DataDir is left to set.
func DefaultConfig() Config {
	return Config{MaxObjectSize: DefaultMaxObjectSize, IdempotencyTTL: DefaultIdempotencyTTL}
}

// Validate reports whether c can open a store. The error wraps
// fencelock.ErrInvalidArgument.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("DataDir is empty: set the directory that holds the store's data"))
	}
	if c.MaxObjectSize < 0 {
		errs = append(errs, fmt.Errorf("MaxObjectSize is %d: it must be positive, or 0 for the default", c.MaxObjectSize))
	}
	if c.MaxBufferedBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBufferedBytes is %d: it must be positive, or 0 for the default", c.MaxBufferedBytes))
	}
	if c.IdempotencyTTL < 0 {
		errs = append(errs, fmt.Errorf("IdempotencyTTL is %v: it must be positive, or 0 for the default", c.IdempotencyTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("validate store config: %w: %w", fencelock.ErrInvalidArgument, err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxObjectSize == 0 {
		c.MaxObjectSize = DefaultMaxObjectSize
	}
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	c.MaxBufferedBytes = max(c.MaxBufferedBytes, c.MaxObjectSize)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ACL == nil {
		c.ACL = &acl.ACL{}
	}
	return c
}
