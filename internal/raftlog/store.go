package raftlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"

	"github.com/fencelock/fencelock/internal/rawio"
)

// ErrFailed is returned by every write after a write or sync failed.
var ErrFailed = errors.New("raftlog: an earlier write failed; restart to recover")

// ErrCorrupt is returned by Open when a segment that is not the last one
// holds a record that does not check out.
var ErrCorrupt = errors.New("raftlog: corrupt segment")

// DefaultSegmentSize is the size after which writes go to a new segment.
const DefaultSegmentSize = 64 << 20

// fillChunk: a write that goes past the part of a segment written so far
// carries zeros up to the next multiple of fillChunk.
//
// A segment is preallocated with fallocate, whose blocks are "unwritten"
// extents: the first write to each one changes the extent tree, and the
// fdatasync after it must commit that change to the file system's journal.
// An append of a few hundred bytes mostly stays within a block already
// written, but a batch of entries that spans several blocks paid that
// journal commit on every sync: a 7 KB append + fdatasync took 0.17 ms
// against 0.10 ms for the same append into blocks written before, on the
// machine of docs/PERFORMANCE.md. With the fill, one sync in every 64 KiB
// of log converts the blocks ahead, and the appends in between sync data
// alone. Readers are unaffected: the fill reads as zeros, as the
// preallocated space did.
const fillChunk = 64 << 10

var zeroFill [fillChunk]byte

// maxScratch: StoreLogs keeps its write buffer for the next call up to this
// capacity.
const maxScratch = 1 << 20

const segmentExt = ".seg"

// Options tunes a Store; the zero value is valid.
type Options struct {
	// SegmentSize: a new segment file is started once the current one holds
	// this many bytes. Segments are preallocated to this size. Default
	// DefaultSegmentSize.
	SegmentSize int64
}

// Store is a raft.LogStore in a directory of segment files.
type Store struct {
	dir     string
	segSize int64

	wmu sync.Mutex // serialises StoreLogs and DeleteRange
	// wbuf and woffs: StoreLogs's scratch, reused (guarded by wmu).
	wbuf  []byte
	woffs []int64

	mu     sync.RWMutex // guards everything below
	segs   []*segment   // by base index; the last one takes the writes
	first  uint64       // 0 when empty
	last   uint64
	failed error
	closed bool
	// cut describes what Open cut off the last segment ("" if nothing).
	cut string
}

var _ raft.LogStore = (*Store)(nil)

// Cut describes what Open cut off the end of the log: a write that had not
// finished (a crash), or a damaged record and everything after it, which
// Open cannot tell apart. "" if the log ended cleanly.
func (s *Store) Cut() string { return s.cut }

// segment is one file: the entries base, base+1, ... at offs.
type segment struct {
	base uint64
	f    *os.File
	offs []int64 // offs[i]: where entry base+i starts
	end  int64   // just past the last entry
	// filled: the file's blocks up to here have been written (entries or
	// zero fill), so a sync of a write below it changes no extent (see
	// fillChunk).
	filled int64
}

func (g *segment) lastIndex() uint64 { return g.base + uint64(len(g.offs)) - 1 }
func (g *segment) empty() bool       { return len(g.offs) == 0 }

func segmentName(base uint64) string { return fmt.Sprintf("%020d%s", base, segmentExt) }

// Open opens (creating if needed) the log in dir. It reads every segment,
// cuts an unfinished write off the last one and preallocates it again.
func Open(dir string, opts Options) (*Store, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("raftlog: create %s: %w", dir, err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil { // the new directory's own entry
			return nil, err
		}
	}
	s := &Store{dir: dir, segSize: opts.SegmentSize}
	hidden, err := readFirst(dir)
	if err != nil {
		return nil, err
	}
	names, err := filepath.Glob(filepath.Join(dir, "*"+segmentExt))
	if err != nil {
		return nil, fmt.Errorf("raftlog: list %s: %w", dir, err)
	}
	var bases []uint64
	for _, n := range names {
		b, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(n), segmentExt), 10, 64)
		if err != nil || b == 0 {
			return nil, fmt.Errorf("%w: unexpected file %s", ErrCorrupt, n)
		}
		bases = append(bases, b)
	}
	slices.Sort(bases)
	for i, b := range bases {
		g, err := s.load(b, i == len(bases)-1)
		if err != nil {
			s.closeFiles()
			return nil, err
		}
		if n := len(s.segs); n > 0 && !s.segs[n-1].empty() && g.base <= s.segs[n-1].lastIndex() {
			g.f.Close()
			s.closeFiles()
			return nil, fmt.Errorf("%w: segment %d overlaps the one before, which ends at %d", ErrCorrupt, g.base, s.segs[n-1].lastIndex())
		}
		s.segs = append(s.segs, g)
	}
	// Only the last segment may be empty (a crash right after creating it).
	s.segs = slices.DeleteFunc(s.segs, func(g *segment) bool {
		if g.empty() && g != s.segs[len(s.segs)-1] {
			g.f.Close()
			os.Remove(g.f.Name())
			return true
		}
		return false
	})
	s.resetBounds()
	switch {
	case hidden > s.last && len(s.segs) > 0:
		// A deleteAll was cut short: it removes segments first and the
		// marker last. Finish it.
		if err := s.deleteAll(); err != nil {
			s.closeFiles()
			return nil, err
		}
	case hidden > s.first:
		s.first = hidden // a prefix deleted before the restart stays deleted
	}
	// What the directory lists may be a killed predecessor's changes
	// (a segment created or removed) that were never synced: sync them
	// before appending after them.
	if err := syncDir(dir); err != nil {
		s.closeFiles()
		return nil, err
	}
	return s, nil
}

