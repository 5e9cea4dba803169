package fence

import (
	"fmt"
	"strings"

	"github.com/fencelock/fencelock"
)

// MaxDomainLen is the longest fence domain, in bytes. It equals the longest
// object key of the store, whose keys are their own default domains.
const MaxDomainLen = 1024

// Admit applies the fencing rule to a write carrying token in a domain whose
// highest accepted token is highest. It returns nil if the write may go
// ahead, in which case the caller must store token as the domain's new
// highest in the same atomic step as the write. It returns an error wrapping
// fencelock.ErrMissingToken for token 0 and a *fencelock.StaleTokenError for
// a token lower than highest.
func Admit(domain string, highest, token fencelock.Token) error {
	if token == 0 {
		return fmt.Errorf("admit write to fence domain %q: %w", domain, fencelock.ErrMissingToken)
	}
	if token < highest {
		return &fencelock.StaleTokenError{Domain: domain, Token: token, Highest: highest}
	}
	return nil
}

// ValidateDomain reports whether domain can name a fence domain: non-empty,
// at most MaxDomainLen bytes, valid UTF-8, without control characters, and
// not beginning or ending with white space (an HTTP header drops it, so one
// name would be two domains). The error wraps fencelock.ErrInvalidName.
func ValidateDomain(domain string) error {
	if err := fencelock.ValidateText("fence domain", domain, MaxDomainLen); err != nil {
		return err
	}
	if strings.TrimSpace(domain) != domain {
		return fmt.Errorf("fence domain %q begins or ends with white space: %w", domain, fencelock.ErrInvalidName)
	}
	return nil
}
