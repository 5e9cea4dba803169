package server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/wire"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// pipeOver is a pipe of s over one end of an in-memory connection; the
// test holds the other end.
func pipeOver(t *testing.T, s *Server) (*pipe, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	ctx, cancel := context.WithCancelCause(context.Background())
	p := &pipe{s: s, ctx: ctx, conn: a, w: wire.NewFrameWriter(bufio.NewWriter(a)), waits: map[uint64]context.CancelFunc{}}
	t.Cleanup(func() {
		cancel(errPipeClosed)
		a.Close()
		b.Close()
	})
	return p, b
}

// queuedFrame is an acquire frame for a request already queued on lock x
// behind a holder: it waits without adding an entry.
func queuedFrame(t *testing.T, s *Server) func(id uint64) *fencelockv1.PipeRequest {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, RequestID: "holder"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, Wait: time.Minute, RequestID: "R", ReturnQueued: true}); !errors.Is(err, errQueued) {
		t.Fatalf("queue R: %v", err)
	}
	return func(id uint64) *fencelockv1.PipeRequest {
		return &fencelockv1.PipeRequest{Id: id, Acquire: &fencelockv1.AcquireRequest{Name: "x", Ttl: durationpb.New(time.Minute),
			Wait: durationpb.New(time.Minute), RequestId: "R"}}
	}
}

// TestPipe_ReusedWaitIDEndsThePipe: an acquire frame whose id is already
// waiting on the pipe is a protocol error that ends the pipe; otherwise
// the frames would escape the limit on waits per pipe (they share one
// entry in its table) and a cancel frame could not say which wait it ends.
func TestPipe_ReusedWaitIDEndsThePipe(t *testing.T) {
	s := openInProcess(t)
	frame := queuedFrame(t, s)
	p, _ := pipeOver(t, s)
	if err := p.wait(frame(1)); err != nil {
		t.Fatalf("first wait with id 1: %v", err)
	}
	err := p.wait(frame(1))
	if !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("second wait with id 1 = %v, want an error wrapping ErrInvalidArgument (the pipe ends)", err)
	}
	eventually(t, "the first wait is registered", func() bool { return s.waiters.count("x", "R") == 1 })
	p.mu.Lock()
	n := len(p.waits)
	p.mu.Unlock()
	if n != 1 {
		t.Errorf("%d waits on the pipe, want 1", n)
	}
}

// TestPipe_WaitsPastTheLimitAreRefusedByTheReader: past maxPipeWaits, an
// acquire frame is refused by the pipe's reader itself, so a client that
// keeps sending them without reading the refusals stops being read,
// instead of costing the node one blocked goroutine per frame.
func TestPipe_WaitsPastTheLimitAreRefusedByTheReader(t *testing.T) {
	s := openInProcess(t)
	frame := queuedFrame(t, s)
	p, _ := pipeOver(t, s) // the client end is never read
	for i := 1; i <= maxPipeWaits; i++ {
		if err := p.wait(frame(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the pipe's waits are all registered", func() bool { return s.waiters.count("x", "R") == maxPipeWaits })
	base := runtime.NumGoroutine()
	refused := make(chan int, 1)
	go func() {
		n := 0
		for i := 0; i < 1000; i++ {
			if p.wait(frame(uint64(maxPipeWaits+1+i))) != nil {
				break
			}
			n++
		}
		refused <- n
	}()
	time.Sleep(300 * time.Millisecond)
	if grown := runtime.NumGoroutine() - base; grown > 10 {
		t.Errorf("%d more goroutines after refusing waits to a client that does not read", grown)
	}
	select {
	case n := <-refused:
		t.Errorf("the reader went on refusing (%d frames) while the client read no refusal", n)
	default:
	}
	p.conn.Close() // the write that blocks fails; the reader goes on
	select {
	case <-refused:
	case <-time.After(10 * time.Second):
		t.Fatal("the refusing reader did not go on after the connection closed")
	}
}