// load reads segment base. For the last segment it cuts the file after the
// last good record and preallocates it again; for any other, a bad record
// that is not the zero fill is corruption.
func (s *Store) load(base uint64, tail bool) (*segment, error) {
	path := filepath.Join(s.dir, segmentName(base))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", path, err)
	}
	g := &segment{base: base, f: f}
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), 1<<20)
	hdr := make([]byte, headerSize)
	var rec []byte
	var l raft.Log
	clean := true
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			break // end of file
		}
		index := base + uint64(len(g.offs))
		size, err := recordLen(hdr, index)
		if err != nil {
			clean = allZero(hdr)
			break
		}
		rec = append(rec[:0], hdr...)
		rec = slices.Grow(rec, size-headerSize)[:size]
		if _, err := io.ReadFull(r, rec[headerSize:]); err != nil {
			clean = false
			break
		}
		if decodeRecord(rec, index, &l) != nil {
			clean = false
			break
		}
		g.offs = append(g.offs, g.end)
		g.end += int64(size)
	}
	if !tail {
		if !clean {
			f.Close()
			return nil, fmt.Errorf("%w: %s: bad record at offset %d (entry %d)", ErrCorrupt, path, g.end, base+uint64(len(g.offs)))
		}
		return g, nil
	}
	if err := f.Truncate(g.end); err != nil {
		f.Close()
		return nil, fmt.Errorf("raftlog: cut unfinished write off %s: %w", path, err)
	}
	if !clean {
		s.cut = fmt.Sprintf("%s cut at offset %d, after entry %d: an unfinished write or a damaged record, and all after it", path, g.end, base+uint64(len(g.offs))-1)
	}
	g.filled = g.end
	if err := s.prealloc(f, g.end); err != nil {
		f.Close()
		return nil, err
	}
	return g, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// prealloc fills the file with zeros up to the segment size (so that
// writes do not grow the file) and syncs it.
func (s *Store) prealloc(f *os.File, from int64) error {
	if from < s.segSize {
		err := unix.Fallocate(int(f.Fd()), 0, from, s.segSize-from)
		if err != nil && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return fmt.Errorf("raftlog: preallocate %s: %w", f.Name(), err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("raftlog: sync %s: %w", f.Name(), err)
	}
	return nil
}

// resetBounds recomputes first and last from the segments. Caller holds mu
// or has the store to itself.
func (s *Store) resetBounds() {
	s.first, s.last = 0, 0
	for _, g := range s.segs {
		if g.empty() {
			continue
		}
		if s.first == 0 {
			s.first = g.base
		}
		s.last = g.lastIndex()
	}
}

// FirstIndex returns the first index written, 0 for none.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.first, nil
}

// LastIndex returns the last index written, 0 for none.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.last, nil
}

