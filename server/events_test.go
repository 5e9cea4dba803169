package server

import (
	"fmt"
	"testing"
)

func TestEvents_KeepTheNewestBounded(t *testing.T) {
	var e events
	if got := e.recent(); len(got) != 0 {
		t.Fatalf("new ring: %d events", len(got))
	}
	for i := 0; i < maxEvents+10; i++ {
		e.add(Event{Kind: "grant", Lock: fmt.Sprint(i)})
	}
	got := e.recent()
	if len(got) != maxEvents {
		t.Fatalf("%d events kept, want %d", len(got), maxEvents)
	}
	if got[0].Lock != fmt.Sprint(maxEvents+9) || got[maxEvents-1].Lock != "10" {
		t.Errorf("kept %s..%s, want the newest first: %d..10", got[0].Lock, got[maxEvents-1].Lock, maxEvents+9)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Time.After(got[i-1].Time) {
			t.Fatalf("event %d is newer than event %d", i, i-1)
		}
	}
}
