package fsm

// queue holds a lock's waiters in FIFO order, indexed by request id, so
// that finding, granting or cancelling one costs O(1), amortised, however
// deep the queue. A waiter taken out of the middle leaves a gap; gaps at
// either end are cut off at once, and the slots are compacted when gaps are
// more than half of them, so a compaction moves fewer waiters than the
// removals that made its gaps. The zero queue is empty.
type queue struct {
	slots []queued          // slots[i] has sequence number first+i; neither end is a gap
	first uint64            // the sequence number of slots[0]
	at    map[string]uint64 // request id -> the sequence number of its slot
	gaps  int               // slots whose waiter was taken out
}

// queued is one slot of a queue: a waiter, or a gap.
type queued struct {
	w   Waiter
	gap bool
}

// len returns how many waiters the queue holds.
func (q *queue) len() int { return len(q.at) }

// has reports whether request rid waits in the queue.
func (q *queue) has(rid string) bool {
	_, ok := q.at[rid]
	return ok
}

// get returns the waiter of request rid, if it waits.
func (q *queue) get(rid string) (Waiter, bool) {
	seq, ok := q.at[rid]
	if !ok {
		return Waiter{}, false
	}
	return q.slots[seq-q.first].w, true
}

// push appends w and reports true, or reports false and changes nothing if
// a waiter with w's request id is queued already.
func (q *queue) push(w Waiter) bool {
	if q.has(w.RequestID) {
		return false
	}
	if q.at == nil {
		q.at = make(map[string]uint64)
	}
	q.at[w.RequestID] = q.first + uint64(len(q.slots))
	q.slots = append(q.slots, queued{w: w})
	return true
}

// pop takes the first waiter out of the queue and returns it.
func (q *queue) pop() (Waiter, bool) {
	if len(q.slots) == 0 {
		return Waiter{}, false
	}
	w := q.slots[0].w
	q.remove(w.RequestID)
	return w, true
}

// remove takes request rid out of the queue and reports whether it waited
// there.
func (q *queue) remove(rid string) bool {
	seq, ok := q.at[rid]
	if !ok {
		return false
	}
	delete(q.at, rid)
	q.slots[seq-q.first] = queued{gap: true} // holds no strings
	q.gaps++
	q.trim()
	if q.gaps*2 > len(q.slots) {
		q.compact()
	}
	return true
}

// trim cuts the gaps off both ends of the slots.
func (q *queue) trim() {
	for len(q.slots) > 0 && q.slots[0].gap {
		q.slots = q.slots[1:]
		q.first++
		q.gaps--
	}
	for n := len(q.slots); n > 0 && q.slots[n-1].gap; n-- {
		q.slots = q.slots[:n-1]
		q.gaps--
	}
	if len(q.slots) == 0 {
		q.slots = nil // lets the array go
	}
}

// compact closes the gaps, keeping the order, in a new array.
func (q *queue) compact() {
	slots := make([]queued, 0, len(q.at))
	for _, s := range q.slots {
		if !s.gap {
			q.at[s.w.RequestID] = q.first + uint64(len(slots))
			slots = append(slots, s)
		}
	}
	q.slots, q.gaps = slots, 0
}

// waiters returns a copy of the waiters in FIFO order (nil if none).
func (q *queue) waiters(limit int) []Waiter {
	if q.len() == 0 {
		return nil
	}
	if limit < 0 || limit > q.len() {
		limit = q.len()
	}
	out := make([]Waiter, 0, limit)
	for _, s := range q.slots {
		if len(out) == limit {
			break
		}
		if !s.gap {
			out = append(out, s.w)
		}
	}
	return out
}
