package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/netproxy"
	"github.com/fencelock/fencelock/internal/tlsconf"
)

// request is one operation the harness asks a worker process to perform.
type request struct {
	ID    int           `json:"id"`
	F     string        `json:"f"`
	Lock  string        `json:"lock"`
	TTL   time.Duration `json:"ttl,omitempty"`
	Wait  time.Duration `json:"wait,omitempty"`
	Token uint64        `json:"token,omitempty"`
	Body  []string      `json:"body,omitempty"`
	// Timeout bounds the operation in the worker instead of the setup's
	// operation timeout (an acquire that queues for longer).
	Timeout time.Duration `json:"timeout,omitempty"`
}

// response is its outcome.
type response struct {
	ID    int      `json:"id"`
	Type  Type     `json:"type"`
	Token uint64   `json:"token,omitempty"`
	Lease string   `json:"lease,omitempty"`
	Value []string `json:"value,omitempty"`
	ETag  string   `json:"etag,omitempty"`
	Code  string   `json:"code,omitempty"`
	Error string   `json:"error,omitempty"`
	// At, on an acquire's ok, is the CLOCK_MONOTONIC reading taken when
	// Acquire returned.
	At time.Duration `json:"at,omitempty"`
	// End, on a release's answer, is how the grant's lease ended.
	End *leaseReport `json:"end,omitempty"`
}

// workerSetup is the first line the harness sends a worker: what to talk
// to. It goes over stdin rather than the command line, so that a resource
// URL with a password does not show in the process list.
type workerSetup struct {
	Endpoints []string      `json:"endpoints"` // lock service API addresses (the worker's proxies)
	Resource  string        `json:"resource"`  // spec for WorkerConfig.Open
	Fencing   bool          `json:"fencing"`   // false only in the negative control
	OpTimeout time.Duration `json:"op_timeout"`
	// LateBy, in the negative control of the lease checker, makes the
	// worker hold each lease by this long past the client's deadline
	// (lateLease); 0 otherwise.
	LateBy time.Duration `json:"late_by,omitempty"`
	// TLS names the client certificate, its key and the CA of a TLS run.
	TLS *tlsconf.Files `json:"tls,omitempty"`
}

// WorkerConfig configures a worker process.
type WorkerConfig struct {
	// Open opens the resource the worker writes to; nil means
	// OpenResource (the object store, PostgreSQL, Redis). A program that
	// verifies its own resource adapter sets it (see Config.Worker).
	Open   OpenFunc
	Logger *slog.Logger
}

// RunWorker is the client process of the harness ("fencelock verify
// worker", or a program of your own for a custom Resource; the harness
// starts it with Config.Worker). It reads a setup line (the lock service's
// endpoints, the resource, the operation timeout) and then one JSON
// request per line from in, performs each with the Go client and the
// resource, and writes one JSON response per line to out. It holds its
// grants with the client's keep-alive, so stopping the process freezes the
// keep-alive too. It answers the setup line once the resource is open (or
// could not be opened). It returns when in ends, or with an error when the
// setup line is bad or the resource cannot be opened.
func RunWorker(ctx context.Context, cfg WorkerConfig, in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	if !sc.Scan() {
		return sc.Err()
	}
	var setup workerSetup
	if err := json.Unmarshal(sc.Bytes(), &setup); err != nil || len(setup.Endpoints) == 0 || setup.OpTimeout <= 0 {
		return fmt.Errorf("worker: bad setup line (want JSON with endpoints, resource, op_timeout): %v", err)
	}
	ccfg := client.DefaultConfig(setup.Endpoints...)
	ccfg.Holder = fmt.Sprintf("verify-worker/%d", os.Getpid())
	ccfg.AttemptTimeout = time.Second
	ccfg.RetryTimeout = setup.OpTimeout
	ccfg.MaxRetryBackoff = 200 * time.Millisecond
	if setup.TLS != nil {
		tc, err := tlsconf.Client(*setup.TLS)
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		ccfg.TLS = tc
	}
	if cfg.Logger != nil {
		ccfg.Logger = cfg.Logger
	}
	c, err := client.NewFromConfig(ccfg)
	if err != nil {
		return err
	}
	defer c.Close()
	open := cfg.Open
	if open == nil {
		open = OpenResource
	}
	enc := json.NewEncoder(out)
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	res, err := open(octx, setup.Resource)
	cancel()
	if err != nil {
		_ = enc.Encode(response{Type: Fail, Error: err.Error()})
		return fmt.Errorf("worker: %w", err)
	}
	if c, ok := res.(io.Closer); ok {
		defer c.Close()
	}
	if err := enc.Encode(response{Type: OK}); err != nil { // ready
		return fmt.Errorf("worker: write response: %w", err)
	}
	held := &holdings{m: map[string]*holding{}, lateBy: setup.LateBy}
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("worker: bad request: %w", err)
		}
		octx, cancel := context.WithTimeout(ctx, max(setup.OpTimeout, req.Timeout))
		if !setup.Fencing && (req.F == FFence || req.F == FWrite) {
			req.Token = uint64(unfencedToken)
		}
		resp := perform(octx, c, res, held, req)
		cancel()
		resp.ID = req.ID
		if err := enc.Encode(resp); err != nil {
			return fmt.Errorf("worker: write response: %w", err)
		}
	}
	return sc.Err()
}

