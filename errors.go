package fencelock

import (
	"errors"
	"fmt"
	"time"
)

// The sentinel errors of fencelock. Every error the service, the client and
// the resource adapters return wraps one of these, so callers test them with
// errors.Is, also across the network: each has a stable wire code (see Code
// and ErrorForCode) that the client maps back.
var (
	// ErrLockHeld: a try-lock (or a wait that ran out) found the lock held by
	// someone else. The error is a *LockHeldError carrying the holder.
	ErrLockHeld = errors.New("lock is held")
	// ErrNotHolder: Renew or Release named a grant that is not the lock's
	// current grant (wrong lease id or token, or the lock changed hands).
	ErrNotHolder = errors.New("not the lock holder")
	// ErrLeaseExpired: the caller's lease ran out before it was renewed.
	ErrLeaseExpired = errors.New("lease expired")
	// ErrStaleToken: a resource refused a write whose fencing token is lower
	// than the highest it has accepted. The error is a *StaleTokenError.
	ErrStaleToken = errors.New("stale fencing token")
	// ErrMissingToken: a write carried no fencing token (or token 0).
	ErrMissingToken = errors.New("missing fencing token")
	// ErrInvalidToken: a fencing token is not a positive decimal integer.
	ErrInvalidToken = errors.New("invalid fencing token")
	// ErrInvalidName: a lock name (or resource key) is empty, too long,
	// not UTF-8 or contains control characters.
	ErrInvalidName = errors.New("invalid name")
	// ErrInvalidTTL: a TTL is outside the service's configured range.
	ErrInvalidTTL = errors.New("invalid ttl")
	// ErrInvalidArgument: any other malformed request.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: the named lock or object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrTooLarge: a request exceeds a configured size limit.
	ErrTooLarge = errors.New("too large")
	// ErrNotLeader: the node that answered cannot serve the request because
	// it is not the Raft leader. Retryable against another node.
	ErrNotLeader = errors.New("not the leader")
	// ErrUnavailable: the outcome of the request is unknown (leadership lost,
	// timeout, node shutting down). Retrying with the same request id is safe.
	ErrUnavailable = errors.New("unavailable, outcome unknown")
	// ErrPreconditionFailed: a conditional write's precondition (If-Match)
	// did not hold.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrUnauthenticated: a membership change without the cluster's admin
	// token (or with a wrong one).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrTokensExhausted: the cluster reached the last log index or epoch a
	// token can hold (see MaxToken); it grants no more rather than wrap.
	ErrTokensExhausted = errors.New("fencing tokens exhausted")
	// ErrInvalidSequencer: a sequencer that does not prove a grant of this
	// cluster (forged, tampered, expired, for another lock or cluster, or
	// signed with a key the verifier does not trust); package sequencer has
	// an error of its own for each reason, which wraps this one.
	ErrInvalidSequencer = errors.New("invalid sequencer")
	// ErrPermissionDenied: an authenticated caller whose policy does not
	// grant the call on that lock name.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrResourceExhausted: a limit of the service, such as the waiters a
	// lock or a caller may have queued.
	ErrResourceExhausted = errors.New("resource exhausted")
)

// Wire codes of the sentinel errors. They never change.
const (
	CodeLockHeld           = "lock_held"
	CodeNotHolder          = "not_holder"
	CodeLeaseExpired       = "lease_expired"
	CodeStaleToken         = "stale_fencing_token"
	CodeMissingToken       = "missing_fencing_token"
	CodeInvalidToken       = "invalid_fencing_token"
	CodeInvalidName        = "invalid_name"
	CodeInvalidTTL         = "invalid_ttl"
	CodeInvalidArgument    = "invalid_argument"
	CodeNotFound           = "not_found"
	CodeTooLarge           = "too_large"
	CodeNotLeader          = "not_leader"
	CodeUnavailable        = "unavailable"
	CodePreconditionFailed = "precondition_failed"
	CodeUnauthenticated    = "unauthenticated"
	CodeTokensExhausted    = "tokens_exhausted"
	CodeInvalidSequencer   = "invalid_sequencer"
	CodePermissionDenied   = "permission_denied"
	CodeResourceExhausted  = "resource_exhausted"
)

