package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/server"
	"github.com/fencelock/fencelock/store"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", "demo [flags]\n\n"+
		"Reproduces the split-brain scenario for real: worker A takes the lock on\n"+
		"report.pdf, writes a section, and is frozen with SIGSTOP for longer than\n"+
		"its lease (a long GC pause; its watchdog freezes too). Worker B gets the\n"+
		"lock with a higher token and writes the whole report. A resumes, still\n"+
		"believes it holds the lock, and writes its next section with its old\n"+
		"token. Act 1: the fenced store rejects it and the report stays B's.\n"+
		"Act 2, without fencing: A's write lands and the report is corrupted.\n"+
		"Needs nothing installed: the lock service and store run embedded.", stderr)
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL of the workers' locks (at least 1s)")
	pause := fs.Duration("pause", 4*time.Second, "how long worker A stays frozen; must exceed --ttl")
	asJSON := fs.Bool("json", false, "print the timeline as JSON lines")
	color := fs.String("color", "auto", "colour output: auto, always, never")
	acts := fs.String("acts", "fenced,unfenced", "which acts to run, comma-separated: fenced, unfenced")
	pgDSN := fs.String("postgres", "", "also run the payment act against this PostgreSQL (a DSN; uses table "+demoOrdersTable+")")
	s3URL := fs.String("s3", "", "run the fenced act against this S3 bucket instead of the embedded store: s3://BUCKET[/PREFIX][?endpoint=URL] (credentials as for the AWS CLI; writes under PREFIX/demo-TIME/)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("demo takes no arguments, got %q", fs.Args())
	}
	if maxTTL := server.DefaultConfig().MaxTTL; *ttl < time.Second || *ttl > maxTTL || *pause <= *ttl {
		return usageErr("demo: want 1s <= --ttl <= %v and --pause > --ttl (got %v and %v)", maxTTL, *ttl, *pause)
	}
	if *color != "auto" && *color != "always" && *color != "never" {
		return usageErr("demo: --color %q: want auto, always or never", *color)
	}
	runActs, err := parseActs(*acts)
	if err != nil {
		return err
	}
	out := newTimeline(stdout, *asJSON, wantColor(*color, stdout))

	dir, err := os.MkdirTemp("", "fencelock-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	lockAddr, stopLocks, err := startDemoLockService(ctx, filepath.Join(dir, "locks"), quiet)
	if err != nil {
		return err
	}
	defer stopLocks()
	out.header(*ttl, *pause, lockAddr)

	bucket, err := demoBucket(*s3URL)
	if err != nil {
		return err
	}
	failed := false
	for i, act := range runActs {
		res := report{dir: filepath.Join(dir, act), log: quiet}
		if act == "fenced" {
			res.s3 = bucket
		}
		ok, err := playAct(ctx, out, act, i+1, res, lockAddr, *ttl, *pause)
		if err != nil {
			return err
		}
		failed = failed || !ok
	}
	if *pgDSN != "" {
		ok, err := runPaymentAct(ctx, out, len(runActs)+1, *pgDSN, lockAddr, *ttl, *pause)
		if err != nil {
			return fmt.Errorf("demo payment act: %w", err)
		}
		failed = failed || !ok
	} else {
		out.note("payment act skipped: pass --postgres DSN to run the payment of order 42 against PostgreSQL")
	}
	out.footer()
	if failed {
		return errors.New("demo: an act did not end as expected (see the timeline)")
	}
	return nil
}

