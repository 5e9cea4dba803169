package store

import (
	"fmt"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
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
	return validSegments("object key", key)
}

// ValidateDomain reports whether domain can name a fence domain of the
// store: a domain as fence.ValidateDomain says, whose "/"-separated
// segments are neither empty nor "." or "..", as in a key. A domain travels
// in URL paths (the fences' endpoint), where a proxy that cleans paths
// would turn "a/../b" into "b": the client would raise one domain's bar and
// be told it raised another's. The error wraps fencelock.ErrInvalidName.
func ValidateDomain(domain string) error {
	if err := fence.ValidateDomain(domain); err != nil {
		return err
	}
	return validSegments("fence domain", domain)
}

// validSegments checks that s's "/"-separated segments are neither empty
// nor "." or "..".
func validSegments(what, s string) error {
	for seg := range strings.SplitSeq(s, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%s %q has an empty path segment: %w", what, s, fencelock.ErrInvalidName)
		case ".", "..":
			return fmt.Errorf("%s %q has a %q path segment: %w", what, s, seg, fencelock.ErrInvalidName)
		}
	}
	return nil
}
