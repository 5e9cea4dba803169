package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	gate chan struct{} // if set, each write waits for it to be closed
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	if l.gate != nil {
		<-l.gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLineWriter_KeepsEveryLineInOrder: lines of concurrent writers all
// arrive whole, each writer's in its order, also when the writers reuse
// their buffers at once; and a line written after Close still arrives.
func TestLineWriter_KeepsEveryLineInOrder(t *testing.T) {
	t.Parallel()
	out := &lockedBuffer{}
	lw := newLineWriter(out)
	const writers, lines = 8, 2000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 64)
			for i := range lines {
				buf = fmt.Appendf(buf[:0], "w%d line %d\n", w, i)
				if _, err := lw.Write(buf); err != nil {
					t.Error(err)
					return
				}
				copy(buf, "XXXXXXXX") // the writer reuses its buffer
			}
		}()
	}
	wg.Wait()
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := lw.Write([]byte("after close\n")); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != writers*lines+1 || got[len(got)-1] != "after close" {
		t.Fatalf("got %d lines (last %q), want %d and \"after close\"", len(got), got[len(got)-1], writers*lines+1)
	}
	next := make([]int, writers)
	for _, l := range got[:len(got)-1] {
		var w, i int
		if _, err := fmt.Sscanf(l, "w%d line %d", &w, &i); err != nil || w < 0 || w >= writers {
			t.Fatalf("line %q is not one written", l)
		}
		if i != next[w] {
			t.Fatalf("writer %d: line %d came where line %d was due", w, i, next[w])
		}
		next[w]++
	}
}

// TestLineWriter_WaitsRatherThanDrops: while the output is stuck, writers
// wait once a write's worth of lines and the queue are full; every line
// arrives once the output moves again.
func TestLineWriter_WaitsRatherThanDrops(t *testing.T) {
	t.Parallel()
	out := &lockedBuffer{gate: make(chan struct{})}
	lw := newLineWriter(out)
	// The goroutine takes up to maxWriteBytes of lines for one write; the
	// queue holds maxQueued more.
	const n = maxWriteBytes/2 + maxQueued + 100
	wrote := make(chan int, 1)
	go func() {
		i := 0
		for ; i < n; i++ {
			if _, err := lw.Write([]byte("x\n")); err != nil {
				break
			}
		}
		wrote <- i
	}()
	for len(lw.lines) < maxQueued {
		select {
		case i := <-wrote:
			t.Fatalf("all %d writes returned while the output was stuck", i)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case i := <-wrote:
		t.Fatalf("all %d writes returned while the output was stuck", i)
	case <-time.After(50 * time.Millisecond):
	}
	close(out.gate)
	if i := <-wrote; i != n {
		t.Fatalf("%d of %d writes went through", i, n)
	}
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "x\n"); got != n {
		t.Fatalf("%d of %d lines arrived", got, n)
	}
}
