package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// entry is the deterministic content of index i written in term t.
func entry(i, t uint64) *raft.Log {
	return &raft.Log{
		Index:      i,
		Term:       t,
		Type:       raft.LogCommand,
		Data:       []byte(fmt.Sprintf("cmd-%d-%d-%s", i, t, bytes.Repeat([]byte{'x'}, int(i%17)))),
		AppendedAt: time.Unix(1700000000, int64(i)),
	}
}

func batch(from, to, term uint64) []*raft.Log {
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, entry(i, term))
	}
	return ls
}

func open(tb testing.TB, dir string, segSize int64) *Store {
	tb.Helper()
	s, err := Open(dir, Options{SegmentSize: segSize})
	if err != nil {
		tb.Fatalf("Open(%s) = %v", dir, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func mustStore(tb testing.TB, s *Store, ls []*raft.Log) {
	tb.Helper()
	if err := s.StoreLogs(ls); err != nil {
		tb.Fatalf("StoreLogs(%d..%d) = %v", ls[0].Index, ls[len(ls)-1].Index, err)
	}
}

// wantLog checks that the store holds exactly first..last, with index i
// written in term(i).
func wantLog(tb testing.TB, s *Store, first, last uint64, term func(uint64) uint64) {
	tb.Helper()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != first || l != last {
		tb.Fatalf("log spans %d..%d, want %d..%d", f, l, first, last)
	}
	for i := first; i <= last && first != 0; i++ {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			tb.Fatalf("GetLog(%d) = %v", i, err)
		}
		want := entry(i, term(i))
		if got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) || !got.AppendedAt.Equal(want.AppendedAt) {
			tb.Fatalf("entry %d = term %d %q, want term %d %q", i, got.Term, got.Data, want.Term, want.Data)
		}
	}
	var got raft.Log
	if err := s.GetLog(last+1, &got); !errors.Is(err, raft.ErrLogNotFound) {
		tb.Fatalf("GetLog(%d) past the end = %v, want ErrLogNotFound", last+1, err)
	}
	if first > 1 {
		if err := s.GetLog(first-1, &got); !errors.Is(err, raft.ErrLogNotFound) {
			tb.Fatalf("GetLog(%d) before the start = %v, want ErrLogNotFound", first-1, err)
		}
	}
}

func term1(uint64) uint64 { return 1 }

func TestStore_StoreAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 4096) // small segments: many files
	wantLog(t, s, 0, 0, term1)
	for i := uint64(1); i <= 300; i += 10 {
		mustStore(t, s, batch(i, i+9, 1))
	}
	wantLog(t, s, 1, 300, term1)
	s.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*"+segmentExt))
	if len(files) < 3 {
		t.Fatalf("%d segment files after 300 entries with 4 KiB segments, want several", len(files))
	}
	s = open(t, dir, 4096)
	wantLog(t, s, 1, 300, term1)
	mustStore(t, s, batch(301, 301, 1))
	wantLog(t, s, 1, 301, term1)
}

func TestStore_StoreLogsRefusesBadIndexes(t *testing.T) {
	s := open(t, t.TempDir(), 0)
	mustStore(t, s, batch(1, 5, 1))
	for _, tc := range []struct {
		name string
		logs []*raft.Log
	}{
		{"not after the last", batch(5, 6, 1)},
		{"going back", batch(2, 2, 1)},
		{"not consecutive", []*raft.Log{entry(6, 1), entry(8, 1)}},
	} {
		if err := s.StoreLogs(tc.logs); err == nil {
			t.Errorf("StoreLogs %s = nil, want an error", tc.name)
		}
	}
	wantLog(t, s, 1, 5, term1)
}

