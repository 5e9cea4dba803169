package fencelock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Token is a fencing token: it strictly increases with every grant of one lock
// name and is never reused, across releases, expiries, restarts and failovers.
// The zero Token is never issued; resources refuse it.
type Token uint64

// A token is epoch × 2^TokenEpochShift + the log index of the entry that
// made the grant. A cluster starts in epoch 0 (tokens are then log indexes);
// every restore from a backup starts the next epoch, whose tokens are all
// above every token of the epochs before, whatever was issued after the
// backup. That holds while one cluster grants for a resource: every voter
// of a restored cluster must be restored with the same epoch, and two
// clusters restored into one epoch (a copy beside the original) issue the
// same tokens. Tokens stay below 2^53, so that they are exact as integers in
// every adapter and wire: PostgreSQL BIGINT, Lua and JavaScript numbers
// (doubles), JSON.
const (
	// TokenEpochShift is how many low bits of a token hold the log index.
	TokenEpochShift = 40
	// MaxTokenEpoch is the last epoch: 8,191 restores.
	MaxTokenEpoch = 1<<(53-TokenEpochShift) - 1
	// MaxTokenIndex is the last log index that can grant: a node refuses
	// to grant beyond it rather than wrap (ErrTokensExhausted).
	MaxTokenIndex = 1<<TokenEpochShift - 1
	// MaxToken is the highest token the service issues, 2^53 - 1.
	MaxToken Token = MaxTokenEpoch<<TokenEpochShift | MaxTokenIndex
)

// MakeToken returns the token of the grant made at log index in epoch, or
// an error wrapping ErrTokensExhausted if either is beyond its range (or
// index is 0).
func MakeToken(epoch, index uint64) (Token, error) {
	if epoch > MaxTokenEpoch || index == 0 || index > MaxTokenIndex {
		return 0, fmt.Errorf("token of epoch %d, log index %d: %w", epoch, index, ErrTokensExhausted)
	}
	return Token(epoch<<TokenEpochShift | index), nil
}

// Epoch returns the epoch the token was issued in.
func (t Token) Epoch() uint64 { return uint64(t) >> TokenEpochShift }

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
	if r, ok := controlIn(s); ok {
		return fmt.Errorf("%s contains control character %U: %w", what, r, ErrInvalidName)
	}
	return nil
}

// controlIn returns the first control character in s (C0, DEL or C1: a
// terminal may act on any of them), if any.
func controlIn(s string) (rune, bool) {
	for _, r := range s {
		if unicode.IsControl(r) {
			return r, true
		}
	}
	return 0, false
}

// Limits on the other fields of an acquire, checked by the service at its
// edge and by the Go client before it sends anything.
const (
	// MaxHolderLen is the longest holder label, in bytes.
	MaxHolderLen = 256
	// MaxRequestIDLen is the longest request id, in bytes.
	MaxRequestIDLen = 128
)

// ValidateHolder checks a holder label (a free-form tag that Describe
// shows): valid UTF-8 of at most MaxHolderLen bytes without control
// characters; empty is allowed. The error wraps ErrInvalidArgument.
func ValidateHolder(h string) error {
	if len(h) > MaxHolderLen || !utf8.ValidString(h) {
		return fmt.Errorf("holder label must be UTF-8 of at most %d bytes: %w", MaxHolderLen, ErrInvalidArgument)
	}
	if r, ok := controlIn(h); ok {
		return fmt.Errorf("holder label contains control character %U: %w", r, ErrInvalidArgument)
	}
	return nil
}

// ValidateRequestID checks a request id: non-empty valid UTF-8 of at most
// MaxRequestIDLen bytes with no zero byte (the lock table keys a request by
// its lock's name, a zero byte and its id). The error wraps
// ErrInvalidArgument.
func ValidateRequestID(rid string) error {
	if rid == "" || len(rid) > MaxRequestIDLen || !utf8.ValidString(rid) || strings.IndexByte(rid, 0) >= 0 {
		return fmt.Errorf("request id must be non-empty UTF-8 of at most %d bytes with no zero byte: %w", MaxRequestIDLen, ErrInvalidArgument)
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
	for i := 0; i < len(id); i++ {
		if !isHex(id[i]) {
			return fmt.Errorf("lease id is not hex: %w", ErrInvalidArgument)
		}
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Grant is what a successful Acquire returns: the lock, its fencing token,
// the ownership token, the lease's TTL, and the grant's signed proof with
// the cluster that made it.
type Grant struct {
	Name    LockName
	Token   Token
	LeaseID LeaseID
	TTL     time.Duration
	// Sequencer is the grant's signed proof (package sequencer), valid
	// until the lease ends unless renewed; "" if the request asked for
	// none, or the cluster has no signing key yet.
	Sequencer string
	ClusterID string
}
