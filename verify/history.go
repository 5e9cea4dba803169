package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// Type is the kind of a history event, as in Jepsen.
type Type string

// The event types. An invoke is followed by exactly one ok, fail or info of
// the same process. A fail means the operation certainly did not take
// effect; an info means its outcome is unknown (a timeout, lost
// leadership, a crashed client): it may take effect at any later time.
const (
	Invoke Type = "invoke"
	OK     Type = "ok"
	Fail   Type = "fail"
	Info   Type = "info"
)

// The operations (Op.F).
const (
	FAcquire  = "acquire"  // take a lock; ok carries the token and lease id
	FRenew    = "renew"    // renew a grant (Token, Lease)
	FRelease  = "release"  // release a grant (Token, Lease)
	FDescribe = "describe" // read a lock's current token (0: free)
	FFence    = "fence"    // raise the store's fence of a domain to Token
	FRead     = "read"     // read the object: Value
	FWrite    = "write"    // write the object (Value, appending Elem) with Token
	FNemesis  = "nemesis"  // a fault starting or ending (process NemesisProcess)
	FFinal    = "final"    // the final read of an object after the run
)

// NemesisProcess is the process number of nemesis events.
const NemesisProcess = -1

// Op is one event of a history.
type Op struct {
	Index   int           `json:"index"`
	Time    time.Duration `json:"time"` // since the run started, on CLOCK_MONOTONIC (monoNow)
	Process int           `json:"process"`
	Type    Type          `json:"type"`
	F       string        `json:"f"`
	Lock    string        `json:"lock,omitempty"` // lock name, also the object key and fence domain
	Token   uint64        `json:"token,omitempty"`
	Lease   string        `json:"lease,omitempty"`
	Elem    string        `json:"elem,omitempty"`  // write: the element this write appends
	Value   []string      `json:"value,omitempty"` // read/final: the list; write: the list written
	ETag    string        `json:"etag,omitempty"`  // read/write: the object version
	Code    string        `json:"code,omitempty"`  // fail/info: the error's wire code
	Error   string        `json:"error,omitempty"`
	Details string        `json:"details,omitempty"` // nemesis: what happened
	// Granted, on an acquire's ok, is when the worker's Acquire returned:
	// the grant existed by then. 0: not reported.
	Granted time.Duration `json:"granted,omitempty"`
	// End, on a release's completion, is what the holder saw of its
	// lease's end. nil: not reported.
	End *LeaseEnd `json:"end,omitempty"`
}

// LeaseEnd is what a worker saw of one grant's lease ending, on the
// history's clock. A worker looks at its lock every few milliseconds, and
// once more just before it releases it; each look reads the clock first.
type LeaseEnd struct {
	// Alive is the last look at which the holder still held the lease by
	// its own account: the lock's context not done and its deadline not
	// passed (Lock.Err would have returned nil). The holder's view
	// therefore ended after Alive. 0: never seen so.
	Alive time.Duration `json:"alive,omitempty"`
	// CtxAlive is the last look at which the lock's context was not done,
	// deadline or not: the context ended after CtxAlive. 0: never seen so.
	CtxAlive time.Duration `json:"ctx_alive,omitempty"`
	// Done is read just after the context was seen done: it ended before.
	Done time.Duration `json:"done"`
	// Deadline is the lease's deadline (last confirmed renewal + TTL -
	// safety margin) as it stood when the context ended.
	Deadline time.Duration `json:"deadline"`
	// Cause is "released" for an end by Release, and otherwise the error
	// code of the context's cause (lease_expired, not_holder; "lost" if it
	// has none).
	Cause string `json:"cause"`
}

// History records events from many goroutines on CLOCK_MONOTONIC, the
// clock every process of the run reads.
type History struct {
	start time.Duration // monoNow when the history started
	mu    sync.Mutex
	ops   []Op
}

// NewHistory starts a history; times are measured from now.
func NewHistory() *History { return &History{start: monoNow()} }

// Now returns the time since the history started.
func (h *History) Now() time.Duration { return monoNow() - h.start }

// Since returns the CLOCK_MONOTONIC reading mono (taken in any process of
// the machine) as a time of the history; 0 stays 0 (no reading).
func (h *History) Since(mono time.Duration) time.Duration {
	if mono == 0 {
		return 0
	}
	return mono - h.start
}

// Add stamps op with the next index and the current time and records it.
// It returns the stamped op.
func (h *History) Add(op Op) Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.Index = len(h.ops)
	op.Time = monoNow() - h.start
	h.ops = append(h.ops, op)
	return op
}

// Ops returns a copy of the events so far.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// WriteFile writes ops as JSON lines.
func WriteFile(path string, ops []Op) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			f.Close()
			return fmt.Errorf("write history: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write history: %w", err)
	}
	return f.Close()
}

// ReadFile reads a history written by WriteFile.
func ReadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	defer f.Close()
	var ops []Op
	dec := json.NewDecoder(f)
	for dec.More() {
		var op Op
		if err := dec.Decode(&op); err != nil {
			return nil, fmt.Errorf("read history %s: %w", path, err)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// Pair is an invocation and its completion. Complete is nil when the
// history ended first (treated like info: outcome unknown).
type Pair struct {
	Invoke   Op
	Complete *Op
}

// Result is the completion's type, Info if there is none.
func (p Pair) Result() Type {
	if p.Complete == nil {
		return Info
	}
	return p.Complete.Type
}

// End is the completion time, or end if there is none or it is an info
// (an unknown outcome may take effect at any time later).
func (p Pair) End(end time.Duration) time.Duration {
	if p.Complete == nil || p.Complete.Type == Info {
		return end
	}
	return p.Complete.Time
}

// Pairs matches each invoke with the next completion of the same process,
// in invocation order. Nemesis and final events are left out.
func Pairs(ops []Op) []Pair {
	open := map[int]int{} // process -> index in out
	var out []Pair
	for _, op := range ops {
		if op.Process == NemesisProcess || op.F == FNemesis || op.F == FFinal {
			continue
		}
		if op.Type == Invoke {
			open[op.Process] = len(out)
			out = append(out, Pair{Invoke: op})
			continue
		}
		i, ok := open[op.Process]
		if !ok {
			continue
		}
		c := op
		out[i].Complete = &c
		delete(open, op.Process)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Invoke.Time < out[j].Invoke.Time })
	return out
}

// EndTime is the time of the last event, plus one nanosecond.
func EndTime(ops []Op) time.Duration {
	var end time.Duration
	for _, op := range ops {
		end = max(end, op.Time)
	}
	return end + 1
}
