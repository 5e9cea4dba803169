package fsm

import (
	"hash/maphash"
	"sync/atomic"
)

// window remembers keys (requests whose grant ended, or the lease ids of
// expired grants) with an outcome, in command-time order, for the dedupe
// window. A busy node remembers millions of them; held as one object each
// (with their strings and the map entries pointing at them) they were a
// quarter of the node's processor in garbage collection, which traced
// every one on every cycle. So a window holds no pointers but one per
// chunk: fixed-size slots, their keys and lock names in a byte slice per
// chunk of slots, and a map from a hash of the key to the slot. The
// collector never looks inside them. Chunks are never copied into larger
// ones: a window of millions grows and shrinks by a chunk at a time, with
// no pause of the goroutine that applies entries.
//
// Slots are appended in order and cut off the front by prune. A slot never
// changes once appended, except died, which marks a slot whose key was
// forgotten or given a new outcome (a new slot) other than by prune. A
// snapshot keeps each chunk's slices as they are (later appends go past
// their length or into new arrays) and the drop count, so it reads the
// window as it was without copying it (see Snapshot).
type window struct {
	seed maphash.Seed
	hash func(seed maphash.Seed, key string) uint64 // maphash.String; tests make keys collide
	per  int                                        // slots a chunk holds; tests make it small
	// chunks[0].slots[i] has sequence number first+i; its first head
	// slots are pruned.
	chunks []*chunk
	first  uint64
	head   int
	// index maps the hash of each key in the window to its slot's sequence
	// number; clash holds the keys whose hash another key in the window
	// had first (rare: 64-bit hashes).
	index map[uint64]uint64
	clash map[string]uint64
	drops uint64 // slots marked died so far
}

// chunk is a window's next per slots in sequence (the last chunk fills
// up), with their keys and names.
type chunk struct {
	slots []slot // never longer than its capacity, per
	bytes []byte
}

// chunkSlots is the slots of a chunk: 160 KiB of slots.
const chunkSlots = 4096

// slot is one key's outcome. Its key and name are its chunk's bytes
// at..at+keyLen and the nameLen bytes after them.
type slot struct {
	at      uint64 // as wide as the slot has room for: a restored snapshot's keys are not bounded
	keyLen  uint32
	nameLen uint32
	token   uint64
	now     int64
	died    uint64 // the drop count when it left the window, 0 while in it; atomic (snapshots read it)
}

func newWindow() *window {
	return &window{seed: maphash.MakeSeed(), hash: maphash.String, per: chunkSlots,
		index: make(map[uint64]uint64), clash: make(map[string]uint64)}
}

// len returns how many keys the window holds.
func (w *window) len() int { return len(w.index) + len(w.clash) }

func keyOf(b []byte, s *slot) []byte {
	return b[s.at : s.at+uint64(s.keyLen)]
}

func nameOf(b []byte, s *slot) []byte {
	i := s.at + uint64(s.keyLen)
	return b[i : i+uint64(s.nameLen)]
}

// at returns the slot of sequence number seq and its chunk's bytes.
func (w *window) at(seq uint64) (*slot, []byte) {
	i := seq - w.first
	c := w.chunks[i/uint64(w.per)]
	return &c.slots[i%uint64(w.per)], c.bytes
}

// find returns key's slot and its sequence number.
func (w *window) find(key string) (*slot, uint64, bool) {
	s, seq, ok, _ := w.findHashed(key, w.hash(w.seed, key))
	return s, seq, ok
}

// findHashed is find of key whose hash is h; other reports that h stands
// for another key in the window.
func (w *window) findHashed(key string, h uint64) (s *slot, seq uint64, ok, other bool) {
	seq, other = w.index[h]
	if other {
		if s, b := w.at(seq); string(keyOf(b, s)) == key {
			return s, seq, true, false
		}
	}
	if len(w.clash) > 0 {
		if seq, ok := w.clash[key]; ok {
			s, _ := w.at(seq)
			return s, seq, true, other
		}
	}
	return nil, 0, false, other
}

