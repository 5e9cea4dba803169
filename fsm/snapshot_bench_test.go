package fsm

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// BenchmarkFSM_Snapshot measures, for an FSM that remembers 200,000 ended
// grants (a busy node's dedupe window), what Snapshot costs (Raft's apply
// goroutine waits for it: no entry applies meanwhile; it copies the lock
// table, not the window) and what Persist costs (it runs beside the
// applies, and reads and encodes the window).
//
//	go test -run '^$' -bench Snapshot ./fsm/
func BenchmarkFSM_Snapshot(b *testing.B) {
	h := &harness{tb: b, f: New(time.Hour, nil), index: 10, now: int64(time.Hour)}
	const n = 200_000
	for i := range n {
		// All at one command time: none leaves the window (EndedWindow).
		c := acq("a", fmt.Sprintf("r%d", i), fmt.Sprintf("L%d", i), false)
		c.Now = int64(time.Hour)
		g := h.apply(c).Grant
		h.apply(Command{Now: int64(time.Hour), Payload: Release{Name: "a", LeaseID: g.LeaseID, Token: g.Token}})
	}
	if h.f.requests.len() != n {
		b.Fatalf("%d request ids remembered, want %d", h.f.requests.len(), n)
	}
	b.Run("Snapshot", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.f.Snapshot(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Persist", func(b *testing.B) {
		snap, err := h.f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := snap.Persist(&sink{Buffer: &buf}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len())/n, "bytes/request")
	})
}