// GetLog reads entry index into l. It returns raft.ErrLogNotFound for an
// index that is not in the log.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return raft.ErrLogNotFound
	}
	if index < s.first || index > s.last || s.first == 0 {
		return raft.ErrLogNotFound
	}
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > index }) - 1
	if i < 0 {
		return raft.ErrLogNotFound
	}
	g := s.segs[i]
	if g.empty() || index > g.lastIndex() {
		return raft.ErrLogNotFound // in a gap
	}
	k := index - g.base
	end := g.end
	if k+1 < uint64(len(g.offs)) {
		end = g.offs[k+1]
	}
	rec := make([]byte, end-g.offs[k])
	if _, err := g.f.ReadAt(rec, g.offs[k]); err != nil {
		return fmt.Errorf("raftlog: read entry %d: %w", index, err)
	}
	if err := decodeRecord(rec, index, l); err != nil {
		return fmt.Errorf("raftlog: read entry %d from %s: %w", index, g.f.Name(), ErrCorrupt)
	}
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends logs, whose indexes must be consecutive and above the
// last index, and syncs once. When it returns nil they are durable.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	for i, l := range logs[1:] {
		if l.Index != logs[i].Index+1 {
			return fmt.Errorf("raftlog: entries %d and %d are not consecutive", logs[i].Index, l.Index)
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.RLock()
	err, last, closed := s.failed, s.last, s.closed
	var g *segment
	if n := len(s.segs); n > 0 {
		g = s.segs[n-1]
	}
	s.mu.RUnlock()
	switch {
	case closed:
		return errors.New("raftlog: store is closed")
	case err != nil:
		return err
	case last != 0 && logs[0].Index <= last:
		return fmt.Errorf("raftlog: entry %d is not after the last entry %d", logs[0].Index, last)
	}
	if g == nil || (!g.empty() && logs[0].Index != g.lastIndex()+1) || (g.empty() && g.base != logs[0].Index) || g.end >= s.segSize {
		// No segment yet, a gap, or the segment is full: start a new one.
		if g, err = s.newSegment(logs[0].Index); err != nil {
			return s.fail(err)
		}
	}
	size := 0
	for _, l := range logs {
		size += headerSize + payloadBase + len(l.Data) + len(l.Extensions)
	}
	buf := slices.Grow(s.wbuf[:0], size)
	offs := slices.Grow(s.woffs[:0], len(logs))[:len(logs)]
	defer func() {
		if cap(buf) <= maxScratch {
			s.wbuf, s.woffs = buf[:0], offs[:0]
		}
	}()
	for i, l := range logs {
		offs[i] = g.end + int64(len(buf))
		if buf, err = appendRecord(buf, l); err != nil {
			return err
		}
	}
	data := int64(len(buf))
	filled := g.filled
	if end := g.end + data; end > g.filled {
		filled = end
		if fillTo := min((end+fillChunk-1)/fillChunk*fillChunk, s.segSize); fillTo > end {
			buf = append(buf, zeroFill[:fillTo-end]...)
			filled = fillTo
		}
	}
	if err := rawio.Pwrite(g.f, buf, g.end); err != nil {
		g.scrub(int64(len(buf)))
		return s.fail(fmt.Errorf("raftlog: write %s: %w", g.f.Name(), err))
	}
	if err := rawio.Fdatasync(g.f); err != nil {
		g.scrub(int64(len(buf)))
		return s.fail(fmt.Errorf("raftlog: sync %s: %w", g.f.Name(), err))
	}
	s.mu.Lock()
	g.offs = append(g.offs, offs...)
	g.end += data
	g.filled = filled
	if s.first == 0 {
		s.first = logs[0].Index
	}
	s.last = logs[len(logs)-1].Index
	s.mu.Unlock()
	return nil
}

// scrub overwrites, as far as it can, the n bytes after g's end with
// zeros, after an append whose write or sync failed. Linux keeps the
// failed pages' new bytes in its cache, marked clean: a restart (which the
// failed store asks for) would read them back as records the disk may not
// have, and acknowledge later ones after them, which a later read of the
// disk would cut off at the hole. With zeros there, the log read at the
// restart ends where the last good append ended.
func (g *segment) scrub(n int64) {
	for off := int64(0); off < n; off += fillChunk {
		if _, err := g.f.WriteAt(zeroFill[:min(fillChunk, n-off)], g.end+off); err != nil {
			return
		}
	}
}

// newSegment creates the file for entries from base on, syncs its
// directory entry and makes it the last segment. An empty last segment is
// replaced.
func (s *Store) newSegment(base uint64) (*segment, error) {
	path := filepath.Join(s.dir, segmentName(base))
	s.mu.Lock()
	if n := len(s.segs); n > 0 && s.segs[n-1].empty() {
		old := s.segs[n-1]
		s.segs = s.segs[:n-1]
		old.f.Close()
		if err := os.Remove(old.f.Name()); err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("raftlog: remove empty segment: %w", err)
		}
	}
	s.mu.Unlock()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return nil, fmt.Errorf("raftlog: create segment: %w", err)
	}
	if err := s.prealloc(f, 0); err != nil {
		f.Close()
		return nil, err
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		return nil, err
	}
	g := &segment{base: base, f: f}
	s.mu.Lock()
	s.segs = append(s.segs, g)
	s.mu.Unlock()
	return g, nil
}

// DeleteRange deletes entries min through max. Raft deletes either a prefix
// (compaction), a suffix (a conflict with the leader) or everything; a
// range strictly inside the log is refused.
func (s *Store) DeleteRange(min, max uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("raftlog: store is closed")
	}
	if s.failed != nil {
		return s.failed
	}
	if s.first == 0 || max < s.first || min > s.last || min > max {
		return nil
	}
	switch {
	case min <= s.first && max >= s.last:
		return s.deleteAll()
	case min <= s.first:
		return s.deletePrefix(max)
	case max >= s.last:
		return s.deleteSuffix(min)
	default:
		return fmt.Errorf("raftlog: cannot delete entries %d-%d from the middle of %d-%d", min, max, s.first, s.last)
	}
}

