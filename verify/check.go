package verify

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxProblems bounds the evidence a check keeps.
const maxProblems = 20

// Check is the verdict of one checker.
type Check struct {
	Name  string `json:"name"`
	Valid bool   `json:"valid"`
	// Unknown: the checker could not decide in time (linearizability); not
	// a violation, but not a proof either.
	Unknown  bool     `json:"unknown,omitempty"`
	Problems []string `json:"problems,omitempty"` // evidence, at most maxProblems
	Checked  int      `json:"checked"`            // how many operations (or hand-overs) it looked at
	Note     string   `json:"note,omitempty"`     // what it measured besides, in a sentence
}

func (c *Check) problem(format string, a ...any) {
	c.Valid = false
	if len(c.Problems) < maxProblems {
		c.Problems = append(c.Problems, fmt.Sprintf(format, a...))
	}
}

func (c Check) String() string {
	v := "ok"
	switch {
	case !c.Valid:
		v = "VIOLATION"
	case c.Unknown:
		v = "unknown"
	}
	unit := "ops"
	if c.Name == "lease" {
		unit = "hand-overs"
	}
	s := fmt.Sprintf("%-14s %-9s (%d %s)", c.Name, v, c.Checked, unit)
	if c.Note != "" {
		s += "\n    " + c.Note
	}
	for _, p := range c.Problems {
		s += "\n    " + p
	}
	return s
}

type grant struct {
	lock       string
	token      uint64
	start, end time.Duration
	process    int
	index      int
}

// CheckTokens checks, per lock, that the fencing tokens of acknowledged
// grants are unique and increase in real-time order: a grant that returned
// before another was invoked has the smaller token.
func CheckTokens(ops []Op) Check {
	c := Check{Name: "tokens", Valid: true}
	byLock := map[string][]grant{}
	for _, p := range Pairs(ops) {
		if p.Invoke.F != FAcquire || p.Result() != OK {
			continue
		}
		g := grant{lock: p.Invoke.Lock, token: p.Complete.Token, start: p.Invoke.Time, end: p.Complete.Time,
			process: p.Invoke.Process, index: p.Complete.Index}
		byLock[g.lock] = append(byLock[g.lock], g)
		c.Checked++
	}
	for lock, gs := range byLock {
		seen := map[uint64]grant{}
		for _, g := range gs {
			if g.token == 0 {
				c.problem("lock %s: grant to process %d (event %d) has token 0", lock, g.process, g.index)
			}
			if o, dup := seen[g.token]; dup {
				c.problem("lock %s: token %d granted twice: to process %d (event %d) and process %d (event %d)",
					lock, g.token, o.process, o.index, g.process, g.index)
			}
			seen[g.token] = g
		}
		sort.Slice(gs, func(i, j int) bool { return gs[i].end < gs[j].end })
		for i, a := range gs {
			for _, b := range gs[i+1:] {
				if a.end < b.start && a.token >= b.token {
					c.problem("lock %s: token %d (event %d, returned at %v) came before token %d (event %d, invoked at %v) in real time, but is not smaller",
						lock, a.token, a.index, a.end, b.token, b.index, b.start)
				}
			}
		}
	}
	return c
}

type write struct {
	token      uint64
	elem       string
	seq        int64 // the store's version number, -1 if unknown
	start, end time.Duration
	index      int
}

