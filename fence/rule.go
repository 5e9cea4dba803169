package fence

import (
	"fmt"
	"unicode/utf8"

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
// at most MaxDomainLen bytes, valid UTF-8, without control characters. The
// error wraps fencelock.ErrInvalidName.
func ValidateDomain(domain string) error {
	switch {
	case domain == "":
		return fmt.Errorf("fence domain is empty: %w", fencelock.ErrInvalidName)
	case len(domain) > MaxDomainLen:
		return fmt.Errorf("fence domain is %d bytes, the limit is %d: %w", len(domain), MaxDomainLen, fencelock.ErrInvalidName)
	case !utf8.ValidString(domain):
		return fmt.Errorf("fence domain is not valid UTF-8: %w", fencelock.ErrInvalidName)
	}
	for _, r := range domain {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("fence domain contains control character %U: %w", r, fencelock.ErrInvalidName)
		}
	}
	return nil
}
