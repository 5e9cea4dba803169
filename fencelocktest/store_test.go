package fencelocktest_test

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/store"
)

func TestStartStore(t *testing.T) {
	s := fencelocktest.StartStore(t, store.DefaultConfig())
	if _, err := s.Client.Put(t.Context(), "k", 1, strings.NewReader("v")); err != nil {
		t.Fatalf("Put to the test store returned %v", err)
	}
	if got, _ := s.Server.Highest(t.Context(), "k"); got != 1 {
		t.Fatalf("Highest(k) = %d, want 1", got)
	}
}
