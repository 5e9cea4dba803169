package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock"
)

// The pipe (see PipeRequest in the API) is an HTTP/1.1 connection upgraded
// to a stream of frames: a 4-byte big-endian length, then a protobuf message.
const (
	// PipePath is where a node accepts the upgrade.
	PipePath = "/fencelock.v1.Pipe"
	// PipeProtocol is the Upgrade header's token.
	PipeProtocol = "fencelock-pipe/1"
	// MaxRequestBytes bounds one request message (a Connect request, or a
	// pipe frame from a client); every field has a smaller limit.
	MaxRequestBytes = 64 << 10
)

// Frame is a reusable buffer for reading and writing frames.
type Frame struct {
	buf []byte
}

// Write appends m as one frame to w (not flushed).
func (f *Frame) Write(w *bufio.Writer, m proto.Message) error {
	var err error
	f.buf, err = proto.MarshalOptions{}.MarshalAppend(append(f.buf[:0], 0, 0, 0, 0), m)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	binary.BigEndian.PutUint32(f.buf, uint32(len(f.buf)-4))
	_, err = w.Write(f.buf)
	return err
}

// Read reads one frame of at most limit bytes from r into m. A frame over
// the limit is an error wrapping fencelock.ErrTooLarge; the stream cannot go
// on after it.
func (f *Frame) Read(r *bufio.Reader, m proto.Message, limit int) error {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(head[:])
	if int64(n) > int64(limit) {
		return fmt.Errorf("frame of %d bytes, more than %d: %w", n, limit, fencelock.ErrTooLarge)
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	f.buf = f.buf[:n]
	if _, err := io.ReadFull(r, f.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := proto.Unmarshal(f.buf, m); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}

// FrameWriter writes frames from many goroutines. Frames written together
// share one flush, so one write to the connection.
type FrameWriter struct {
	mu    sync.Mutex // guards bw and frame
	bw    *bufio.Writer
	frame Frame
}

// NewFrameWriter returns a FrameWriter on bw.
func NewFrameWriter(bw *bufio.Writer) *FrameWriter {
	return &FrameWriter{bw: bw}
}

// Send writes m as one frame and returns once it is flushed, by this call or
// by another that flushed after it.
//
// Between writing its frame and flushing, Send yields the processor once:
// answers that become ready together (a Raft batch applied at once wakes
// every call in it) are written into the buffer first and leave in one
// write. Without the yield, on one processor each sender ran to its own
// flush before the next could run, and paid a write system call of its
// own.
func (w *FrameWriter) Send(m proto.Message) error {
	w.mu.Lock()
	err := w.frame.Write(w.bw, m)
	w.mu.Unlock()
	if err != nil {
		return err
	}
	runtime.Gosched()
	w.mu.Lock()
	defer w.mu.Unlock()
	// A frame already flushed by a later sender leaves nothing buffered;
	// Flush then only reports an earlier write's error.
	return w.bw.Flush()
}
