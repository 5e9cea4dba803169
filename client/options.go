package client

import "time"

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
// below 2/3 of the TTL (the first renewal runs at TTL/3).
func WithSafetyMargin(d time.Duration) Option { return func(o *acquireOptions) { o.margin = d } }

// WithHolder overrides the client's holder label for this grant.
func WithHolder(h string) Option { return func(o *acquireOptions) { o.holder = h } }

// WithRequestID sets the request id (default random). An Acquire with the
// id of the lock's current grant gets that grant, one with the id of a
// waiting request takes its place in the queue, and one with the id of a
// grant that ended within the last minute fails with ErrNotHolder (a grant
// the caller took back after giving up is forgotten at once, so asking
// again gets a new one). A grant found this way may be older than the call
// (a process that used the id and died), so Acquire renews it before
// returning, and the Lock's lease counts from that renewal. That is under
// log rules 3, which a cluster runs once every node implements them
// (`fencelock status` shows the rules). Under rules 1 and 2 the service
// remembers every request id for 10 minutes from its grant; after that an
// Acquire with the id of a grant still held queues behind it (a try-lock
// gets ErrLockHeld); and under rules 1 it remembers an id for one lock at a
// time: an id reused on a second lock no longer finds its grant on the
// first. A request id is UTF-8 of at most 128 bytes with no zero byte.
func WithRequestID(id string) Option { return func(o *acquireOptions) { o.requestID = id } }
