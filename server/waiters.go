package server

import (
	"sync"

	"github.com/fencelock/fencelock/fsm"
)

// waiters routes a grant to the Acquire call waiting for it on this node,
// by request id, the moment the granting entry is applied.
type waiters struct {
	mu sync.Mutex
	m  map[string][]chan fsm.Holder
}

func newWaiters() *waiters { return &waiters{m: make(map[string][]chan fsm.Holder)} }

// add registers a channel that receives the grant for request id rid.
func (w *waiters) add(rid string) chan fsm.Holder {
	ch := make(chan fsm.Holder, 1)
	w.mu.Lock()
	w.m[rid] = append(w.m[rid], ch)
	w.mu.Unlock()
	return ch
}

// remove unregisters ch.
func (w *waiters) remove(rid string, ch chan fsm.Holder) {
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
func (w *waiters) deliver(h fsm.Holder) {
	if h.RequestID == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.m[h.RequestID] {
		select {
		case ch <- h:
		default:
		}
	}
}

// len returns the number of waiting calls.
func (w *waiters) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