// removeSegment closes g and deletes its file.
func removeSegment(g *segment) error {
	g.f.Close()
	if err := os.Remove(g.f.Name()); err != nil {
		return fmt.Errorf("raftlog: remove segment: %w", err)
	}
	return nil
}

// deleteAll removes every segment, newest first (each removal synced, so
// that a crash part way leaves a prefix of the log, still contiguous), and
// then the deleted-prefix marker.
func (s *Store) deleteAll() error {
	for len(s.segs) > 0 {
		g := s.segs[len(s.segs)-1]
		if err := removeSegment(g); err != nil {
			return s.failLocked(err)
		}
		s.segs = s.segs[:len(s.segs)-1]
		if err := syncDir(s.dir); err != nil {
			return s.failLocked(err)
		}
	}
	s.first, s.last = 0, 0
	if err := writeFirst(s.dir, 0); err != nil {
		return s.failLocked(err)
	}
	return nil
}

// deletePrefix hides entries up to max and removes the segments that hold
// nothing else. The last segment always stays.
func (s *Store) deletePrefix(max uint64) error {
	// Record the new start first: entries below it must not come back after
	// a restart (they may include a deposed leader's uncommitted entries,
	// which Raft compacts after installing a snapshot).
	if err := writeFirst(s.dir, max+1); err != nil {
		return s.failLocked(err)
	}
	for len(s.segs) > 1 && (s.segs[0].empty() || s.segs[0].lastIndex() <= max) {
		g := s.segs[0]
		if err := removeSegment(g); err != nil {
			return s.failLocked(err)
		}
		s.segs = s.segs[1:]
	}
	s.first = max + 1
	if g := s.segs[0]; s.first < g.base {
		s.first = g.base // max+1 fell into a gap
	}
	return nil
}

// deleteSuffix removes entries from min on: later segments go, the segment
// holding min is cut at min and synced.
func (s *Store) deleteSuffix(min uint64) error {
	for len(s.segs) > 0 {
		g := s.segs[len(s.segs)-1]
		if g.base < min {
			break
		}
		if err := removeSegment(g); err != nil {
			return s.failLocked(err)
		}
		s.segs = s.segs[:len(s.segs)-1]
	}
	if err := syncDir(s.dir); err != nil {
		return s.failLocked(err)
	}
	if n := len(s.segs); n > 0 {
		g := s.segs[n-1]
		if !g.empty() && min <= g.lastIndex() {
			k := min - g.base
			at := g.offs[k]
			if err := g.f.Truncate(at); err != nil {
				return s.failLocked(fmt.Errorf("raftlog: cut %s: %w", g.f.Name(), err))
			}
			if err := s.prealloc(g.f, at); err != nil {
				return s.failLocked(err)
			}
			g.offs = g.offs[:k]
			g.end = at
			g.filled = at
		}
	}
	first := s.first // entries below it were deleted before
	s.resetBounds()
	s.first = max(s.first, first)
	return nil
}

func (s *Store) fail(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failLocked(err)
}

func (s *Store) failLocked(err error) error {
	if s.failed == nil {
		s.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return err
}

// Close closes the segment files. Later calls fail.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.closeFiles()
}

func (s *Store) closeFiles() error {
	var err error
	for _, g := range s.segs {
		err = errors.Join(err, g.f.Close())
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("raftlog: open dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("raftlog: sync dir %s: %w", dir, err)
	}
	return nil
}

// firstName is the file that records the first index after a prefix was
// deleted: 8 bytes of index and a CRC-32C of them.
const firstName = "first"

// readFirst returns the recorded first index, 0 if none.
func readFirst(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, firstName))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("raftlog: read %s: %w", firstName, err)
	}
	if len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.LittleEndian.Uint32(b[8:]) {
		return 0, fmt.Errorf("%w: %s is damaged", ErrCorrupt, filepath.Join(dir, firstName))
	}
	return binary.LittleEndian.Uint64(b), nil
}

// writeFirst records first (0 removes the record) durably: a new file,
// synced, renamed over the old one, and the directory synced.
func writeFirst(dir string, first uint64) error {
	path := filepath.Join(dir, firstName)
	if first == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("raftlog: remove %s: %w", firstName, err)
		}
		return syncDir(dir)
	}
	b := binary.LittleEndian.AppendUint64(nil, first)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("raftlog: write %s: %w", firstName, err)
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("raftlog: write %s: %w", firstName, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("raftlog: write %s: %w", firstName, err)
	}
	return syncDir(dir)
}