// startDemoLockService runs an embedded one-node lock service.
func startDemoLockService(ctx context.Context, dir string, log *slog.Logger) (string, func(), error) {
	cfg := server.DefaultConfig()
	cfg.DataDir, cfg.Logger = dir, log
	raftLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	cfg.RaftAddr = raftLn.Addr().String()
	raftLn.Close()
	s, err := server.Open(ctx, cfg)
	if err != nil {
		return "", nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := s.WaitReady(wctx); err != nil {
		s.Close()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return "", nil, err
	}
	hs := api.HTTPServer(api.Handler(s))
	go hs.Serve(api.BufferReads(ln))
	return ln.Addr().String(), func() { hs.Close(); s.Close() }, nil
}

// demoBucket returns the demo's own place in the bucket spec names (a
// prefix of its own under the URL's), or "" for none.
func demoBucket(spec string) (string, error) {
	if spec == "" {
		return "", nil
	}
	u, err := url.Parse(spec)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return "", usageErr("demo --s3 %q: want s3://BUCKET[/PREFIX][?endpoint=URL]", spec)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/demo-" + time.Now().UTC().Format("20060102T150405.000") + "/"
	return u.String(), nil
}

// report is where an act's report goes: an S3 bucket (s3 set), or an
// embedded store in dir, started for the act.
type report struct {
	dir string
	log *slog.Logger
	s3  string
}

// place is where a report is: a demo-worker flag (--store or --s3) and
// its URL.
type place struct{ flag, url string }

// read returns the report's content.
func (p place) read(ctx context.Context) (string, error) {
	storeURL, s3URL := p.url, ""
	if p.flag == "--s3" {
		storeURL, s3URL = "", p.url
	}
	r, err := openReport(ctx, storeURL, s3URL)
	if err != nil {
		return "", err
	}
	b, _, err := r.Get(ctx, "report.pdf")
	if err != nil {
		return "", fmt.Errorf("read report.pdf: %w", err)
	}
	return string(b), nil
}

// open starts the act's store, unless the report goes to S3, and returns
// the report's place.
func (r report) open(ctx context.Context, act string) (where place, stop func(), err error) {
	if r.s3 != "" {
		return place{"--s3", r.s3}, func() {}, nil
	}
	cfg := store.DefaultConfig()
	cfg.DataDir, cfg.Logger, cfg.DisableFencing = r.dir, r.log, act == "unfenced"
	st, err := store.Open(cfg)
	if err != nil {
		return place{}, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		return place{}, nil, err
	}
	sctx, stopStore := context.WithCancel(ctx)
	go st.Serve(sctx, ln)
	return place{"--store", "http://" + ln.Addr().String()}, func() { stopStore(); st.Close() }, nil
}

// parseActs reads --acts.
func parseActs(acts string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(acts, ",") {
		if a = strings.TrimSpace(a); a != "fenced" && a != "unfenced" {
			return nil, usageErr("demo: unknown act %q: want fenced and/or unfenced", a)
		}
		out = append(out, a)
	}
	return out, nil
}

// playAct runs one act and reports whether it ended as it must: the report
// intact with fencing, corrupted without.
func playAct(ctx context.Context, out *timeline, act string, n int, res report, lockAddr string, ttl, pause time.Duration) (bool, error) {
	intact, err := runAct(ctx, out, act, n, res, lockAddr, ttl, pause)
	if err != nil {
		return false, fmt.Errorf("demo act %q: %w", act, err)
	}
	return intact == (act == "fenced"), nil
}

// runAct plays the scenario once and reports whether report.pdf ended as
// B's report, intact.
func runAct(ctx context.Context, out *timeline, act string, n int, res report, lockAddr string, ttl, pause time.Duration) (bool, error) {
	where, stop, err := res.open(ctx, act)
	if err != nil {
		return false, err
	}
	defer stop()
	out.act(act, n)

	const parts = 3
	workerArgs := func(name string, gate int) []string {
		return append([]string{"demo-worker", "--name", name, "--server", lockAddr,
			"--ttl", ttl.String(), "--parts", fmt.Sprint(parts), "--gate-after", fmt.Sprint(gate)}, where.flag, where.url)
	}
	_, bEvents, err := play(ctx, out, act, workerArgs("A", 1), workerArgs("B", 0), ttl, pause)
	if err != nil {
		return false, err
	}
	var bLines []string
	for _, e := range bEvents {
		if e.Kind == "wrote" {
			bLines = append(bLines, e.Line)
		}
	}

	got, err := where.read(ctx)
	if err != nil {
		return false, err
	}
	want := strings.Join(bLines, "")
	intact := got == want
	detail := "report.pdf is B's report, intact"
	if !intact {
		detail = "report.pdf is CORRUPTED: a mix of A's and B's sections"
	}
	out.emit(demoEvent{Act: act, Actor: "demo", Kind: "verdict", Intact: &intact, Detail: detail, Content: got})
	return intact, nil
}

// play runs the scenario: worker A until its gate, SIGSTOP A, worker B to
// the end, SIGCONT A after pause, A to the end. It returns both workers'
// events.
func play(ctx context.Context, out *timeline, act string, argsA, argsB []string, ttl, pause time.Duration) (aEvents, bEvents []demoEvent, err error) {
	a, err := startWorker(ctx, out, act, argsA)
	if err != nil {
		return nil, nil, err
	}
	defer a.kill()
	for {
		e, err := a.next(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("worker A: waiting for its gate: %w", err)
		}
		aEvents = append(aEvents, e)
		if e.Kind == "gate" {
			break
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, nil, fmt.Errorf("SIGSTOP worker A: %w", err)
	}
	frozen := time.Now()
	out.emit(demoEvent{Act: act, Actor: "demo", Kind: "sigstop",
		Detail: fmt.Sprintf("SIGSTOP A for %v (a GC pause longer than its %v lease; its watchdog freezes too)", pause, ttl)})

	b, err := startWorker(ctx, out, act, argsB)
	if err != nil {
		return nil, nil, err
	}
	defer b.kill()
	for {
		e, err := b.next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("worker B: %w", err)
		}
		bEvents = append(bEvents, e)
	}
	if err := b.wait(); err != nil {
		return nil, nil, fmt.Errorf("worker B: %w", err)
	}
	select {
	case <-time.After(time.Until(frozen.Add(pause))):
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return nil, nil, fmt.Errorf("SIGCONT worker A: %w", err)
	}
	out.emit(demoEvent{Act: act, Actor: "demo", Kind: "sigcont", Detail: "SIGCONT A: it resumes where it stopped"})
	if _, err := io.WriteString(a.stdin, "go\n"); err != nil {
		return nil, nil, fmt.Errorf("resume worker A: %w", err)
	}
	for {
		e, err := a.next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("worker A: %w", err)
		}
		aEvents = append(aEvents, e)
	}
	if err := a.wait(); err != nil {
		return nil, nil, fmt.Errorf("worker A: %w", err)
	}
	return aEvents, bEvents, nil
}

