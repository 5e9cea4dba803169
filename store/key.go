package store

import (
	"fmt"
	"strings"

	"github.com/fencelock/fencelock"
)

// MaxKeyLen is the longest object key, in bytes.
const MaxKeyLen = 1024

// ValidateKey reports whether key can name an object: a non-empty valid UTF-8
// string of at most MaxKeyLen bytes, without control characters (NUL
// included), whose "/"-separated segments are neither empty nor "." or "..".
// The error wraps fencelock.ErrInvalidName.
func ValidateKey(key string) error {
	if err := fencelock.ValidateText("object key", key, MaxKeyLen); err != nil {
		return err
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
