package verify

import (
	"fmt"
	"sort"
	"time"
)

// LeaseOptions tunes CheckLeases.
type LeaseOptions struct {
	// Context also demands that each holder's Lock.Context was done before
	// the next grant, not only its own account of the lease (Lock.Err).
	// Leave it off where the nemesis freezes client processes: a frozen
	// process ends no context, which is why Lock.Err reads the deadline
	// itself.
	Context bool
	// Rewinds are the times at which the service was put back to an earlier
	// state (a backup restored into it): it no longer knows the grants made
	// since the backup, so a hand-over across one is not checked.
	Rewinds []time.Duration
}

// handover is a grant whose lease was reported (from) and the earliest
// known later grant of the same lock (to).
type handover struct {
	lock string
	from grantSeen
	end  LeaseEnd
	// released is when the harness asked the first holder to release.
	released time.Duration
	to       grantSeen
}

// lost reports whether the lease ended other than by its holder's Release
// before the later grant: the service granted on after the lease ran out.
func (h handover) lost() bool { return h.end.Cause != "released" || h.released > h.to.granted }

// grantSeen is an acknowledged grant: its token, who got it, when it
// certainly existed (the worker's Acquire had returned), and what its
// holder reported when it released it.
type grantSeen struct {
	token    uint64
	process  int
	index    int
	granted  time.Duration
	end      *LeaseEnd     // nil: not reported
	released time.Duration // when the harness asked for the release
}

// leaseStats counts what CheckLeases saw.
type leaseStats struct {
	checked    int           // hand-overs checked
	lost       int           // of them, after a lease that ended other than by Release (handover.lost)
	unreported int           // hand-overs whose first holder reported no lease end (a worker that died)
	rewound    int           // hand-overs across a rewind, not checked
	closest    time.Duration // after a lost lease: least time from the holder's last Alive to the next grant
	doneLag    time.Duration // after a lost lease: most time from the deadline to the context seen done
}

// CheckLeases checks the lease-loss deadline: a holder's lease, by its own
// account, ends before the service grants the lock to anyone else. For
// every acknowledged grant whose holder reported how its lease ended
// (LeaseEnd), and the earliest-known later grant of the same lock (any
// higher token), it is a violation if the holder still held the lease
// (LeaseEnd.Alive) after the later grant certainly existed (its Acquire
// had returned, Op.Granted); with opts.Context, also if its Lock.Context was
// still live then (LeaseEnd.CtxAlive). Both times are readings of the one
// CLOCK_MONOTONIC, taken before the observation they bound, so a violation
// reported is certain; the check can miss one shorter than a worker's look
// interval plus the time the grant's answer took.
func CheckLeases(ops []Op, opts LeaseOptions) Check {
	c, _ := checkLeases(ops, opts)
	return c
}

func checkLeases(ops []Op, opts LeaseOptions) (Check, leaseStats) {
	c := Check{Name: "lease", Valid: true}
	hs, st := handovers(ops, opts.Rewinds)
	for _, h := range hs {
		st.checked++
		to := h.to.granted
		switch {
		case h.end.Alive > to:
			c.problem("lock %s: the holder of token %d (process %d, event %d) still held its lease by its own account (Lock.Err nil) at %v, %v after token %d (process %d, event %d) had been granted (by %v); its deadline was %v, its context seen done at %v",
				h.lock, h.from.token, h.from.process, h.from.index, h.end.Alive, h.end.Alive-to, h.to.token, h.to.process, h.to.index, to, h.end.Deadline, h.end.Done)
		case opts.Context && h.end.CtxAlive > to:
			c.problem("lock %s: the context of token %d (process %d, event %d) was still live at %v, %v after token %d (process %d, event %d) had been granted (by %v); its deadline was %v",
				h.lock, h.from.token, h.from.process, h.from.index, h.end.CtxAlive, h.end.CtxAlive-to, h.to.token, h.to.process, h.to.index, to, h.end.Deadline)
		}
		if !h.lost() {
			continue
		}
		if st.lost == 0 || to-h.end.Alive < st.closest {
			st.closest = to - h.end.Alive
		}
		st.doneLag = max(st.doneLag, h.end.Done-h.end.Deadline)
		st.lost++
	}
	c.Checked = st.checked
	c.Note = fmt.Sprintf("%d hand-overs checked, %d after a lost lease, %d unreported, %d across a restore", st.checked, st.lost, st.unreported, st.rewound)
	if st.lost > 0 {
		c.Note += fmt.Sprintf("; after a lost lease, the closest call: the next grant existed %v after the holder's last look that it held the lease; contexts were seen done at most %v after their deadline",
			st.closest.Round(time.Millisecond), st.doneLag.Round(time.Millisecond))
	}
	return c, st
}

// handovers pairs every reported lease end with the earliest-known later
// grant of its lock, leaving out hand-overs across a rewind.
func handovers(ops []Op, rewinds []time.Duration) ([]handover, leaseStats) {
	var st leaseStats
	var out []handover
	for lock, gs := range grantsByLock(ops) {
		sort.Slice(gs, func(i, j int) bool {
			return gs[i].token < gs[j].token || gs[i].token == gs[j].token && gs[i].granted < gs[j].granted
		})
		var next *grantSeen // the earliest-granted of the higher tokens
		for i := len(gs) - 1; i >= 0; i-- {
			g := gs[i]
			switch {
			case next == nil:
			case g.end == nil:
				st.unreported++
			case across(rewinds, g.granted, next.granted):
				st.rewound++
			default:
				out = append(out, handover{lock: lock, from: g, end: *g.end, released: g.released, to: *next})
			}
			if next == nil || g.granted < next.granted {
				next = &gs[i]
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].from.index < out[j].from.index })
	return out, st
}

// grantsByLock collects the acknowledged grants of ops by lock, each with
// the lease end its holder reported when it released it (nil: none).
func grantsByLock(ops []Op) map[string][]grantSeen {
	type held struct {
		process int
		lock    string
	}
	grants := map[string][]grantSeen{}
	open := map[held]int{} // a process's latest grant of a lock: index in grants[lock]
	for _, p := range Pairs(ops) {
		k := held{p.Invoke.Process, p.Invoke.Lock}
		switch {
		case p.Invoke.F == FAcquire && p.Result() == OK:
			g := grantSeen{token: p.Complete.Token, process: k.process, index: p.Complete.Index, granted: p.Complete.Granted}
			if g.granted == 0 {
				g.granted = p.Complete.Time // the harness's answer came later still
			}
			open[k] = len(grants[k.lock])
			grants[k.lock] = append(grants[k.lock], g)
		case p.Invoke.F == FRelease && p.Complete != nil && p.Complete.End != nil:
			i, ok := open[k]
			if !ok || grants[k.lock][i].token != p.Invoke.Token {
				continue
			}
			g := &grants[k.lock][i]
			g.end, g.released = p.Complete.End, p.Invoke.Time
			delete(open, k)
		}
	}
	return grants
}

// across reports whether a rewind lies between times a and b.
func across(rewinds []time.Duration, a, b time.Duration) bool {
	lo, hi := min(a, b), max(a, b)
	for _, r := range rewinds {
		if lo < r && r < hi {
			return true
		}
	}
	return false
}
