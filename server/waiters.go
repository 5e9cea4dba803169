package server

import (
	"sync"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fsm"
)

// waiters routes a grant to the Acquire call waiting for it on this node,
// by lock name and request id (request ids are scoped per lock), the moment
// the granting entry is applied.
type waiters struct {
	mu sync.Mutex
	m  map[string][]chan fsm.Holder
}

func newWaiters() *waiters { return &waiters{m: make(map[string][]chan fsm.Holder)} }

// add registers a channel that receives the grant for request id rid.
func (w *waiters) add(name fencelock.LockName, rid string) chan fsm.Holder {
	ch := make(chan fsm.Holder, 1)
	k := waiterKey(name, rid)
	w.mu.Lock()
	w.m[k] = append(w.m[k], ch)
	w.mu.Unlock()
	return ch
}

func waiterKey(name fencelock.LockName, rid string) string { return string(name) + "\x00" + rid }

// remove unregisters ch.
func (w *waiters) remove(name fencelock.LockName, rid string, ch chan fsm.Holder) {
	rid = waiterKey(name, rid)
	w.mu.Lock()
	defer w.mu.Unlock()
	chs := w.m[rid]
	for i, c := range chs {
		if c == ch {
			chs = append(chs[:i], chs[i+1:]...)
			break
		}
	}
	if len(chs) == 0 {
		delete(w.m, rid)
	} else {
		w.m[rid] = chs
	}
}

// deliver hands h to every Acquire waiting for its request id. It never
// blocks.
func (w *waiters) deliver(name fencelock.LockName, h fsm.Holder) {
	if h.RequestID == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.m[waiterKey(name, h.RequestID)] {
		select {
		case ch <- h:
		default:
		}
	}
}

// failAll wakes every waiting Acquire with a zero Holder, meaning "this
// node stopped being the leader": the caller answers not_leader, and the
// client asks the new leader with the same request id, where it finds its
// place in the queue or the grant it got meanwhile. A grant already handed
// over stays in its channel and wins.
func (w *waiters) failAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, chs := range w.m {
		for _, ch := range chs {
			select {
			case ch <- fsm.Holder{}:
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