// classify turns an error into a fail (certainly no effect) when it wraps
// one of definite, and into an info (outcome unknown) otherwise.
func classify(err error, definite ...error) response {
	for _, d := range definite {
		if errors.Is(err, d) {
			return response{Type: Fail, Code: fencelock.Code(err), Error: err.Error()}
		}
	}
	return response{Type: Info, Code: fencelock.Code(err), Error: err.Error()}
}

func etag(version int64) string {
	if version <= 0 {
		return ""
	}
	return strconv.FormatInt(version, 10)
}

// holdings are the grants a worker holds, by lock name.
type holdings struct {
	m      map[string]*holding
	lateBy time.Duration // WorkerSetup.LateBy
}

// holding is one held grant and the watch on its lease.
type holding struct {
	v lease
	w *watch
}

// acquire takes req's lock and starts watching its lease.
func (hs *holdings) acquire(ctx context.Context, c *client.Client, req request) response {
	l, err := c.Acquire(ctx, req.Lock, client.WithTTL(req.TTL), client.WithWait(req.Wait))
	if err != nil {
		return classify(err, fencelock.ErrLockHeld)
	}
	at := monoNow()
	if old := hs.m[req.Lock]; old != nil {
		_ = old.v.Release(context.WithoutCancel(ctx)) // should not happen: the harness releases first
	}
	var v lease = l
	if hs.lateBy > 0 {
		v = newLateLease(l, hs.lateBy)
	}
	hs.m[req.Lock] = &holding{v: v, w: watchLease(v)}
	return response{Type: OK, Token: uint64(l.Token()), Lease: string(l.LeaseID()), At: at}
}

// release releases req's lock and reports how its lease ended.
func (hs *holdings) release(ctx context.Context, req request) response {
	h := hs.m[req.Lock]
	if h == nil {
		return response{Type: Fail, Error: "no grant held"}
	}
	delete(hs.m, req.Lock)
	h.w.look() // the latest bound, just before the release ends the context
	err := h.v.Release(ctx)
	resp := response{Type: OK, Token: uint64(h.v.Token())}
	if err != nil {
		resp = classify(err, fencelock.ErrNotHolder, fencelock.ErrLeaseExpired)
	}
	resp.End = h.w.report(time.Second)
	return resp
}

func perform(ctx context.Context, c *client.Client, res fence.Resource, held *holdings, req request) response {
	switch req.F {
	case FAcquire:
		return held.acquire(ctx, c, req)
	case FRenew:
		h := held.m[req.Lock]
		if h == nil {
			return response{Type: Fail, Error: "no grant held"}
		}
		if _, err := c.Renew(ctx, req.Lock, h.v.LeaseID(), h.v.Token()); err != nil {
			return classify(err, fencelock.ErrNotHolder, fencelock.ErrLeaseExpired)
		}
		return response{Type: OK, Token: uint64(h.v.Token())}
	case FRelease:
		return held.release(ctx, req)
	case FDescribe:
		li, err := c.Describe(ctx, req.Lock)
		if errors.Is(err, fencelock.ErrNotFound) {
			return response{Type: OK}
		}
		if err != nil {
			return classify(err)
		}
		if li.Holder == "" {
			return response{Type: OK}
		}
		return response{Type: OK, Token: uint64(li.Token)}
	case FFence:
		if err := res.Check(ctx, req.Lock, fencelock.Token(req.Token)); err != nil {
			return classify(err, fencelock.ErrStaleToken)
		}
		return response{Type: OK}
	case FRead, FFinal:
		value, version, err := res.Get(ctx, req.Lock)
		if errors.Is(err, fencelock.ErrNotFound) {
			return response{Type: OK}
		}
		if err != nil {
			return classify(err)
		}
		return response{Type: OK, Value: splitList(value), ETag: etag(version)}
	case FWrite:
		version, err := res.Put(ctx, req.Lock, fencelock.Token(req.Token), req.Lock, joinList(req.Body))
		if err != nil {
			return classify(err, fencelock.ErrStaleToken)
		}
		return response{Type: OK, ETag: etag(version)}
	}
	return response{Type: Fail, Error: "unknown operation " + req.F}
}

