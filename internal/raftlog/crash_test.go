package raftlog

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The crash test runs a writer in a child process (this test binary again)
// and kills it with SIGKILL at random moments. The child announces every
// operation before it starts ("B ...") and after it returned ("D"), so the
// parent knows which entries were acknowledged. After each kill the parent
// reopens the log and checks that every acknowledged entry is there with
// its content, that cut entries never come back, and that nothing else
// appears but the unfinished operation's entries.

const crashChildEnv = "RAFTLOG_CRASH_CHILD"

const crashSegSize = 16 << 10

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashChild writes until it is killed. Its term is taken from the
// environment and raised on every cut, so rewritten entries differ.
func crashChild(dir string) {
	term, _ := strconv.ParseUint(os.Getenv("RAFTLOG_CRASH_TERM"), 10, 64)
	s, err := Open(dir, Options{SegmentSize: crashSegSize})
	if err != nil {
		fmt.Printf("E %v\n", err)
		os.Exit(2)
	}
	rng := rand.New(rand.NewPCG(term, 7))
	for {
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		switch p := rng.IntN(100); {
		case p < 8 && last > first+10:
			from := last - uint64(rng.IntN(5))
			term++
			fmt.Printf("B C %d\n", from)
			err = s.DeleteRange(from, last)
		case p < 12 && last > first+40:
			max := first + uint64(rng.IntN(20))
			fmt.Printf("B P %d\n", max)
			err = s.DeleteRange(first, max)
		default:
			n := uint64(1 + rng.IntN(20))
			fmt.Printf("B A %d %d %d\n", last+1, last+n, term)
			err = s.StoreLogs(batch(last+1, last+n, term))
		}
		if err != nil {
			fmt.Printf("E %v\n", err)
			os.Exit(2)
		}
		fmt.Println("D")
	}
}

type crashOp struct {
	kind           string // A append, C cut, P compact
	from, to, term uint64
}

func TestStore_SurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 test skipped in -short mode")
	}
	dir := t.TempDir()
	acked := map[uint64]uint64{} // index -> term of acknowledged entries
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	term := uint64(1)
	rounds, entriesSeen := 15, 0
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, "RAFTLOG_CRASH_TERM="+strconv.FormatUint(term*1_000_000, 10))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(time.Duration(50+rng.IntN(250))*time.Millisecond, func() { cmd.Process.Signal(syscall.SIGKILL) })
		var pending *crashOp
		ackedBefore := map[uint64]uint64{} // acked when the last compaction began
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			num := func(i int) uint64 { n, _ := strconv.ParseUint(f[i], 10, 64); return n }
			switch f[0] {
			case "E":
				t.Fatalf("child failed: %s", sc.Text())
			case "B":
				op := crashOp{kind: f[1], from: num(2)}
				if op.kind == "P" {
					clear(ackedBefore)
					for i, tm := range acked {
						ackedBefore[i] = tm
					}
				}
				if op.kind == "A" {
					op.to, op.term = num(3), num(4)
				}
				pending = &op
			case "D":
				switch pending.kind {
				case "A":
					for i := pending.from; i <= pending.to; i++ {
						acked[i] = pending.term
					}
				case "C":
					for i := range acked {
						if i >= pending.from {
							delete(acked, i)
						}
					}
				case "P":
					for i := range acked {
						if i <= pending.from {
							delete(acked, i)
						}
					}
				}
				pending = nil
			}
		}
		cmd.Wait()

		s, err := Open(dir, Options{SegmentSize: crashSegSize})
		if err != nil {
			t.Fatalf("round %d: reopening after kill -9: %v", round, err)
		}
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		present := map[uint64]uint64{}
		for i := first; i <= last && first > 0; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil {
				t.Fatalf("round %d: entry %d of %d..%d unreadable: %v", round, i, first, last, err)
			}
			if want := entry(i, l.Term); string(l.Data) != string(want.Data) {
				t.Fatalf("round %d: entry %d holds %q, want %q", round, i, l.Data, want.Data)
			}
			present[i] = l.Term
		}
		for i, want := range acked {
			got, ok := present[i]
			if i < first && pending != nil && pending.kind == "P" {
				continue // the unfinished compaction removed it: allowed
			}
			if pending != nil && pending.kind == "C" && i >= pending.from && !ok {
				continue // the unfinished cut removed it: allowed
			}
			if i < first {
				t.Fatalf("round %d: acknowledged entry %d lost: the log starts at %d", round, i, first)
			}
			if !ok || got != want {
				t.Fatalf("round %d: acknowledged entry %d: present %v term %d, want term %d", round, i, ok, got, want)
			}
		}
		for i, got := range present {
			if want, ok := acked[i]; ok && want == got {
				continue
			}
			if pending != nil && pending.kind == "A" && i >= pending.from && i <= pending.to && got == pending.term {
				continue // the unfinished append got this far
			}
			if pending != nil && pending.kind == "P" && i <= pending.from {
				if want, ok := ackedBefore[i]; ok && want == got {
					continue // the unfinished compaction had not removed it yet
				}
			}
			t.Fatalf("round %d: entry %d (term %d) is in the log but was never acknowledged or was cut (pending %+v)", round, i, got, pending)
		}
		// What is on disk now is the truth the next round builds on.
		acked = present
		entriesSeen += len(present)
		s.Close()
		term++
	}
	t.Logf("%d kill -9 rounds, %d entries checked", rounds, entriesSeen)
	if entriesSeen == 0 {
		t.Fatalf("the child never wrote anything")
	}
}
