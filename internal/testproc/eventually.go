package testproc

import (
	"testing"
	"time"
)

// Eventually fails the test unless cond holds within 10 s, looking every
// millisecond; what names the condition in the failure.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
