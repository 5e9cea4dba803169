package store

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fencelock/fencelock"
)

// MaxKeyLen is the longest object key, in bytes.
const MaxKeyLen = 1024

// ValidateKey reports whether key can name an object: a non-empty valid UTF-8
// string of at most MaxKeyLen bytes, without control characters (NUL
// included), whose "/"-separated segments are neither empty nor "." or "..".
// The error wraps fencelock.ErrInvalidName.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("object key is empty: %w", fencelock.ErrInvalidName)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("object key is %d bytes, the limit is %d: %w", len(key), MaxKeyLen, fencelock.ErrInvalidName)
	case !utf8.ValidString(key):
		return fmt.Errorf("object key is not valid UTF-8: %w", fencelock.ErrInvalidName)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("object key contains control character %U: %w", r, fencelock.ErrInvalidName)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("object key %q has an empty path segment: %w", key, fencelock.ErrInvalidName)
		case ".", "..":
			return fmt.Errorf("object key %q has a %q path segment: %w", key, seg, fencelock.ErrInvalidName)
		}
	}
	return nil
}