// worker is a running demo-worker process and its event stream.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan demoEvent
	errc   chan error
	out    *timeline
	act    string
}

func startWorker(ctx context.Context, out *timeline, act string, args []string) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the demo
	cmd.Stderr = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	w := &worker{cmd: cmd, stdin: stdin, events: make(chan demoEvent, 64), errc: make(chan error, 1), out: out, act: act}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e demoEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				continue
			}
			e.Act = act
			out.emit(e)
			w.events <- e
		}
		close(w.events)
	}()
	return w, nil
}

// next returns the worker's next event, io.EOF when it has no more.
func (w *worker) next(ctx context.Context) (demoEvent, error) {
	select {
	case e, ok := <-w.events:
		if !ok {
			return demoEvent{}, io.EOF
		}
		return e, nil
	case <-ctx.Done():
		return demoEvent{}, ctx.Err()
	case <-time.After(30 * time.Second):
		return demoEvent{}, errors.New("no event for 30s")
	}
}

func (w *worker) wait() error {
	w.stdin.Close()
	for range w.events {
	}
	return w.cmd.Wait()
}

// kill ends the worker whatever its state (a stopped process is continued
// first so that it can die).
func (w *worker) kill() {
	if w.cmd.ProcessState != nil {
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
}

// runPaymentAct plays the double-payment scenario against PostgreSQL with
// the row fence, and reports whether order 42 was paid exactly once, by B.
func runPaymentAct(ctx context.Context, out *timeline, n int, dsn, lockAddr string, ttl, pause time.Duration) (bool, error) {
	const act = "payment"
	out.act(act, n)
	if err := setupDemoOrders(ctx, dsn); err != nil {
		return false, err
	}
	args := func(name string, gate int) []string {
		return []string{"demo-worker", "--name", name, "--server", lockAddr, "--postgres", dsn,
			"--ttl", ttl.String(), "--gate-after", fmt.Sprint(gate)}
	}
	aEvents, bEvents, err := play(ctx, out, act, args("A", 1), args("B", 0), ttl, pause)
	if err != nil {
		return false, err
	}
	status, paidBy, fence, err := readDemoOrder(ctx, dsn)
	if err != nil {
		return false, err
	}
	rejected, bPaid := false, false
	var bTok uint64
	for _, e := range aEvents {
		rejected = rejected || e.Kind == "pay-rejected"
	}
	for _, e := range bEvents {
		if e.Kind == "paid" {
			bPaid, bTok = true, e.Token
		}
	}
	ok := rejected && bPaid && status == "paid" && paidBy == "B" && uint64(fence) == bTok
	detail := fmt.Sprintf("order %d paid once, by B (last_fence %d); A's update was refused", demoOrderID, fence)
	if !ok {
		detail = fmt.Sprintf("order %d: status %s, paid by %q, last_fence %d: NOT the expected single payment by B", demoOrderID, status, paidBy, fence)
	}
	out.emit(demoEvent{Act: act, Actor: "demo", Kind: "verdict", Intact: &ok, Detail: detail})
	return ok, nil
}
