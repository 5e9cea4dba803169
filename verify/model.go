package verify

import (
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// lockInput is an operation on one lock, as the model sees it.
type lockInput struct {
	F     string // FAcquire, FRenew, FRelease, FDescribe
	Lock  string
	Token uint64 // renew, release: the grant's token
}

// lockOutput is its outcome.
type lockOutput struct {
	Type  Type   // OK, Fail or Info
	Token uint64 // acquire ok: the token; describe ok: the holder's token, 0 if free
}

// lockState is the fenced-lease model's state of one lock.
type lockState struct {
	Holder uint64 // token of the current grant, 0 if free (or unknown)
	Last   uint64 // highest token granted so far
	// Unseen: an acquire with unknown outcome may have granted a token
	// nobody saw; a describe may reveal it.
	Unseen bool
}

// leaseModel is a nondeterministic sequential specification of one lock
// with leases and fencing tokens. A lease may expire at any moment, so an
// acquire may succeed while the lock looks held, and a describe may find it
// free; but every grant's token exceeds every earlier one, renew and
// release succeed only for the current grant, and a release or a refused
// renew ends that grant for good.
func leaseModel() porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var names []string
			for _, op := range h {
				n := op.Input.(lockInput).Lock
				if _, ok := by[n]; !ok {
					names = append(names, n)
				}
				by[n] = append(by[n], op)
			}
			sort.Strings(names)
			var out [][]porcupine.Operation
			for _, n := range names {
				out = append(out, by[n])
			}
			return out
		},
		Init: func() []any { return []any{lockState{}} },
		Step: func(st, in, out any) []any {
			s, i, o := st.(lockState), in.(lockInput), out.(lockOutput)
			return stepLease(s, i, o)
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(lockInput), out.(lockOutput)
			switch {
			case i.F == FAcquire && o.Type == OK:
				return fmt.Sprintf("acquire -> token %d", o.Token)
			case i.F == FAcquire:
				return "acquire -> " + string(o.Type)
			case i.F == FDescribe && o.Type == OK:
				return fmt.Sprintf("describe -> %d", o.Token)
			default:
				return fmt.Sprintf("%s(%d) -> %s", i.F, i.Token, o.Type)
			}
		},
		DescribeState: func(st any) string {
			s := st.(lockState)
			u := ""
			if s.Unseen {
				u = " (+unseen grant)"
			}
			return fmt.Sprintf("holder %d, last %d%s", s.Holder, s.Last, u)
		},
	}
}

func stepLease(s lockState, i lockInput, o lockOutput) []any {
	ended := lockState{Holder: 0, Last: s.Last, Unseen: s.Unseen}
	switch i.F {
	case FAcquire:
		switch o.Type {
		case OK:
			if o.Token <= s.Last {
				return nil
			}
			return []any{lockState{Holder: o.Token, Last: o.Token}}
		case Fail: // held: by someone we know, or by an unseen grant
			if s.Holder != 0 || s.Unseen {
				return []any{s}
			}
			return nil
		default: // unknown: not granted, or granted a token nobody saw
			return []any{s, lockState{Last: s.Last, Unseen: true}}
		}
	case FRenew, FRelease:
		current := s.Holder == i.Token && i.Token != 0
		switch o.Type {
		case OK:
			if !current {
				return nil
			}
			if i.F == FRelease {
				return []any{ended}
			}
			return []any{s}
		case Fail: // not the holder, or the lease expired just now
			if current {
				return []any{ended}
			}
			return []any{s}
		default:
			if current {
				return []any{s, ended}
			}
			return []any{s}
		}
	case FDescribe:
		if o.Type != OK {
			return []any{s}
		}
		switch {
		case o.Token == 0: // free (the lease may have expired)
			return []any{ended}
		case o.Token == s.Holder:
			return []any{s}
		case s.Unseen && o.Token > s.Last:
			return []any{lockState{Holder: o.Token, Last: o.Token}}
		}
		return nil
	}
	return nil
}

// CheckLinearizable checks that the acquire, renew, release and describe
// operations of each lock are linearizable against the fenced-lease model.
// Operations with unknown outcome stay open until the end of the history.
// On a violation, and when vizPath is not empty, it writes porcupine's HTML
// visualisation there.
func CheckLinearizable(ops []Op, timeout time.Duration, vizPath string) Check {
	c := Check{Name: "linearizable", Valid: true}
	end := EndTime(ops)
	var hist []porcupine.Operation
	procs := map[int]int{}
	for _, p := range Pairs(ops) {
		switch p.Invoke.F {
		case FAcquire, FRenew, FRelease, FDescribe:
		default:
			continue
		}
		out := lockOutput{Type: p.Result()}
		if p.Complete != nil && p.Complete.Type == OK {
			out.Token = p.Complete.Token
		}
		if _, ok := procs[p.Invoke.Process]; !ok {
			procs[p.Invoke.Process] = len(procs)
		}
		hist = append(hist, porcupine.Operation{
			ClientId: procs[p.Invoke.Process],
			Input:    lockInput{F: p.Invoke.F, Lock: p.Invoke.Lock, Token: p.Invoke.Token},
			Call:     int64(p.Invoke.Time),
			Output:   out,
			Return:   int64(p.End(end)),
		})
	}
	c.Checked = len(hist)
	nm := leaseModel()
	model := nm.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, hist, timeout)
	switch res {
	case porcupine.Illegal:
		c.problem("the history of acquire/renew/release/describe is not linearizable against the fenced-lease model")
		if vizPath != "" {
			if err := porcupine.VisualizePath(model, info, vizPath); err != nil {
				c.problem("write visualisation: %v", err)
			} else {
				c.problem("visualisation: %s", filepath.Base(vizPath))
			}
		}
	case porcupine.Unknown:
		c.Unknown = true
	}
	return c
}
