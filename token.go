package fencelock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Token is a fencing token: it strictly increases with every grant of one lock
// name and is never reused, across releases, expiries, restarts and failovers.
// The zero Token is never issued; resources refuse it.
type Token uint64

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// ParseToken parses a decimal fencing token. It returns an error wrapping
// ErrMissingToken for an empty string or zero, and ErrInvalidToken for
// anything that is not a positive decimal integer.
func ParseToken(s string) (Token, error) {
	if s == "" {
		return 0, fmt.Errorf("parse token: %w", ErrMissingToken)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse token %q: %w", s, ErrInvalidToken)
	}
	if v == 0 {
		return 0, fmt.Errorf("parse token: token 0: %w", ErrMissingToken)
	}
	return Token(v), nil
}

// MaxNameLen is the longest lock name, in bytes, the service accepts.
const MaxNameLen = 512

// LockName names a lock. It is a non-empty valid UTF-8 string of at most
// MaxNameLen bytes without NUL or other control characters.
type LockName string

// Validate reports whether the name is acceptable; the error wraps
// ErrInvalidName.
func (n LockName) Validate() error { return ValidateText("lock name", string(n), MaxNameLen) }

// ValidateText checks a name-like string (a lock name, a fence domain, an
// object key): non-empty, at most maxLen bytes, valid UTF-8, without control
// characters. what names it in the error, which wraps ErrInvalidName.
func ValidateText(what, s string, maxLen int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty: %w", what, ErrInvalidName)
	case len(s) > maxLen:
		return fmt.Errorf("%s is %d bytes, the limit is %d: %w", what, len(s), maxLen, ErrInvalidName)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8: %w", what, ErrInvalidName)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s contains control character %U: %w", what, r, ErrInvalidName)
		}
	}
	return nil
}

// LeaseID is the ownership token of one grant: 128 random bits in hex. It
// has no order and is never a fencing token; it only proves, on Renew and
// Release, that the caller is the grant's holder.
type LeaseID string

// NewLeaseID returns a fresh random lease id.
func NewLeaseID() LeaseID {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on supported platforms.
		panic(fmt.Sprintf("fencelock: crypto/rand: %v", err))
	}
	return LeaseID(hex.EncodeToString(b[:]))
}

// Validate reports whether id has the shape of a lease id; the error wraps
// ErrInvalidArgument.
func (id LeaseID) Validate() error {
	if len(id) != 32 {
		return fmt.Errorf("lease id must be 32 hex digits, got %d characters: %w", len(id), ErrInvalidArgument)
	}
	if _, err := hex.DecodeString(string(id)); err != nil {
		return fmt.Errorf("lease id is not hex: %w", ErrInvalidArgument)
	}
	return nil
}

// Grant is what a successful Acquire returns: the lock, its fencing token,
// the ownership token and the lease's TTL.
type Grant struct {
	Name    LockName
	Token   Token
	LeaseID LeaseID
	TTL     time.Duration
}