func etagSeq(etag string) int64 {
	n, err := strconv.ParseInt(strings.Trim(etag, `"W/`), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// CheckStore checks, per store domain (one object per lock): the tokens of
// accepted writes never decrease in the store's own version order, and no
// write or fence raise that finished before an accepted write began carried
// a higher token (a stale write was accepted otherwise); every acknowledged
// append is in the final object exactly once (no lost update, no
// duplicate); appends of refused writes are absent (a refused write changed
// nothing); appends of writes with unknown outcome appear at most once.
// The final object comes from the history's FFinal events.
func CheckStore(ops []Op) Check {
	c := Check{Name: "store", Valid: true}
	h := collectStore(ops, &c)
	for lock, ws := range h.writes {
		checkStoreOrder(&c, lock, ws, h.fences[lock])
		if !h.haveFinal[lock] {
			c.problem("domain %s: no final read, cannot check the appends", lock)
			continue
		}
		count := countIn(h.final[lock])
		for _, w := range ws {
			switch n := count[w.elem]; {
			case n == 0:
				c.problem("domain %s: lost update: acknowledged append %q (event %d, token %d) is not in the final object",
					lock, w.elem, w.index, w.token)
			case n > 1:
				c.problem("domain %s: append %q (event %d) is in the final object %d times", lock, w.elem, w.index, n)
			}
		}
		for e := range h.unknown[lock] {
			if count[e] > 1 {
				c.problem("domain %s: append %q (outcome unknown) is in the final object %d times", lock, e, count[e])
			}
		}
	}
	for lock, idx := range h.failed {
		if !h.haveFinal[lock] {
			continue
		}
		count := countIn(h.final[lock])
		for e, i := range idx {
			if count[e] > 0 {
				c.problem("domain %s: refused write (event %d) changed the object: its append %q is in the final object", lock, i, e)
			}
		}
	}
	return c
}

// storeHistory is a history's store events, by lock.
type storeHistory struct {
	final     map[string][]string
	haveFinal map[string]bool
	writes    map[string][]write
	fences    map[string][]write
	failed    map[string]map[string]int  // lock -> elem -> event index
	unknown   map[string]map[string]bool // lock -> elem
}

// collectStore sorts the store events of ops by lock, counting the writes
// into c.Checked.
func collectStore(ops []Op, c *Check) storeHistory {
	h := storeHistory{final: map[string][]string{}, haveFinal: map[string]bool{}, writes: map[string][]write{},
		fences: map[string][]write{}, failed: map[string]map[string]int{}, unknown: map[string]map[string]bool{}}
	for _, op := range ops {
		if op.F == FFinal && op.Type == OK {
			h.final[op.Lock] = op.Value
			h.haveFinal[op.Lock] = true
		}
	}
	for _, p := range Pairs(ops) {
		lock := p.Invoke.Lock
		switch {
		case p.Invoke.F == FFence && p.Result() == OK:
			h.fences[lock] = append(h.fences[lock], write{token: p.Invoke.Token, start: p.Invoke.Time, end: p.Complete.Time, index: p.Complete.Index})
		case p.Invoke.F == FWrite && p.Result() == OK:
			h.writes[lock] = append(h.writes[lock], write{token: p.Invoke.Token, elem: p.Invoke.Elem, seq: etagSeq(p.Complete.ETag),
				start: p.Invoke.Time, end: p.Complete.Time, index: p.Complete.Index})
			c.Checked++
		case p.Invoke.F == FWrite && p.Result() == Fail:
			if h.failed[lock] == nil {
				h.failed[lock] = map[string]int{}
			}
			h.failed[lock][p.Invoke.Elem] = p.Invoke.Index
			c.Checked++
		case p.Invoke.F == FWrite:
			if h.unknown[lock] == nil {
				h.unknown[lock] = map[string]bool{}
			}
			h.unknown[lock][p.Invoke.Elem] = true
			c.Checked++
		}
	}
	return h
}

// checkStoreOrder checks one domain's accepted writes ws (sorting them):
// tokens never decrease in the store's version order, and nothing with a
// higher token (a write or a fence raise) finished before one began.
func checkStoreOrder(c *Check, lock string, ws, fences []write) {
	sort.Slice(ws, func(i, j int) bool { return ws[i].seq < ws[j].seq })
	var prev *write
	for i := range ws {
		w := &ws[i]
		if w.seq < 0 {
			continue
		}
		if prev != nil && w.token < prev.token {
			c.problem("domain %s: stale write accepted: token %d (event %d) accepted after token %d (event %d)",
				lock, w.token, w.index, prev.token, prev.index)
		}
		prev = w
	}
	others := append(append([]write(nil), ws...), fences...)
	for _, w := range ws {
		var top *write
		for i := range others {
			if o := &others[i]; o.end < w.start && o.token > w.token && (top == nil || o.token > top.token) {
				top = o
			}
		}
		if top != nil {
			c.problem("domain %s: stale write accepted: token %d (event %d) began at %v, after token %d had been accepted (event %d, at %v)",
				lock, w.token, w.index, w.start, top.token, top.index, top.end)
		}
	}
}

func countIn(list []string) map[string]int {
	m := map[string]int{}
	for _, e := range list {
		m[e]++
	}
	return m
}
