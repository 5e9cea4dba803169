package main

import (
	"io"
	"runtime"
	"sync"
)

// lineWriter hands each write (a log line) to a goroutine that writes to
// w, as one write, what has come together meanwhile (it yields once
// first). A node logs a grant from the goroutine that applies Raft's
// entries: there a line costs a copy, not a system call, and under load
// many lines share one. Nothing is dropped: a writer waits while
// maxQueued lines are queued. After Close, writes go straight to w.
type lineWriter struct {
	w     io.Writer
	lines chan []byte
	done  chan struct{} // closed when the goroutine has written every line

	mu     sync.RWMutex
	closed bool
}

const (
	maxQueued     = 4096
	maxWriteBytes = 64 << 10
)

func newLineWriter(w io.Writer) *lineWriter {
	lw := &lineWriter{w: w, lines: make(chan []byte, maxQueued), done: make(chan struct{})}
	go lw.run()
	return lw
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.mu.RLock()
	defer lw.mu.RUnlock()
	if lw.closed {
		<-lw.done // after the queued lines
		return lw.w.Write(p)
	}
	lw.lines <- append([]byte(nil), p...) // the caller may reuse p
	return len(p), nil
}

// Close writes the queued lines and returns once they are written.
func (lw *lineWriter) Close() error {
	lw.mu.Lock()
	if !lw.closed {
		lw.closed = true
		close(lw.lines)
	}
	lw.mu.Unlock()
	<-lw.done
	return nil
}

func (lw *lineWriter) run() {
	defer close(lw.done)
	var buf []byte
	for line := range lw.lines {
		buf = append(buf[:0], line...)
		runtime.Gosched() // the goroutines that can run now queue their lines: one write
	more:
		for len(buf) < maxWriteBytes {
			select {
			case l, ok := <-lw.lines:
				if !ok {
					break more
				}
				buf = append(buf, l...)
			default:
				break more
			}
		}
		_, _ = lw.w.Write(buf) // a log that cannot be written is not the node's failure
	}
}
