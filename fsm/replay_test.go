package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock"
)

// TestFSM_ReplicasAgree: random logs of acquires, releases, expiries and
// cancels, with a window short enough that applies prune (2 minutes for
// expired leases, 1 for ended grants). A replica restored from a snapshot
// taken at any entry (and snapshotted and restored again) that applies the
// rest of the log answers every entry as the replica that applied the whole
// log did, and ends in the same state, byte for byte.
func TestFSM_ReplicasAgree(t *testing.T) {
	t.Parallel()
	seeds := int64(150)
	if testing.Short() {
		seeds = 30
	}
	for seed := range seeds {
		rng := rand.New(rand.NewSource(seed))
		names := []fencelock.LockName{"a", "b"}
		rids := []string{"r1", "r2", "r3", "r4", "a\x00r1"} // the last holds the window keys' separator
		var log []Command
		now := int64(time.Hour)
		for i := range 300 {
			now += int64(rng.Intn(20)) * int64(time.Second)
			n := names[rng.Intn(len(names))]
			rid := rids[rng.Intn(len(rids))]
			var c Command
			switch k := rng.Intn(10); {
			case k < 4:
				c = Command{Payload: Acquire{Name: n, RequestID: rid, LeaseID: fencelock.LeaseID(fmt.Sprint("L", i)), TTL: int64(time.Second), Wait: rng.Intn(2) == 0}}
			case k < 6:
				c = Command{Payload: Release{Name: n, LeaseID: "?"}} // the holder's, filled in below
			case k < 7:
				c = Command{Payload: Expire{Name: n}}
			default:
				c = Command{Payload: CancelWait{Name: n, RequestID: rid}}
			}
			c.Now = now
			log = append(log, c)
		}
		whole := New(2*time.Minute, nil)
		var results []string
		var snaps [][]byte
		for i := range log {
			c := &log[i]
			switch p := c.Payload.(type) {
			case Release:
				if l, ok := whole.Get(p.Name); ok && l.Holder != nil && rng.Intn(4) != 0 {
					p.LeaseID, p.Token = l.Holder.LeaseID, l.Holder.Token
					c.Payload = p
				}
			case Expire:
				if l, ok := whole.Get(p.Name); ok && l.Holder != nil && rng.Intn(4) != 0 {
					p.Token = l.Holder.Token
					c.Payload = p
				}
			}
			snaps = append(snaps, snapshotBytes(t, whole))
			results = append(results, resultString(whole.Apply(&raft.Log{Index: uint64(i + 1), Data: c.Encode()}).(Result)))
		}
		final := snapshotBytes(t, whole)
		for range 5 {
			at := rng.Intn(len(log))
			once := New(2*time.Minute, nil)
			if err := once.Restore(io.NopCloser(bytes.NewReader(snaps[at]))); err != nil {
				t.Fatal(err)
			}
			f := New(2*time.Minute, nil)
			if err := f.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, once)))); err != nil {
				t.Fatal(err)
			}
			for i := at; i < len(log); i++ {
				if got := resultString(f.Apply(&raft.Log{Index: uint64(i + 1), Data: log[i].Encode()}).(Result)); got != results[i] {
					t.Fatalf("seed %d, restored at entry %d: entry %d %+v answered %s, want %s", seed, at, i, log[i], got, results[i])
				}
			}
			if got := snapshotBytes(t, f); !bytes.Equal(got, final) {
				t.Fatalf("seed %d, restored at entry %d: final state\n%s\nwant\n%s", seed, at, got, final)
			}
		}
	}
}

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := s.Persist(&sink{Buffer: &b}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func resultString(r Result) string {
	g := ""
	if r.Grant != nil {
		g = fmt.Sprintf("%+v", *r.Grant)
	}
	e := ""
	if r.Err != nil {
		e = r.Err.Error()
	}
	return fmt.Sprintf("%s|%v|%s", g, r.Queued, e)
}