func TestStore_DeleteRange(t *testing.T) {
	terms := func(cut, t2 uint64) func(uint64) uint64 {
		return func(i uint64) uint64 {
			if i >= cut {
				return t2
			}
			return 1
		}
	}
	for _, tc := range []struct {
		name        string
		min, max    uint64
		first, last uint64
	}{
		{"prefix within a segment", 1, 3, 4, 100},
		{"prefix across segments", 1, 70, 71, 100},
		{"suffix within the last segment", 98, 100, 1, 97},
		{"suffix across segments", 20, 100, 1, 19},
		{"everything", 1, 100, 0, 0},
		{"more than everything", 0, 1000, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, 1024)
			for i := uint64(1); i <= 100; i += 5 {
				mustStore(t, s, batch(i, i+4, 1))
			}
			if err := s.DeleteRange(tc.min, tc.max); err != nil {
				t.Fatalf("DeleteRange(%d, %d) = %v", tc.min, tc.max, err)
			}
			wantLog(t, s, tc.first, tc.last, term1)
			// Appending after the cut, in a new term, must work and survive a restart.
			next := tc.last + 1
			if tc.last == 0 {
				next = 500 // after a snapshot: the log restarts further on
			}
			mustStore(t, s, batch(next, next+9, 2))
			first := tc.first
			if first == 0 {
				first = next
			}
			wantLog(t, s, first, next+9, terms(next, 2))
			s.Close()
			s = open(t, dir, 1024)
			f, _ := s.FirstIndex()
			if f > first {
				t.Fatalf("after reopening the log starts at %d, want at most %d", f, first)
			}
			wantLog(t, s, f, next+9, terms(next, 2))
		})
	}
}

func TestStore_DeleteRangeInTheMiddleIsRefused(t *testing.T) {
	s := open(t, t.TempDir(), 0)
	mustStore(t, s, batch(1, 10, 1))
	if err := s.DeleteRange(3, 5); err == nil {
		t.Fatalf("DeleteRange(3, 5) of 1..10 = nil, want an error")
	}
	wantLog(t, s, 1, 10, term1)
}

func TestStore_Gap(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 0)
	mustStore(t, s, batch(1, 10, 1))
	mustStore(t, s, batch(50, 60, 1)) // after an installed snapshot
	var l raft.Log
	if err := s.GetLog(30, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(30) in the gap = %v, want ErrLogNotFound", err)
	}
	if err := s.GetLog(55, &l); err != nil || l.Index != 55 {
		t.Fatalf("GetLog(55) = %v, index %d", err, l.Index)
	}
	if err := s.DeleteRange(1, 40); err != nil {
		t.Fatal(err)
	}
	wantLog(t, s, 50, 60, term1)
	s.Close()
	s = open(t, dir, 0)
	wantLog(t, s, 50, 60, term1)
}

// TestStore_StaleRecordsNeverComeBack: after a suffix is cut and new
// entries of the same size written in its place, a restart must not read
// the old entries that lay behind them.
func TestStore_StaleRecordsNeverComeBack(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 0)
	mustStore(t, s, batch(1, 4, 1))
	if err := s.DeleteRange(2, 4); err != nil {
		t.Fatal(err)
	}
	mustStore(t, s, batch(2, 2, 2)) // as long as the old entry 2: old 3 lines up behind it
	s.Close()
	s = open(t, dir, 0)
	wantLog(t, s, 1, 2, func(i uint64) uint64 { return i })
}

// TestStore_TornWrite: whatever an unfinished write left at the end of the
// last segment, reopening keeps every earlier entry and drops the rest.
func TestStore_TornWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		mess func(t *testing.T, path string, end int64, next []byte)
		// cut: Open reports a cut. The log ends at the zero fill without
		// looking further, so a record beyond a hole goes unreported.
		cut bool
	}{
		{"half a record", func(t *testing.T, path string, end int64, next []byte) {
			writeAt(t, path, end, next[:len(next)/2])
		}, true},
		{"a record with a bad checksum", func(t *testing.T, path string, end int64, next []byte) {
			bad := bytes.Clone(next)
			bad[len(bad)-1] ^= 0xff
			writeAt(t, path, end, bad)
		}, true},
		{"garbage", func(t *testing.T, path string, end int64, next []byte) {
			writeAt(t, path, end, bytes.Repeat([]byte{0xab}, 300))
		}, true},
		{"only the record after the next", func(t *testing.T, path string, end int64, next []byte) {
			after, _ := appendRecord(nil, entry(7, 1))
			writeAt(t, path, end+int64(len(next)), after)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, 0)
			mustStore(t, s, batch(1, 5, 1))
			end, path := s.segs[0].end, s.segs[0].f.Name()
			s.Close()
			next, _ := appendRecord(nil, entry(6, 1))
			tc.mess(t, path, end, next)
			s = open(t, dir, 0)
			wantLog(t, s, 1, 5, term1)
			if tc.cut && !strings.Contains(s.Cut(), "after entry 5") || !tc.cut && s.Cut() != "" {
				t.Errorf("Cut() = %q, want a cut after entry 5 reported: %v", s.Cut(), tc.cut)
			}
			mustStore(t, s, batch(6, 6, 2))
			s.Close()
			s = open(t, dir, 0)
			wantLog(t, s, 1, 6, func(i uint64) uint64 { return 1 + i/6 })
			if s.Cut() != "" {
				t.Errorf("Cut() after a clean close = %q, want \"\"", s.Cut())
			}
		})
	}
}

