package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// envelope is one stream message as Connect frames it.
func envelope(payload []byte) []byte {
	m := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(m[1:5], uint32(len(payload)))
	return append(m, payload...)
}

// TestWholeMessages_OneReadPerMessage: a body written as Connect writes it
// (prefix and payload in two writes) reads back a whole message per read;
// a message larger than the buffer comes in pieces and the next one starts
// on a read of its own; the bytes are the bytes written.
func TestWholeMessages_OneReadPerMessage(t *testing.T) {
	t.Parallel()
	small, big := []byte("acquire"), bytes.Repeat([]byte("x"), 40<<10)
	pr, pw := io.Pipe()
	go func() {
		for _, p := range [][]byte{small, big, {}, small} {
			m := envelope(p)
			pw.Write(m[:5])
			if len(p) > 0 {
				pw.Write(m[5:])
			}
		}
		pw.Close()
	}()
	w := &wholeMessages{ReadCloser: pr}
	buf := make([]byte, 16<<10)
	var reads []int
	var got []byte
	for {
		n, err := w.Read(buf)
		if n > 0 {
			reads = append(reads, n)
			got = append(got, buf[:n]...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []int{5 + len(small), 16 << 10, 16 << 10, 5 + len(big) - 32<<10, 5, 5 + len(small)}
	if len(reads) != len(want) {
		t.Fatalf("reads of %v bytes, want %v", reads, want)
	}
	for i := range want {
		if reads[i] != want[i] {
			t.Fatalf("reads of %v bytes, want %v", reads, want)
		}
	}
	all := append(append(append(envelope(small), envelope(big)...), envelope(nil)...), envelope(small)...)
	if !bytes.Equal(got, all) {
		t.Fatalf("read %d bytes that differ from the %d written", len(got), len(all))
	}
}

// TestWholeMessages_ShortBufferPassesThrough: a buffer shorter than a
// prefix gets the bytes as they come.
func TestWholeMessages_ShortBufferPassesThrough(t *testing.T) {
	t.Parallel()
	body := envelope([]byte("renew"))
	w := &wholeMessages{ReadCloser: io.NopCloser(bytes.NewReader(body))}
	got, err := io.ReadAll(io.LimitReader(struct{ io.Reader }{readSmall{w}}, 1<<10))
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read %q, %v; want %q", got, err, body)
	}
}

// readSmall reads through r three bytes at a time.
type readSmall struct{ r io.Reader }

func (s readSmall) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), 3)]) }
