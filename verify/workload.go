package verify

import (
	"context"
	"fmt"
	"time"
)

// holdSlot is the client slot that, every other cycle, holds its grant
// for one to two TTLs between its acquire and its fence, kept alive only by
// the client's renewals: the server faults then find a lease in use, which
// the service must honour, or the holder's context must end before the
// lock goes to anyone else (CheckLeases).
const holdSlot = 1

// runClient is one client slot of the lock-set workload. It drives a
// worker process: acquire one of the locks, maybe renew, maybe hold it a
// while (holdSlot), raise the store's fence to its token (so a zombie holder is refused even before this
// holder writes), read the object, append its own unique element with its
// token, maybe describe, release. A worker that stops answering is killed
// and replaced by a new process number, as in Jepsen; the operation it was
// running stays an info.
func runClient(ctx context.Context, e *env, slot int) error {
	proc := slot
	w, err := startWorker(e, proc)
	if err != nil {
		return err
	}
	defer func() { w.close() }()
	broken := false
	do := func(req request) response {
		e.h.Add(Op{Process: proc, Type: Invoke, F: req.F, Lock: req.Lock, Token: req.Token,
			Value: req.Body, Elem: lastElem(req)})
		r, err := w.call(req, e.cfg.OpTimeout+5*time.Second+2*e.cfg.TTL)
		if err != nil {
			broken = true
			r = response{Type: Info, Error: err.Error()}
		}
		e.h.Add(Op{Process: proc, Type: r.Type, F: req.F, Lock: req.Lock, Token: r.Token, Lease: r.Lease,
			Value: r.Value, ETag: r.ETag, Code: r.Code, Error: r.Error, Granted: e.h.Since(r.At), End: r.End.on(e.h)})
		return r
	}
	ttl := e.cfg.TTL
	seq, cycle := 0, 0
	for ctx.Err() == nil {
		if broken {
			w.close()
			proc += 100
			if w, err = startWorker(e, proc); err != nil {
				return err
			}
			broken = false
		}
		lock := e.lockName(e.intn(e.cfg.Locks))
		a := do(request{F: FAcquire, Lock: lock, TTL: ttl, Wait: 2 * ttl})
		if a.Type != OK {
			sleep(ctx, e.between(10*time.Millisecond, 100*time.Millisecond))
			continue
		}
		tok := a.Token
		if e.intn(3) == 0 {
			do(request{F: FRenew, Lock: lock, Token: tok})
		}
		if slot == holdSlot && cycle%2 == 1 {
			sleep(ctx, e.between(ttl, 2*ttl))
		}
		if f := do(request{F: FFence, Lock: lock, Token: tok}); f.Type == OK {
			if rd := do(request{F: FRead, Lock: lock}); rd.Type == OK {
				var after func()
				if e.sc.zombie != nil && slot == 0 {
					after = e.sc.Zombie(ctx, e, w, cycle)
				}
				seq++
				elem := fmt.Sprintf("p%d-%d", proc, seq)
				do(request{F: FWrite, Lock: lock, Token: tok, Body: append(append([]string(nil), rd.Value...), elem)})
				if after != nil {
					after()
				}
			}
		}
		if e.intn(3) == 0 {
			do(request{F: FDescribe, Lock: lock})
		}
		do(request{F: FRelease, Lock: lock, Token: tok})
		cycle++
		sleep(ctx, e.between(0, 50*time.Millisecond))
	}
	return nil
}

func lastElem(r request) string {
	if r.F != FWrite || len(r.Body) == 0 {
		return ""
	}
	return r.Body[len(r.Body)-1]
}
