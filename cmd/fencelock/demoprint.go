package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// timeline prints demo events, as text (coloured on a terminal) or as JSON
// lines, with times relative to the demo's start on one monotonic clock.
type timeline struct {
	mu    sync.Mutex
	w     io.Writer
	json  bool
	color bool
	start time.Time
}

func newTimeline(w io.Writer, asJSON, color bool) *timeline {
	return &timeline{w: w, json: asJSON, color: color && !asJSON, start: time.Now()}
}

// wantColor decides colour for --color auto|always|never.
func wantColor(mode string, w io.Writer) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	return isTerminal(w)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

const (
	cReset = "\033[0m"
	cDim   = "\033[2m"
	cBold  = "\033[1m"
	cRed   = "\033[31m"
	cGreen = "\033[32m"
	cBlue  = "\033[34m"
	cMag   = "\033[35m"
	cYel   = "\033[33m"
)

func (t *timeline) paint(code, s string) string {
	if !t.color {
		return s
	}
	return code + s + cReset
}

func (t *timeline) printf(format string, a ...any) {
	if t.json {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, format, a...)
}

func (t *timeline) header(ttl, pause time.Duration, lockAddr string) {
	t.printf("%s\n", t.paint(cBold, "fencelock demo: a paused lock holder, with and without fencing"))
	t.printf("lock service (embedded, one Raft node) on %s; lease TTL %v; worker A frozen for %v\n", lockAddr, ttl, pause)
}

func (t *timeline) act(act string, n int) {
	title := fmt.Sprintf("Act %d: with fencing: the store rejects writes with a stale token", n)
	switch act {
	case "unfenced":
		title = fmt.Sprintf("Act %d: what happens WITHOUT fencing (store started with --no-fencing)", n)
	case "payment":
		title = fmt.Sprintf("Act %d: the payment of order %d in PostgreSQL, with the row fence (last_fence)", n, demoOrderID)
	}
	t.printf("\n%s\n", t.paint(cBold, title))
}

// note prints a remark (text mode only).
func (t *timeline) note(s string) { t.printf("\n(%s)\n", s) }

func (t *timeline) footer() {
	t.printf("\nThe lock alone could not stop A: its lease expired while it was frozen, and it\n" +
		"wrote anyway. Only the resource, checking the fencing token inside the write,\n" +
		"keeps the report intact.\n")
}

// emit stamps e with the time and prints it.
func (t *timeline) emit(e demoEvent) {
	e.T = time.Since(t.start).Seconds()
	if t.json {
		t.mu.Lock()
		defer t.mu.Unlock()
		_ = json.NewEncoder(t.w).Encode(e)
		return
	}
	actor := e.Actor
	switch actor {
	case "A":
		actor = t.paint(cMag, "worker A")
	case "B":
		actor = t.paint(cBlue, "worker B")
	default:
		actor = t.paint(cYel, "demo    ")
	}
	var msg string
	switch e.Kind {
	case "waiting":
		msg = e.Detail
	case "acquired":
		msg = fmt.Sprintf("acquired report.pdf, fencing token %d (%s)", e.Token, e.Detail)
	case "wrote":
		msg = fmt.Sprintf("wrote section %d/%d with token %d -> store: %s", e.Part, e.Parts, e.Token, t.paint(cGreen, "200 accepted"))
	case "gate":
		msg = "about to write; the demo freezes it here"
	case "resumed":
		msg = "resumed; still believes it holds the lock: " + e.Detail
	case "rejected":
		msg = fmt.Sprintf("wrote section %d/%d with token %d -> store: %s", e.Part, e.Parts, e.Token,
			t.paint(cRed, fmt.Sprintf("409 REJECTED, stale fencing token (highest accepted: %d)", e.Highest)))
	case "acquired-order":
		msg = fmt.Sprintf("acquired orders/%d, fencing token %d (%s)", demoOrderID, e.Token, e.Detail)
	case "read-order":
		msg = fmt.Sprintf("read order %d: status %s", demoOrderID, e.Detail)
	case "paid":
		msg = fmt.Sprintf("UPDATE ... SET status='paid' WHERE status='pending' AND last_fence <= %d -> %s", e.Token, t.paint(cGreen, "1 row: paid"))
	case "already-paid":
		msg = "UPDATE -> 0 rows, already paid by a valid holder (not an error)"
	case "pay-rejected":
		msg = fmt.Sprintf("UPDATE ... AND last_fence <= %d -> %s", e.Token,
			t.paint(cRed, fmt.Sprintf("0 rows: StaleTokenError (last_fence is %d)", e.Highest)))
	case "stopping":
		msg = "stops: " + e.Detail
	case "released":
		msg = fmt.Sprintf("released its lock (token %d)", e.Token)
	case "release-failed":
		msg = "release refused: " + e.Detail
	case "verdict":
		verdict := t.paint(cGreen, "OK: "+e.Detail)
		if e.Intact != nil && !*e.Intact {
			verdict = t.paint(cRed, e.Detail)
		}
		msg = verdict
		if e.Content != "" {
			msg += "\n" + indent(e.Content)
		}
	default:
		msg = e.Detail
	}
	t.printf("%s  %s  %s\n", t.paint(cDim, fmt.Sprintf("%+7.2fs", e.T)), actor, msg)
}

func indent(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("             | " + line + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