func TestStore_CorruptSealedSegmentIsAnError(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 512)
	for i := uint64(1); i <= 40; i += 4 {
		mustStore(t, s, batch(i, i+3, 1))
	}
	if len(s.segs) < 2 {
		t.Fatalf("want at least two segments, got %d", len(s.segs))
	}
	g := s.segs[0]
	path, off := g.f.Name(), g.offs[1]
	s.Close()
	writeAt(t, path, off+headerSize+2, []byte{0xff, 0xee})
	if _, err := Open(dir, Options{SegmentSize: 512}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a damaged sealed segment = %v, want ErrCorrupt", err)
	}
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestStore_ConcurrentReadsAndWrites(t *testing.T) {
	s := open(t, t.TempDir(), 8192)
	mustStore(t, s, batch(1, 1, 1))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				var l raft.Log
				if err := s.GetLog(last, &l); err != nil && !errors.Is(err, raft.ErrLogNotFound) {
					t.Errorf("GetLog(%d) = %v", last, err)
					return
				}
				if err := s.GetLog(first+(last-first)/2, &l); err != nil && !errors.Is(err, raft.ErrLogNotFound) {
					t.Errorf("GetLog = %v", err)
					return
				}
			}
		}()
	}
	for i := uint64(2); i <= 400; i += 3 {
		mustStore(t, s, batch(i, i+2, 1))
		if i%60 == 2 {
			if err := s.DeleteRange(1, i-20); err != nil && i > 21 {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
}

func TestRecord_RoundTrip(t *testing.T) {
	for _, l := range []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("conf")},
		{Index: 2, Term: 3, Type: raft.LogNoop},
		{Index: 3, Term: 3, Type: raft.LogCommand, Data: []byte("d"), Extensions: []byte("ext"), AppendedAt: time.Unix(5, 6)},
	} {
		rec, err := appendRecord(nil, l)
		if err != nil {
			t.Fatal(err)
		}
		var got raft.Log
		if err := decodeRecord(rec, l.Index, &got); err != nil {
			t.Fatalf("decode entry %d = %v", l.Index, err)
		}
		if got.Term != l.Term || got.Type != l.Type || !bytes.Equal(got.Data, l.Data) || !bytes.Equal(got.Extensions, l.Extensions) || !got.AppendedAt.Equal(l.AppendedAt) {
			t.Errorf("entry %d came back as %+v, want %+v", l.Index, got, *l)
		}
		if err := decodeRecord(rec, l.Index+1, &got); err == nil {
			t.Errorf("decoding entry %d as %d = nil, want an error", l.Index, l.Index+1)
		}
	}
}

