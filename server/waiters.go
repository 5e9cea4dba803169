package server

import (
	"errors"
	"sync"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
)

// waiters routes a grant to the Acquire call waiting for it on this node,
// by lock name and request id (request ids are scoped per lock), the moment
// the granting entry is applied.
type waiters struct {
	mu sync.Mutex
	m  map[string][]chan waitEvent
	// came counts, per request that a call waits for, the calls that came
	// for it (waiting or not): a waiting call that gives up takes the
	// request out of the queue only if no other call came for it since
	// (that call, a retry, owns it now).
	came map[string]uint64
	// cancelling: requests a call that gave up is taking out of the
	// queue; a call that comes for one meanwhile is told to ask again.
	cancelling map[string]int
}

// waitEvent ends a wait: the grant, or why the call must stop waiting here.
type waitEvent struct {
	h   fsm.Holder
	err error // errSteppedDown or errDropped; h is then empty
}

var (
	// errSteppedDown: this node stopped being the leader; the caller
	// answers not_leader and its client asks the new leader with the same
	// request id, where the request keeps its place.
	errSteppedDown = errors.New("stopped being the leader")
	// errDropped: the request was taken out of the queue because nobody
	// claimed it (see Server.expectClaim) just as this call came for it.
	errDropped = errors.New("the queued request was dropped")
)

func newWaiters() *waiters {
	return &waiters{m: make(map[string][]chan waitEvent), came: make(map[string]uint64), cancelling: make(map[string]int)}
}

// errBeingCancelled: a call came for a request that a call that gave up is
// taking out of the queue just then; it asks again (with the same request
// id, which is then free).
var errBeingCancelled = errors.New("the request is being taken out of the queue")

// add registers a channel that receives the end of request rid's wait, and
// returns the count of calls come for it so far (see mayCancel).
// errBeingCancelled: the request is being taken out; nothing is registered.
func (w *waiters) add(name fencelock.LockName, rid string) (chan waitEvent, uint64, error) {
	ch := make(chan waitEvent, 1)
	k := waiterKey(name, rid)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancelling[k] > 0 {
		return nil, 0, errBeingCancelled
	}
	w.m[k] = append(w.m[k], ch)
	w.came[k]++
	return ch, w.came[k], nil
}

// arrived records a call (not waiting here) that came for request rid.
// errBeingCancelled: the request is being taken out.
func (w *waiters) arrived(name fencelock.LockName, rid string) error {
	k := waiterKey(name, rid)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancelling[k] > 0 {
		return errBeingCancelled
	}
	if len(w.m[k]) > 0 {
		w.came[k]++
	}
	return nil
}

// beginCancel reports whether the waiting call that registered as the
// seq-th call for request rid may take it out of the queue: no call came
// for it since. If so, calls that come meanwhile are refused until
// endCancel.
func (w *waiters) beginCancel(name fencelock.LockName, rid string, seq uint64) bool {
	k := waiterKey(name, rid)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.came[k] != seq {
		return false
	}
	w.cancelling[k]++
	return true
}

// beginUnclaimedCancel reports whether no call waits for request rid; if
// so, calls that come for it are refused until endCancel, so that none is
// handed a grant that the cancel then ends.
func (w *waiters) beginUnclaimedCancel(name fencelock.LockName, rid string) bool {
	k := waiterKey(name, rid)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m[k]) > 0 {
		return false
	}
	w.cancelling[k]++
	return true
}

// endCancel ends what beginCancel or beginUnclaimedCancel began.
func (w *waiters) endCancel(name fencelock.LockName, rid string) {
	k := waiterKey(name, rid)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancelling[k]--; w.cancelling[k] <= 0 {
		delete(w.cancelling, k)
		if len(w.m[k]) == 0 {
			delete(w.came, k)
		}
	}
}

func waiterKey(name fencelock.LockName, rid string) string { return string(name) + "\x00" + rid }

// remove unregisters ch.
func (w *waiters) remove(name fencelock.LockName, rid string, ch chan waitEvent) {
	k := waiterKey(name, rid)
	w.mu.Lock()
	defer w.mu.Unlock()
	chs := w.m[k]
	for i, c := range chs {
		if c == ch {
			chs = append(chs[:i], chs[i+1:]...)
			break
		}
	}
	if len(chs) == 0 {
		delete(w.m, k)
		if w.cancelling[k] == 0 {
			delete(w.came, k)
		}
	} else {
		w.m[k] = chs
	}
}

// has reports whether a call waits for request rid.
func (w *waiters) has(name fencelock.LockName, rid string) bool {
	return w.count(name, rid) > 0
}

// count returns how many calls wait for request rid.
func (w *waiters) count(name fencelock.LockName, rid string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m[waiterKey(name, rid)])
}

// deliver hands h to every Acquire waiting for its request id. It never
// blocks.
func (w *waiters) deliver(name fencelock.LockName, h fsm.Holder) {
	if h.RequestID == "" {
		return
	}
	w.send(waiterKey(name, h.RequestID), waitEvent{h: h})
}

// drop ends the waits for request rid with errDropped.
func (w *waiters) drop(name fencelock.LockName, rid string) {
	w.send(waiterKey(name, rid), waitEvent{err: errDropped})
}

func (w *waiters) send(k string, ev waitEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.m[k] {
		select {
		case ch <- ev:
		default: // an earlier event (a grant) is already there and wins
		}
	}
}

// failAll ends every wait with errSteppedDown. A grant already handed over
// stays in its channel and wins.
func (w *waiters) failAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, chs := range w.m {
		for _, ch := range chs {
			select {
			case ch <- waitEvent{err: errSteppedDown}:
			default:
			}
		}
	}
}

// len returns the number of waiting calls.
func (w *waiters) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