var codes = []struct {
	code string
	err  error
}{
	{CodeLockHeld, ErrLockHeld},
	{CodeNotHolder, ErrNotHolder},
	{CodeLeaseExpired, ErrLeaseExpired},
	{CodeStaleToken, ErrStaleToken},
	{CodeMissingToken, ErrMissingToken},
	{CodeInvalidToken, ErrInvalidToken},
	{CodeInvalidName, ErrInvalidName},
	{CodeInvalidTTL, ErrInvalidTTL},
	{CodeInvalidArgument, ErrInvalidArgument},
	{CodeNotFound, ErrNotFound},
	{CodeTooLarge, ErrTooLarge},
	{CodeNotLeader, ErrNotLeader},
	{CodeUnavailable, ErrUnavailable},
	{CodePreconditionFailed, ErrPreconditionFailed},
	{CodeUnauthenticated, ErrUnauthenticated},
	{CodeTokensExhausted, ErrTokensExhausted},
	{CodeInvalidSequencer, ErrInvalidSequencer},
	{CodePermissionDenied, ErrPermissionDenied},
	{CodeResourceExhausted, ErrResourceExhausted},
}

// Code returns the wire code of the first sentinel err wraps, or "" if it
// wraps none.
func Code(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

// ErrorForCode returns the sentinel with the given wire code, or nil.
func ErrorForCode(code string) error {
	for _, c := range codes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}

// StaleTokenError is returned by a resource that refused a write because its
// fencing token is lower than the highest the fence domain has accepted.
// errors.Is(err, ErrStaleToken) is true for it.
type StaleTokenError struct {
	Domain  string // the fence domain (the lock name by default)
	Token   Token  // the token the write carried
	Highest Token  // the highest token the domain had accepted
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("stale fencing token %d for domain %q: highest accepted is %d", e.Token, e.Domain, e.Highest)
}

// Unwrap returns ErrStaleToken.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// NotLeaderError is returned by a node that is not the leader. It names
// the leader's API address when the node knows it, so a client can go
// there. errors.Is(err, ErrNotLeader) is true for it.
type NotLeaderError struct {
	Node      string // the node that answered, "" if unknown
	LeaderID  string // "" if unknown
	LeaderAPI string // the leader's API address, "" if unknown
	msg       string // the message as the node sent it, on the client
}

// NewNotLeaderError is the error of a remote not_leader answer: its
// message as sent, and the leader's API address.
func NewNotLeaderError(msg, leaderAPI string) *NotLeaderError {
	return &NotLeaderError{LeaderAPI: leaderAPI, msg: msg}
}

func (e *NotLeaderError) Error() string {
	switch {
	case e.msg != "":
		return e.msg
	case e.LeaderAPI == "":
		return fmt.Sprintf("node %s is not the leader; the leader is unknown", e.Node)
	}
	return fmt.Sprintf("node %s is not the leader; the leader is %s at %s", e.Node, e.LeaderID, e.LeaderAPI)
}

// Unwrap returns ErrNotLeader.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// LockHeldError is returned when a lock could not be granted because another
// grant holds it. errors.Is(err, ErrLockHeld) is true for it.
type LockHeldError struct {
	Name    LockName
	Holder  string    // the holder label the current grant was acquired with
	Token   Token     // the current grant's fencing token
	Expires time.Time // when the current lease expires unless renewed (zero if unknown)
}

func (e *LockHeldError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("lock %q is held (token %d)", e.Name, e.Token)
	}
	return fmt.Sprintf("lock %q is held by %q (token %d)", e.Name, e.Holder, e.Token)
}

// Unwrap returns ErrLockHeld.
func (e *LockHeldError) Unwrap() error { return ErrLockHeld }