// TestStore_DeletedPrefixStaysDeleted: entries removed from the front stay
// removed after a restart, also in a segment that still holds later
// entries, and also when they were a deposed leader's stale suffix that
// Raft compacted after installing a snapshot.
func TestStore_DeletedPrefixStaysDeleted(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 2048)
	mustStore(t, s, batch(1, 40, 1))
	mustStore(t, s, batch(41, 300, 2)) // never committed, say
	if err := s.DeleteRange(1, 150); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(201, 300); err != nil {
		t.Fatal(err)
	}
	mustStore(t, s, batch(201, 210, 3))
	term := func(i uint64) uint64 {
		if i > 200 {
			return 3
		}
		return 2
	}
	wantLog(t, s, 151, 210, term)
	s.Close()
	s = open(t, dir, 2048)
	wantLog(t, s, 151, 210, term)
	var l raft.Log
	if err := s.GetLog(100, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(100) after the restart = %v (term %d), want ErrLogNotFound: a deleted entry came back", err, l.Term)
	}
	// Deleting everything clears the record: a log that restarts lower is whole.
	if err := s.DeleteRange(0, 1000); err != nil {
		t.Fatal(err)
	}
	mustStore(t, s, batch(100, 105, 4))
	s.Close()
	s = open(t, dir, 2048)
	wantLog(t, s, 100, 105, func(uint64) uint64 { return 4 })
}

// An append that goes past the blocks written so far writes zeros up to the
// next fillChunk boundary (never past the segment's size), so that later
// appends land in blocks already written; the fill reads as the
// preallocated space did, and a reopen reads the same entries.
func TestStore_AppendsFillAheadWithZeros(t *testing.T) {
	readSeg := func(t *testing.T, g *segment) []byte {
		t.Helper()
		b, err := os.ReadFile(g.f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("to the next chunk", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir, 0)
		mustStore(t, s, batch(1, 5, 1))
		g := s.segs[0]
		if g.filled != fillChunk {
			t.Fatalf("after %d bytes of entries, filled to %d, want %d", g.end, g.filled, fillChunk)
		}
		b := readSeg(t, g)
		if int64(len(b)) != DefaultSegmentSize {
			t.Fatalf("segment is %d bytes, want its preallocated %d", len(b), DefaultSegmentSize)
		}
		if !allZero(b[g.end:g.filled]) {
			t.Fatal("the fill after the last entry is not zeros")
		}
		// Entries up to the fill do not write it again; the first past it
		// fills the next chunk.
		next := uint64(6)
		for g.end+300 < fillChunk {
			mustStore(t, s, batch(next, next, 1))
			next++
			if g.filled != fillChunk {
				t.Fatalf("at %d bytes of entries, filled to %d, want %d", g.end, g.filled, fillChunk)
			}
		}
		mustStore(t, s, batch(next, next+20, 1))
		if g.filled != 2*fillChunk {
			t.Fatalf("past the first chunk (%d bytes of entries), filled to %d, want %d", g.end, g.filled, 2*fillChunk)
		}
		last := next + 20
		s.Close()
		s = open(t, dir, 0)
		wantLog(t, s, 1, last, term1)
		if g := s.segs[0]; g.filled != g.end {
			t.Fatalf("after reopening, filled to %d, want the end of the entries %d", g.filled, g.end)
		}
	})
	t.Run("never past the segment size", func(t *testing.T) {
		const segSize = 10 << 10
		s := open(t, t.TempDir(), segSize)
		mustStore(t, s, batch(1, 3, 1))
		g := s.segs[0]
		if g.filled != segSize {
			t.Fatalf("filled to %d, want the segment size %d", g.filled, segSize)
		}
		if b := readSeg(t, g); len(b) != segSize || !allZero(b[g.end:]) {
			t.Fatalf("segment is %d bytes (want %d), zeros after the entries: %v", len(b), segSize, allZero(b[g.end:]))
		}
	})
}

// TestStore_FailedAppendIsScrubbed: the bytes of an append whose write or
// sync failed are overwritten with zeros before the store gives up, so the
// restart it asks for does not read them back from the page cache (the disk
// may not hold them, and records acknowledged after them would later be cut
// off at the hole). Here the failed append's records do reach the file, as
// they would reach the cache.
func TestStore_FailedAppendIsScrubbed(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	mustStore(t, s, batch(1, 5, 1))
	g := s.segs[len(s.segs)-1]
	var buf []byte
	for _, l := range batch(6, 8, 1) {
		var err error
		if buf, err = appendRecord(buf, l); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.f.WriteAt(buf, g.end); err != nil {
		t.Fatal(err)
	}
	g.scrub(int64(len(buf))) // what StoreLogs does when the sync then fails
	s.Close()
	s = open(t, dir, 1<<20)
	wantLog(t, s, 1, 5, term1)
}
