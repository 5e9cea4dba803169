package conformance

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Outcomes of a case.
const (
	Pass = "pass"
	Fail = "fail"
	Skip = "skip"
)

// Result is the outcome of one case run by Run.
type Result struct {
	Case     string        `json:"case"`
	Outcome  string        `json:"outcome"` // Pass, Fail or Skip
	Messages []string      `json:"messages,omitempty"`
	Elapsed  time.Duration `json:"elapsed_ns"`
}

// Run runs every case against target, one after another, and returns
// their results; progress, if not nil, is called after each. A case that
// panics fails with the panic's message. ctx bounds the whole run.
func Run(ctx context.Context, target Target, progress func(Result)) []Result {
	var out []Result
	for _, c := range Cases() {
		start := time.Now()
		r := runCase(ctx, c, target)
		r.Elapsed = time.Since(start)
		out = append(out, r)
		if progress != nil {
			progress(r)
		}
	}
	return out
}

func runCase(ctx context.Context, c Case, target Target) Result {
	rt := &runner{ctx: ctx, name: c.Name}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				rt.Errorf("panic: %v", p)
			}
		}()
		c.Run(rt, target)
	}()
	<-done
	rt.mu.Lock()
	defer rt.mu.Unlock()
	res := Result{Case: c.Name, Outcome: Pass, Messages: rt.messages}
	switch {
	case rt.failed:
		res.Outcome = Fail
	case rt.skipped:
		res.Outcome = Skip
	}
	return res
}

// runner is the T of a case that Run runs.
type runner struct {
	ctx  context.Context
	name string

	mu       sync.Mutex
	messages []string
	failed   bool
	skipped  bool
}

func (r *runner) Helper()                  {}
func (r *runner) Name() string             { return r.name }
func (r *runner) Context() context.Context { return r.ctx }

func (r *runner) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.messages = append(r.messages, fmt.Sprintf(format, args...))
}

func (r *runner) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *runner) Skip(args ...any) {
	r.mu.Lock()
	r.skipped = true
	r.messages = append(r.messages, fmt.Sprint(args...))
	r.mu.Unlock()
	runtime.Goexit()
}