// lookup returns the token recorded for key, if key is in the window with
// lock name.
func (w *window) lookup(key, name string) (token uint64, ok bool) {
	s, seq, ok := w.find(key)
	if !ok {
		return 0, false
	}
	if _, b := w.at(seq); string(nameOf(b, s)) != name {
		return 0, false
	}
	return s.token, true
}

// forget removes key from the window (a snapshot taken before still holds
// it) and reports whether it was there.
func (w *window) forget(key string) bool {
	h := w.hash(w.seed, key)
	s, seq, ok, _ := w.findHashed(key, h)
	if ok {
		w.drop(key, h, s, seq)
	}
	return ok
}

// drop marks slot s (of key, hash h, sequence number seq) died and takes
// key out of the index.
func (w *window) drop(key string, h uint64, s *slot, seq uint64) {
	w.drops++
	atomic.StoreUint64(&s.died, w.drops)
	w.unindex(key, h, seq)
}

func (w *window) unindex(key string, h, seq uint64) {
	if got, ok := w.index[h]; ok && got == seq {
		delete(w.index, h)
		return
	}
	delete(w.clash, key)
}

// put records key's outcome at command time now, replacing any earlier one.
// Times must not go back (prune cuts from the front).
func (w *window) put(key, name string, token uint64, now int64) {
	h := w.hash(w.seed, key)
	s, seq, ok, other := w.findHashed(key, h)
	if ok {
		w.drop(key, h, s, seq)
	}
	n := len(w.chunks)
	if n == 0 || len(w.chunks[n-1].slots) == w.per {
		w.chunks = append(w.chunks, &chunk{slots: make([]slot, 0, w.per)})
		n++
	}
	c := w.chunks[n-1]
	c.slots = append(c.slots, slot{at: uint64(len(c.bytes)), keyLen: uint32(len(key)), nameLen: uint32(len(name)), token: token, now: now})
	c.bytes = append(append(c.bytes, key...), name...)
	seq = w.first + uint64((n-1)*w.per+len(c.slots)-1)
	if !other {
		w.index[h] = seq
	} else {
		w.clash[key] = seq
	}
}

// prune forgets the keys recorded before cut.
func (w *window) prune(cut int64) {
	for len(w.chunks) > 0 {
		c := w.chunks[0]
		for w.head < len(c.slots) && c.slots[w.head].now < cut {
			s := &c.slots[w.head]
			if atomic.LoadUint64(&s.died) == 0 {
				// No drop mark: a snapshot taken earlier holds this slot,
				// which pruning only cuts off the window.
				key := string(keyOf(c.bytes, s))
				w.unindex(key, w.hash(w.seed, key), w.first+uint64(w.head))
			}
			w.head++
		}
		if w.head < w.per {
			return // stopped at a slot at or after cut, or the last chunk's end
		}
		w.chunks[0] = nil
		w.chunks, w.first, w.head = w.chunks[1:], w.first+uint64(w.per), 0
	}
}

// windowView is a window as it was when a snapshot was taken.
type windowView struct {
	chunks []chunk // each chunk's slices as they were
	head   int
	drops  uint64
}

func (w *window) view() windowView {
	v := windowView{chunks: make([]chunk, len(w.chunks)), head: w.head, drops: w.drops}
	for i, c := range w.chunks {
		v.chunks[i] = *c
	}
	return v
}

// each calls fn with every key that was in the window when v was taken, in
// order, until fn returns false.
func (v windowView) each(fn func(key, name []byte, token uint64, now int64) bool) {
	for i, c := range v.chunks {
		from := 0
		if i == 0 {
			from = v.head
		}
		for j := from; j < len(c.slots); j++ {
			s := &c.slots[j]
			if died := atomic.LoadUint64(&s.died); died != 0 && died <= v.drops {
				continue
			}
			if !fn(keyOf(c.bytes, s), nameOf(c.bytes, s), s.token, s.now) {
				return
			}
		}
	}
}
