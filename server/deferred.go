package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/fsm"
)

// deferWindow is the longest a waiting acquire's entry is held back.
const deferWindow = time.Millisecond

// deferrals holds back the entries of acquires that will only join a wait
// queue (their lock is held by another grant) until the next entry anyone
// proposes, or deferWindow. Nothing waits on such an entry's sync but the
// caller's "you are queued", and the grant it waits for comes with a later
// entry anyway. Sent at once, it takes a sync of its own, which the
// release that hands the lock on then waits behind: under a busy hand-off,
// every grant cost about two syncs. Held back, it shares the release's
// sync. A release, expiry or free acquire flushes the held entries first,
// so they keep their arrival order and a lock freed meanwhile is granted
// to them in FIFO order as before.
type deferrals struct {
	s      *Server
	window time.Duration // deferWindow; tests set it
	n      atomic.Int32  // len(held), read without the lock by every proposal
	mu     sync.Mutex
	held   []deferred
	timer  *time.Timer
}

type deferred struct {
	cmd fsm.Command
	to  chan raft.ApplyFuture // gets the entry's future once it is proposed
}

func newDeferrals(s *Server) *deferrals {
	d := &deferrals{s: s, window: deferWindow}
	d.timer = time.AfterFunc(time.Hour, d.flush)
	d.timer.Stop()
	return d
}

// hold keeps cmd back; its future arrives on the returned channel.
func (d *deferrals) hold(cmd fsm.Command) <-chan raft.ApplyFuture {
	to := make(chan raft.ApplyFuture, 1)
	d.mu.Lock()
	d.held = append(d.held, deferred{cmd: cmd, to: to})
	if d.n.Add(1) == 1 {
		d.timer.Reset(d.window)
	}
	d.mu.Unlock()
	return to
}

// flush proposes every held entry, in the order they came. It holds the
// lock while it does, so that a hold after a flush never overtakes an
// entry that flush proposes. All of them together wait at most
// ApplyTimeout for room in Raft's queue (a stalled disk); the ones left
// then fail as a proposal that found no room does.
func (d *deferrals) flush() {
	if d.n.Load() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timer.Stop()
	deadline := time.Now().Add(d.s.cfg.ApplyTimeout)
	for _, h := range d.held {
		left := time.Until(deadline)
		if left <= 0 {
			h.to <- failedFuture{raft.ErrEnqueueTimeout}
			continue
		}
		h.to <- d.s.proposeBy(h.cmd, left)
	}
	clear(d.held)
	d.held = d.held[:0]
	d.n.Store(0)
}

// withdraw takes back the held entry whose future goes to later, and
// reports whether it was still held (so it will never be proposed).
func (d *deferrals) withdraw(later <-chan raft.ApplyFuture) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, h := range d.held {
		if h.to == later {
			d.held = append(d.held[:i], d.held[i+1:]...)
			d.n.Add(-1)
			return true
		}
	}
	return false
}

// failedFuture is the future of an entry that never reached Raft.
type failedFuture struct{ err error }

func (f failedFuture) Error() error          { return f.err }
func (f failedFuture) Index() uint64         { return 0 }
func (f failedFuture) Response() interface{} { return nil }
