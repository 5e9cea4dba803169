package acl

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
)

func hashOf(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }

func testACL(t *testing.T) *ACL {
	t.Helper()
	a, err := Parse(strings.NewReader("# callers\nbilling "+hashOf("b-secret")+"\nops sha256:"+hashOf("o-secret")+"\n"),
		strings.NewReader("billing lock,read billing/\nops admin *\n* read public/\n"))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestParse(t *testing.T) {
	a := testACL(t)
	if id, ok := a.TokenIdentity("b-secret"); !ok || id != "billing" {
		t.Fatalf("token identity %q %v", id, ok)
	}
	if _, ok := a.TokenIdentity("b-secre"); ok {
		t.Fatal("a wrong token was known")
	}
	for _, tt := range []struct {
		id   string
		perm Permission
		name string
		want bool
	}{
		{"billing", Lock, "billing/42", true},
		{"billing", Lock, "hr/1", false},
		{"billing", Admin, "", false},
		{"ops", Admin, "", true},
		{"ops", Lock, "billing/42", false},
		{"someone", Read, "public/x", true},
		{Anonymous, Read, "public/x", false},
		{AdminIdentity, Lock, "anything", true},
	} {
		if got := a.Allows(tt.id, tt.perm, tt.name); got != tt.want {
			t.Errorf("allows(%s, %d, %q) = %v, want %v", tt.id, tt.perm, tt.name, got, tt.want)
		}
	}
	for _, bad := range []struct{ tokens, policy string }{
		{"billing nothex", ""}, {"billing", ""}, {"", "billing write billing/"}, {"", "billing lock"},
	} {
		if _, err := Parse(strings.NewReader(bad.tokens), strings.NewReader(bad.policy)); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("Parse(%q, %q) = %v, want ErrInvalidArgument", bad.tokens, bad.policy, err)
		}
	}
}
