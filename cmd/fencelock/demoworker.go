package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/s3"
	"github.com/fencelock/fencelock/store"
)

// demoEvent is one line of the demo's timeline. Workers print them as JSON
// lines; the demo stamps them with its own clock and act.
type demoEvent struct {
	T       float64 `json:"t"`             // seconds since the demo started
	Act     string  `json:"act,omitempty"` // "fenced" or "unfenced"
	Actor   string  `json:"actor"`         // "A", "B" or "demo"
	Kind    string  `json:"kind"`
	Token   uint64  `json:"token,omitempty"`
	Part    int     `json:"part,omitempty"`
	Parts   int     `json:"parts,omitempty"`
	Status  int     `json:"status,omitempty"`  // the store's HTTP status for a write
	Highest uint64  `json:"highest,omitempty"` // the store's highest token, on a rejection
	Line    string  `json:"line,omitempty"`    // the section a write carried
	Detail  string  `json:"detail,omitempty"`
	Intact  *bool   `json:"intact,omitempty"` // verdict events
	Content string  `json:"content,omitempty"`
}

// runDemoWorker is one worker process of the demo: it takes the lock, writes
// the report section by section with its fencing token, and, with
// --gate-after N, stops after section N until a line arrives on stdin (the
// demo freezes it there with SIGSTOP). It never checks its lease before
// writing, exactly like a worker that was paused between check and write.
func runDemoWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo-worker", "demo-worker --name A --store URL [flags]\n\n"+
		"One worker process of \"fencelock demo\"; the demo starts it. It prints its\n"+
		"timeline as JSON lines on stdout.", stderr)
	newClient := clientFlags(fs)
	name := fs.String("name", "A", "worker name, written into each section")
	storeURL := fs.String("store", "", "fenced object store URL")
	s3URL := fs.String("s3", "", "write the report to this S3 bucket instead: s3://BUCKET/PREFIX?endpoint=URL")
	lockName := fs.String("lock", "report.pdf", "lock name and object key")
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL")
	parts := fs.Int("parts", 3, "sections in the report")
	gate := fs.Int("gate-after", 0, "after writing this section, wait for a line on stdin (0: never)")
	pgDSN := fs.String("postgres", "", "pay order 42 in this PostgreSQL instead of writing the report")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *storeURL == "" && *s3URL == "" && *pgDSN == "" || *parts < 1 {
		return usageErr("demo-worker needs --store, --s3 or --postgres, and --parts >= 1")
	}
	enc := json.NewEncoder(stdout)
	emit := func(e demoEvent) { e.Actor = *name; _ = enc.Encode(e) }

	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	if *pgDSN != "" {
		return payOrder(ctx, c, *pgDSN, *name, *ttl, *gate > 0, emit)
	}
	st, err := openReport(ctx, *storeURL, *s3URL)
	if err != nil {
		return err
	}
	emit(demoEvent{Kind: "waiting", Detail: "asks for " + *lockName})
	lock, err := c.Acquire(ctx, *lockName, client.WithTTL(*ttl), client.WithHolder("worker "+*name))
	if err != nil {
		return err
	}
	tok := lock.Token()
	emit(demoEvent{Kind: "acquired", Token: uint64(tok), Detail: "lease " + ttl.String()})

	// The worker's own view: it believes it holds the lock from here on.
	rw := reportWriter{st: st, lock: lock, key: *lockName, name: *name, parts: *parts, emit: emit}
	wctx := context.WithoutCancel(ctx)
	stdin := bufio.NewReader(os.Stdin)
	for part := 1; part <= *parts; part++ {
		if stop, err := rw.write(wctx, part); stop || err != nil {
			return err
		}
		if part == *gate {
			emit(demoEvent{Kind: "gate", Token: uint64(tok), Part: part})
			if _, err := stdin.ReadString('\n'); err != nil {
				return fmt.Errorf("wait for the demo: %w", err)
			}
			emit(demoEvent{Kind: "resumed", Token: uint64(tok), Detail: leaseView(lock)})
		}
	}
	if err := lock.Release(wctx); err != nil {
		emit(demoEvent{Kind: "release-failed", Token: uint64(tok), Detail: err.Error()})
		return nil
	}
	emit(demoEvent{Kind: "released", Token: uint64(tok)})
	return nil
}

// reportWriter writes a demo worker's report, one section at a time, with
// its lock's token.
type reportWriter struct {
	st        fence.Resource
	lock      *client.Lock
	key, name string
	parts     int
	emit      func(demoEvent)
}

// write appends section part to the report. On a stale-token refusal it
// releases the lock and reports stop: the worker is done.
func (rw reportWriter) write(ctx context.Context, part int) (stop bool, err error) {
	tok := rw.lock.Token()
	line := fmt.Sprintf("section %d/%d written by worker %s (token %d)\n", part, rw.parts, rw.name, tok)
	var body string
	if part > 1 {
		old, _, err := rw.st.Get(ctx, rw.key)
		if err != nil && !errors.Is(err, fencelock.ErrNotFound) {
			return false, err
		}
		body = string(old)
	}
	_, err = rw.st.Put(ctx, rw.key, tok, rw.key, []byte(body+line))
	var stale *fencelock.StaleTokenError
	switch {
	case errors.As(err, &stale):
		rw.emit(demoEvent{Kind: "rejected", Token: uint64(tok), Part: part, Parts: rw.parts, Status: 409,
			Highest: uint64(stale.Highest), Line: line})
		detail := "lease context still live"
		if rw.lock.Err() != nil {
			detail = "lease context done: " + rw.lock.Err().Error()
		}
		rw.emit(demoEvent{Kind: "stopping", Token: uint64(tok), Detail: detail})
		_ = rw.lock.Release(ctx)
		return true, nil
	case err != nil:
		return false, err
	}
	rw.emit(demoEvent{Kind: "wrote", Token: uint64(tok), Part: part, Parts: rw.parts, Status: 200, Line: line})
	return false, nil
}

// openReport opens where the report goes: the S3 bucket if s3URL is set,
// else the fenced store.
func openReport(ctx context.Context, storeURL, s3URL string) (fence.Resource, error) {
	if s3URL != "" {
		return s3.Open(ctx, s3URL)
	}
	c, err := store.NewClient(storeURL)
	if err != nil {
		return nil, err
	}
	return c.Resource(), nil
}

func leaseView(l *client.Lock) string {
	if err := l.Err(); err != nil {
		return "lease context done (" + err.Error() + "), but this worker does not look"
	}
	return "lease context live"
}
