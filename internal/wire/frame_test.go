package wire

import (
	"bufio"
	"bytes"
	"runtime"
	"sync"
	"testing"

	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// countingWriter counts the writes that reach the connection.
type countingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

// Answers that become ready together (the calls of one applied Raft batch)
// leave in one write to the connection, also on one processor, where each
// sender used to run to its own flush before the next one could run; and
// every frame arrives whole.
func TestFrameWriter_FramesReadyTogetherShareAWrite(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const senders = 8
	cw := &countingWriter{}
	w := NewFrameWriter(bufio.NewWriter(cw))
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- w.Send(&fencelockv1.PipeResponse{Id: uint64(i + 1)})
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Send = %v", err)
		}
	}
	if cw.writes >= senders {
		t.Errorf("%d frames sent together took %d writes, want fewer than one each", senders, cw.writes)
	}
	r := bufio.NewReader(bytes.NewReader(cw.buf.Bytes()))
	seen := map[uint64]bool{}
	var f Frame
	for range senders {
		var m fencelockv1.PipeResponse
		if err := f.Read(r, &m, 1<<20); err != nil {
			t.Fatalf("reading the frames back: %v", err)
		}
		seen[m.Id] = true
	}
	if len(seen) != senders {
		t.Fatalf("read back %d distinct frames, want %d", len(seen), senders)
	}
	t.Logf("%d frames, %d writes", senders, cw.writes)
}
