package fence

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
)

func TestAdmit(t *testing.T) {
	tests := []struct {
		name             string
		highest, token   fencelock.Token
		wantErr          error
		wantStaleHighest fencelock.Token
	}{
		{name: "first write", highest: 0, token: 33},
		{name: "higher token", highest: 33, token: 34},
		{name: "equal token", highest: 34, token: 34},
		{name: "lower token", highest: 34, token: 33, wantErr: fencelock.ErrStaleToken, wantStaleHighest: 34},
		{name: "token 0 on a fresh domain", highest: 0, token: 0, wantErr: fencelock.ErrMissingToken},
		{name: "token 0 after writes", highest: 5, token: 0, wantErr: fencelock.ErrMissingToken},
		{name: "largest token", highest: 1, token: ^fencelock.Token(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Admit("orders", tt.highest, tt.token)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Admit(highest %d, token %d) = %v, want %v", tt.highest, tt.token, err, tt.wantErr)
			}
			var stale *fencelock.StaleTokenError
			if errors.As(err, &stale) {
				want := fencelock.StaleTokenError{Domain: "orders", Token: tt.token, Highest: tt.wantStaleHighest}
				if *stale != want {
					t.Fatalf("Admit returned %+v, want %+v", *stale, want)
				}
			}
		})
	}
}

func TestValidateDomain(t *testing.T) {
	tests := []struct {
		name    string
		domain  string
		wantErr bool
	}{
		{name: "lock name", domain: "orders/42"},
		{name: "longest", domain: strings.Repeat("a", MaxDomainLen)},
		{name: "unicode", domain: "đơn-hàng"},
		{name: "empty", domain: "", wantErr: true},
		{name: "too long", domain: strings.Repeat("a", MaxDomainLen+1), wantErr: true},
		{name: "NUL", domain: "a\x00b", wantErr: true},
		{name: "newline", domain: "a\nb", wantErr: true},
		{name: "invalid UTF-8", domain: "a\xffb", wantErr: true},
		{name: "leading space", domain: " reports", wantErr: true},
		{name: "trailing space", domain: "reports ", wantErr: true},
		{name: "inner space", domain: "monthly reports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateDomain(tt.domain)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ValidateDomain(%q) = %v, want error: %v", tt.domain, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, fencelock.ErrInvalidName) {
				t.Fatalf("ValidateDomain(%q) = %v, want it to wrap ErrInvalidName", tt.domain, err)
			}
		})
	}
}