// workerProc is the harness's handle on a worker process. Its API traffic
// goes through one proxy per node, so the harness can partition this
// client from the lock service while it still reaches the store.
type workerProc struct {
	process int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	resps   chan response
	proxies []*netproxy.Proxy
	nextID  int
	mu      sync.Mutex
	dead    bool
}

func startWorker(e *env, process int) (*workerProc, error) {
	w := &workerProc{process: process, resps: make(chan response, 16)}
	var eps []string
	for _, ep := range e.cl.endpoints() {
		p, err := netproxy.Listen(ep)
		if err != nil {
			w.close()
			return nil, err
		}
		w.proxies = append(w.proxies, p)
		eps = append(eps, p.Addr)
	}
	argv := e.cfg.workerCommand()
	w.cmd = exec.Command(argv[0], argv[1:]...)
	w.cmd.Stderr = e.workLog
	var err error
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		w.close()
		return nil, err
	}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		w.close()
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		w.cmd = nil
		w.close()
		return nil, fmt.Errorf("start worker %q: %w", argv, err)
	}
	ws := workerSetup{Endpoints: eps, Resource: e.resource, Fencing: !e.sc.NoFencing, OpTimeout: e.cfg.OpTimeout}
	if e.sc.LateLease {
		ws.LateBy = e.cfg.TTL
	}
	if e.tls != nil {
		ws.TLS = &e.tls.files
	}
	setup, _ := json.Marshal(ws)
	if _, err := w.stdin.Write(append(setup, '\n')); err != nil {
		w.close()
		return nil, fmt.Errorf("start worker: send setup: %w", err)
	}
	go func() {
		defer close(w.resps)
		dec := json.NewDecoder(stdout)
		for {
			var r response
			if err := dec.Decode(&r); err != nil {
				return
			}
			w.resps <- r
		}
	}()
	// The worker answers the setup line when its resource is open.
	select {
	case r, ok := <-w.resps:
		if ok && r.Type == OK {
			return w, nil
		}
		w.close()
		if !ok {
			return nil, fmt.Errorf("start worker %d: it exited during setup (see workers.log)", process)
		}
		return nil, fmt.Errorf("start worker %d: %s", process, r.Error)
	case <-time.After(40 * time.Second):
		w.close()
		return nil, fmt.Errorf("start worker %d: not ready after 40s (see workers.log)", process)
	}
}

// call sends req and waits for its response up to timeout. An error means
// the worker is unusable (outcome of req unknown).
func (w *workerProc) call(req request, timeout time.Duration) (response, error) {
	w.nextID++
	req.ID = w.nextID
	b, _ := json.Marshal(req)
	if _, err := w.stdin.Write(append(b, '\n')); err != nil {
		return response{}, fmt.Errorf("worker %d: send: %w", w.process, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case r, ok := <-w.resps:
			if !ok {
				return response{}, fmt.Errorf("worker %d exited", w.process)
			}
			if r.ID != req.ID {
				continue // a late answer to an abandoned request
			}
			return r, nil
		case <-t.C:
			return response{}, fmt.Errorf("worker %d: no answer within %v", w.process, timeout)
		}
	}
}

func (w *workerProc) signal(sig syscall.Signal) {
	if w.cmd != nil && w.cmd.Process != nil {
		_ = w.cmd.Process.Signal(sig)
	}
}

// partition cuts (or, with false, heals) this client's links to the lock
// service; its link to the store stays up.
func (w *workerProc) partition(cut bool) {
	for _, p := range w.proxies {
		if cut {
			p.Block()
		} else {
			p.Unblock()
		}
	}
}

func (w *workerProc) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		return
	}
	w.dead = true
	if w.cmd != nil && w.cmd.Process != nil {
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		_ = w.cmd.Process.Signal(syscall.SIGKILL)
		_ = w.cmd.Wait()
	}
	for _, p := range w.proxies {
		p.Close()
	}
}
