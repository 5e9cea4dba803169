package client

import (
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
)

// Default lease parameters.
const (
	DefaultTTL = 10 * time.Second
)

type acquireOptions struct {
	ttl       time.Duration
	wait      time.Duration
	waitSet   bool
	margin    time.Duration
	holder    string
	requestID string
	sequencer bool
}

// Option tunes one Acquire.
type Option func(*acquireOptions)

// WithTTL sets the lease's TTL (default 10s). The service refuses TTLs
// outside its configured range with fencelock.ErrInvalidTTL.
func WithTTL(ttl time.Duration) Option { return func(o *acquireOptions) { o.ttl = ttl } }

// WithWait bounds how long Acquire queues for a held lock. Without it,
// Acquire waits until its context ends; WithWait(0) is a try-lock.
func WithWait(d time.Duration) Option {
	return func(o *acquireOptions) { o.wait, o.waitSet = d, true }
}

// WithSafetyMargin sets how long before the computed lease end the lock's
// context is cancelled (default TTL/10, at least 50ms). A larger margin
// covers more clock-rate drift between client and service; it must stay
// below 2/3 of the TTL less 20 ms (the first renewal runs at TTL/3, put
// off to the next 20 ms step so that a client's renewals go out together).
func WithSafetyMargin(d time.Duration) Option { return func(o *acquireOptions) { o.margin = d } }

// WithHolder overrides the client's holder label for this grant.
func WithHolder(h string) Option { return func(o *acquireOptions) { o.holder = h } }

// WithRequestID sets the request id (default random). Request ids are per
// lock and per Client: an Acquire through this Client with the id of the
// lock's current grant gets that grant, one with the id of a waiting
// request takes its place in the queue, and one with the id of a grant
// that ended within the last minute fails with ErrNotHolder (a grant the
// caller took back after giving up is forgotten at once, so asking again
// gets a new one). Another Client, in this process or another, with the
// same id makes a request of its own: it never gets this Client's grant,
// takes its place or cancels it. A grant found this way may be older than
// the call (an answer lost long ago), so Acquire renews it before
// returning, and the Lock's lease counts from that renewal. A request id
// is UTF-8 of at most 128 bytes with no zero byte; the node sees the
// Client's instance and a hash of it. At most 16 Acquires wait with one id
// at once; more fail with fencelock.ErrResourceExhausted.
func WithRequestID(id string) Option { return func(o *acquireOptions) { o.requestID = id } }

// WithSequencer has the grant bring its signed sequencer (Lock.Sequencer)
// at once, and renewals new ones. Without it the node signs none until
// Lock.Sequencer is first called, which then renews the lease to get one:
// a round trip, against one signature per grant saved for the many
// holders that only use the token.
func WithSequencer() Option { return func(o *acquireOptions) { o.sequencer = true } }

// validate checks the options of an Acquire of name, filling the default
// safety margin. The lock's context ends at (last confirmed renewal + ttl -
// margin), and the first renewal runs ttl/3 after the grant: a margin of
// 2/3 of the ttl or more would end every lock before its first renewal.
func (o *acquireOptions) validate(name string) error {
	if err := fencelock.LockName(name).Validate(); err != nil {
		return err
	}
	if err := fencelock.ValidateHolder(o.holder); err != nil {
		return err
	}
	if o.requestID != "" {
		if err := fencelock.ValidateRequestID(o.requestID); err != nil {
			return err
		}
	}
	if o.ttl <= 0 {
		return fmt.Errorf("ttl %v: %w", o.ttl, fencelock.ErrInvalidTTL)
	}
	if o.margin <= 0 {
		if o.margin = max(o.ttl/10, 50*time.Millisecond); 3*(o.margin+renewGrid) >= 2*o.ttl {
			return fmt.Errorf("ttl %v is too short for the default safety margin %v: %w", o.ttl, o.margin, fencelock.ErrInvalidTTL)
		}
	}
	if 3*(o.margin+renewGrid) >= 2*o.ttl {
		return fmt.Errorf("safety margin %v is not below 2/3 of ttl %v less %v (the lease would end before its first renewal): %w", o.margin, o.ttl, renewGrid, fencelock.ErrInvalidArgument)
	}
	if o.waitSet && o.wait < 0 {
		return fmt.Errorf("wait %v is negative: %w", o.wait, fencelock.ErrInvalidArgument)
	}
	return nil
}
