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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

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
	if err := parse(fs, args); err != nil {
		return err
	}
	if *ttl < time.Second || *pause <= *ttl {
		return usageErr("demo: want --ttl >= 1s and --pause > --ttl (got %v and %v)", *ttl, *pause)
	}
	var runActs []string
	for _, a := range strings.Split(*acts, ",") {
		if a = strings.TrimSpace(a); a != "fenced" && a != "unfenced" {
			return usageErr("demo: unknown act %q: want fenced and/or unfenced", a)
		}
		runActs = append(runActs, strings.TrimSpace(a))
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

	failed := false
	for i, act := range runActs {
		intact, err := runAct(ctx, out, act, i+1, filepath.Join(dir, act), lockAddr, *ttl, *pause, quiet)
		if err != nil {
			return fmt.Errorf("demo act %q: %w", act, err)
		}
		if act == "fenced" && !intact || act == "unfenced" && intact {
			failed = true
		}
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
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	return ln.Addr().String(), func() { hs.Close(); s.Close() }, nil
}

// runAct plays the scenario once and reports whether report.pdf ended as
// B's report, intact.
func runAct(ctx context.Context, out *timeline, act string, n int, dir, lockAddr string, ttl, pause time.Duration, log *slog.Logger) (bool, error) {
	cfg := store.DefaultConfig()
	cfg.DataDir, cfg.Logger, cfg.DisableFencing = dir, log, act == "unfenced"
	st, err := store.Open(cfg)
	if err != nil {
		return false, err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return false, err
	}
	sctx, stopStore := context.WithCancel(ctx)
	defer stopStore()
	go st.Serve(sctx, ln)
	storeURL := "http://" + ln.Addr().String()
	out.act(act, n)

	const parts = 3
	workerArgs := func(name string, gate int) []string {
		return []string{"demo-worker", "--name", name, "--server", lockAddr, "--store", storeURL,
			"--ttl", ttl.String(), "--parts", fmt.Sprint(parts), "--gate-after", fmt.Sprint(gate)}
	}
	a, err := startWorker(ctx, out, act, workerArgs("A", 1))
	if err != nil {
		return false, err
	}
	defer a.kill()
	if _, err := a.until(ctx, "gate"); err != nil {
		return false, err
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return false, fmt.Errorf("SIGSTOP worker A: %w", err)
	}
	frozen := time.Now()
	out.emit(demoEvent{Act: act, Actor: "demo", Kind: "sigstop",
		Detail: fmt.Sprintf("SIGSTOP A for %v (a GC pause longer than its %v lease; its watchdog freezes too)", pause, ttl)})

	b, err := startWorker(ctx, out, act, workerArgs("B", 0))
	if err != nil {
		return false, err
	}
	defer b.kill()
	var bLines []string
	for {
		e, err := b.next(ctx)
		if err != nil {
			return false, fmt.Errorf("worker B: %w", err)
		}
		if e.Kind == "wrote" {
			bLines = append(bLines, e.Line)
		}
		if e.Kind == "released" || e.Kind == "release-failed" {
			break
		}
	}
	if err := b.wait(); err != nil {
		return false, fmt.Errorf("worker B: %w", err)
	}
	select {
	case <-time.After(time.Until(frozen.Add(pause))):
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return false, fmt.Errorf("SIGCONT worker A: %w", err)
	}
	out.emit(demoEvent{Act: act, Actor: "demo", Kind: "sigcont", Detail: "SIGCONT A: it resumes where it stopped"})
	if _, err := io.WriteString(a.stdin, "go\n"); err != nil {
		return false, fmt.Errorf("resume worker A: %w", err)
	}
	for {
		e, err := a.next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false, fmt.Errorf("worker A: %w", err)
		}
		_ = e
	}
	if err := a.wait(); err != nil {
		return false, fmt.Errorf("worker A: %w", err)
	}

	got, err := readObject(ctx, storeURL, "report.pdf")
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

func readObject(ctx context.Context, storeURL, key string) (string, error) {
	c, err := store.NewClient(storeURL)
	if err != nil {
		return "", err
	}
	b, _, err := c.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	return string(b), nil
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

// until returns the first event of the given kind.
func (w *worker) until(ctx context.Context, kind string) (demoEvent, error) {
	for {
		e, err := w.next(ctx)
		if err != nil {
			return e, fmt.Errorf("waiting for %q: %w", kind, err)
		}
		if e.Kind == kind {
			return e, nil
		}
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
