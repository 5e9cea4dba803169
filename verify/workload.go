package verify

import (
	"context"
	"fmt"
	"time"
)

// slotWorker is the worker process of one client slot. A worker that stops
// answering is killed and replaced by a new process number, as in Jepsen;
// the operation it was running stays an info.
type slotWorker struct {
	e      *env
	proc   int
	w      *workerProc
	broken bool
	seq    int // appends made, for unique elements
}

func startSlot(e *env, slot int) (*slotWorker, error) {
	w, err := startWorker(e, slot)
	if err != nil {
		return nil, err
	}
	return &slotWorker{e: e, proc: slot, w: w}, nil
}

// replace starts a new worker process if the current one stopped
// answering.
func (s *slotWorker) replace() error {
	if !s.broken {
		return nil
	}
	s.w.close()
	s.proc += 100
	w, err := startWorker(s.e, s.proc)
	if err != nil {
		return err
	}
	s.w, s.broken = w, false
	return nil
}

func (s *slotWorker) close() { s.w.close() }

// do performs req in the worker and records it in the history.
func (s *slotWorker) do(req request) response {
	e := s.e
	e.h.Add(Op{Process: s.proc, Type: Invoke, F: req.F, Lock: req.Lock, Token: req.Token,
		Value: req.Body, Elem: lastElem(req)})
	r, err := s.w.call(req, max(e.cfg.OpTimeout, req.Timeout)+5*time.Second+2*e.cfg.TTL)
	if err != nil {
		s.broken = true
		r = response{Type: Info, Error: err.Error()}
	}
	e.h.Add(Op{Process: s.proc, Type: r.Type, F: req.F, Lock: req.Lock, Token: r.Token, Lease: r.Lease,
		Value: r.Value, ETag: r.ETag, Code: r.Code, Error: r.Error, Granted: e.h.Since(r.At), End: r.End.on(e.h)})
	return r
}

// cycle is one turn of the lock-set workload on lock: acquire it (queueing
// up to wait), maybe renew, hold it for hold (kept alive by the client's
// renewals), raise the resource's fence to its token (so a zombie holder
// is refused even before this holder writes), read the object, append its
// own unique element with its token, maybe describe, release. Client slot
// 0 of a zombie scenario runs the zombie between its read and its write.
// It reports whether the lock was granted.
func (s *slotWorker) cycle(ctx context.Context, slot int, lock string, wait, hold time.Duration, n int) bool {
	e := s.e
	req := request{F: FAcquire, Lock: lock, TTL: e.cfg.TTL, Wait: wait}
	if wait > e.cfg.OpTimeout {
		req.Timeout = wait + e.cfg.OpTimeout
	}
	a := s.do(req)
	if a.Type != OK {
		return false
	}
	tok := a.Token
	if e.intn(3) == 0 {
		s.do(request{F: FRenew, Lock: lock, Token: tok})
	}
	sleep(ctx, hold)
	if f := s.do(request{F: FFence, Lock: lock, Token: tok}); f.Type == OK {
		if rd := s.do(request{F: FRead, Lock: lock}); rd.Type == OK {
			var after func()
			if e.sc.zombie != nil && slot == 0 {
				after = e.sc.Zombie(ctx, e, s.w, n)
			}
			s.seq++
			elem := fmt.Sprintf("p%d-%d", s.proc, s.seq)
			s.do(request{F: FWrite, Lock: lock, Token: tok, Body: append(append([]string(nil), rd.Value...), elem)})
			if after != nil {
				after()
			}
		}
	}
	if e.intn(3) == 0 {
		s.do(request{F: FDescribe, Lock: lock})
	}
	s.do(request{F: FRelease, Lock: lock, Token: tok})
	return true
}

// runClient is one client slot of the lock-set workload: cycles on a
// random one of the locks, queueing up to twice the TTL for it.
func runClient(ctx context.Context, e *env, slot int) error {
	s, err := startSlot(e, slot)
	if err != nil {
		return err
	}
	defer func() { s.close() }()
	for n := 0; ctx.Err() == nil; {
		if err := s.replace(); err != nil {
			return err
		}
		if !s.cycle(ctx, slot, e.lockName(e.intn(e.cfg.Locks)), 2*e.cfg.TTL, 0, n) {
			sleep(ctx, e.between(10*time.Millisecond, 100*time.Millisecond))
			continue
		}
		n++
		sleep(ctx, e.between(0, 50*time.Millisecond))
	}
	return nil
}

// holdPair is the number of client slots, after Config.Clients, that take
// turns on a lock of their own (holdLock): each holds it for one to two
// TTLs, kept alive only by the client's renewals, while the other waits in
// its queue. The server faults then find a lease in use, and the service
// grants the lock to the waiter the moment that lease ends on its side,
// which is when the lease checker's claim is tightest: the holder's
// context must have ended first.
const holdPair = 2

// holdLock is the index of the hold pair's lock (lockName): the one after
// the workload's locks.
func (e *env) holdLock() int { return e.cfg.Locks }

// runHolder is one slot of the hold pair.
func runHolder(ctx context.Context, e *env, slot int) error {
	s, err := startSlot(e, slot)
	if err != nil {
		return err
	}
	defer func() { s.close() }()
	ttl := e.cfg.TTL
	for n := 0; ctx.Err() == nil; n++ {
		if err := s.replace(); err != nil {
			return err
		}
		if !s.cycle(ctx, slot, e.lockName(e.holdLock()), 3*ttl, e.between(ttl, 2*ttl), n) {
			sleep(ctx, e.between(10*time.Millisecond, 100*time.Millisecond))
		}
	}
	return nil
}

func lastElem(r request) string {
	if r.F != FWrite || len(r.Body) == 0 {
		return ""
	}
	return r.Body[len(r.Body)-1]
}
