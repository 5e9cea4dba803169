package main

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/testproc"
)

type eventKey struct{ act, actor, kind string }

// demoEvents parses the demo's --json output.
func demoEvents(t *testing.T, out string) map[eventKey][]demoEvent {
	t.Helper()
	events := map[eventKey][]demoEvent{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var e demoEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("demo --json printed a non-JSON line %q", sc.Text())
		}
		k := eventKey{e.Act, e.Actor, e.Kind}
		events[k] = append(events[k], e)
	}
	return events
}

// checkFencedAct: A's late write is rejected with A's older token, and the
// report is B's.
func checkFencedAct(t *testing.T, out string, events map[eventKey][]demoEvent) {
	t.Helper()
	one := func(act, actor, kind string) demoEvent {
		t.Helper()
		es := events[eventKey{act, actor, kind}]
		if len(es) != 1 {
			t.Fatalf("act %s: want one %q event from %s, got %d\n%s", act, kind, actor, len(es), out)
		}
		return es[0]
	}
	aTok := one("fenced", "A", "acquired").Token
	bTok := one("fenced", "B", "acquired").Token
	if aTok >= bTok {
		t.Errorf("fenced act: A's token %d is not below B's %d", aTok, bTok)
	}
	rej := one("fenced", "A", "rejected")
	if rej.Token != aTok || rej.Highest != bTok || rej.Status != 409 {
		t.Errorf("fenced act: rejection %+v, want A's token %d refused with 409 against highest %d", rej, aTok, bTok)
	}
	if stop := one("fenced", "A", "stopping"); !strings.Contains(stop.Detail, "lease context done") {
		t.Errorf("fenced act: A stopped with %q, want its lease context done", stop.Detail)
	}
	var bContent strings.Builder
	for _, e := range events[eventKey{"fenced", "B", "wrote"}] {
		bContent.WriteString(e.Line)
	}
	v := one("fenced", "demo", "verdict")
	if v.Intact == nil || !*v.Intact || v.Content != bContent.String() {
		t.Errorf("fenced act: final report %q (intact %v), want exactly B's %q", v.Content, v.Intact, bContent.String())
	}
}

func TestDemo_FencingStopsThePausedWriterAndItsAbsenceCorrupts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, code := testproc.Run(ctx, t, nil, "demo", "--json", "--ttl", "1s", "--pause", "2500ms")
	if code != 0 {
		t.Fatalf("demo exited %d:\n%s", code, out)
	}
	events := demoEvents(t, out)
	checkFencedAct(t, out, events)

	// Unfenced act: A's late write lands and the demo detects the corruption.
	if n := len(events[eventKey{"unfenced", "A", "rejected"}]); n != 0 {
		t.Errorf("unfenced act: %d rejections, want none", n)
	}
	us := events[eventKey{"unfenced", "demo", "verdict"}]
	if len(us) != 1 {
		t.Fatalf("unfenced act: %d verdicts, want 1\n%s", len(us), out)
	}
	if u := us[0]; u.Intact == nil || *u.Intact || !strings.Contains(u.Content, "worker A") || !strings.Contains(u.Content, "worker B") {
		t.Errorf("unfenced act: verdict %+v, want corruption with sections of both workers", u)
	}
}

// TestDemo_S3: the fenced act against an S3 bucket.
func TestDemo_S3(t *testing.T) {
	bucket := fencelocktest.S3Bucket(t, "reports")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, code := testproc.Run(ctx, t, nil, "demo", "--json", "--acts", "fenced", "--ttl", "1s", "--pause", "2s",
		"--s3", bucket)
	if code != 0 {
		t.Fatalf("demo --s3 exited %d:\n%s", code, out)
	}
	checkFencedAct(t, out, demoEvents(t, out))
}

func TestDemo_PaymentActPaysOrderOnce(t *testing.T) {
	dsn := fencelocktest.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, code := testproc.Run(ctx, t, nil, "demo", "--json", "--acts", "fenced", "--ttl", "1s", "--pause", "2s", "--postgres", dsn)
	if code != 0 {
		t.Fatalf("demo --postgres exited %d:\n%s", code, out)
	}
	var aTok, bTok, rejectedTok, paidTok uint64
	var verdict *demoEvent
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var e demoEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Act != "payment" {
			continue
		}
		switch {
		case e.Actor == "A" && e.Kind == "acquired-order":
			aTok = e.Token
		case e.Actor == "B" && e.Kind == "acquired-order":
			bTok = e.Token
		case e.Actor == "A" && e.Kind == "pay-rejected":
			rejectedTok = e.Token
		case e.Kind == "paid":
			if paidTok != 0 {
				t.Errorf("order paid twice (tokens %d and %d)", paidTok, e.Token)
			}
			paidTok = e.Token
		case e.Kind == "verdict":
			verdict = &e
		}
	}
	if aTok == 0 || aTok >= bTok || rejectedTok != aTok || paidTok != bTok {
		t.Errorf("payment act: A token %d, B token %d, rejected %d, paid by %d; want A < B, A's update rejected, B paid", aTok, bTok, rejectedTok, paidTok)
	}
	if verdict == nil || verdict.Intact == nil || !*verdict.Intact {
		t.Errorf("payment act verdict %+v, want the order paid once by B\n%s", verdict, out)
	}
}
