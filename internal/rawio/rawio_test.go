//go:build linux

package rawio

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// pair returns a Conn accepted by a Listener and the plain connection that
// dialed it.
func pair(t *testing.T) (raw, plain net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := Listener(ln).Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	plain, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	raw = <-accepted
	if _, ok := raw.(*conn); !ok {
		t.Fatalf("Listener accepted a %T, want a raw conn", raw)
	}
	t.Cleanup(func() { raw.Close(); plain.Close() })
	return raw, plain
}

// TestConn_CopiesBothWays: 8 MiB each way, far more than a socket holds,
// so that writes wait for room and reads for data.
func TestConn_CopiesBothWays(t *testing.T) {
	t.Parallel()
	raw, plain := pair(t)
	data := make([]byte, 8<<20)
	rand.Read(data)
	for _, dir := range []struct {
		name     string
		from, to net.Conn
	}{{"raw to plain", raw, plain}, {"plain to raw", plain, raw}} {
		done := make(chan error, 1)
		go func() {
			_, err := io.Copy(dir.from, bytes.NewReader(data))
			done <- err
		}()
		got := make([]byte, len(data))
		if _, err := io.ReadFull(dir.to, got); err != nil {
			t.Fatalf("%s: read: %v", dir.name, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: write: %v", dir.name, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: the bytes read differ from those written", dir.name)
		}
	}
}

// TestConn_EndsAndErrors: a deadline ends a read with a timeout, the
// peer's close with io.EOF, the conn's own close with net.ErrClosed, and
// a write to a reset connection with an error.
func TestConn_EndsAndErrors(t *testing.T) {
	t.Parallel()
	raw, plain := pair(t)
	if n, err := raw.Read(nil); n != 0 || err != nil {
		t.Fatalf("an empty read returned %d, %v", n, err)
	}
	raw.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := raw.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a read past its deadline returned %v, want a timeout", err)
	}
	raw.SetReadDeadline(time.Time{})
	plain.Write([]byte("x"))
	plain.(*net.TCPConn).CloseWrite()
	b := make([]byte, 4)
	if n, err := raw.Read(b); n != 1 || err != nil {
		t.Fatalf("read returned %d, %v; want the 1 byte sent", n, err)
	}
	if _, err := raw.Read(b); err != io.EOF {
		t.Fatalf("a read after the peer's close returned %v, want io.EOF", err)
	}
	plain.(*net.TCPConn).SetLinger(0)
	plain.Close() // a reset
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		_, werr = raw.Write(make([]byte, 64<<10))
	}
	if werr == nil {
		t.Fatal("writes to a reset connection kept succeeding")
	}
	raw.Close()
	if _, err := raw.Read(b); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a read after Close returned %v, want net.ErrClosed", err)
	}
}

func TestConn_leavesOtherConnsAlone(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Conn(a) != a {
		t.Fatal("Conn wrapped a connection that is not TCP")
	}
}

func TestPwriteAndFdatasync(t *testing.T) {
	t.Parallel()
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Pwrite(f, []byte("world"), 6); err != nil {
		t.Fatal(err)
	}
	if err := Pwrite(f, []byte("hello "), 0); err != nil {
		t.Fatal(err)
	}
	if err := Fdatasync(f); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || string(got) != "hello world" {
		t.Fatalf("file holds %q (%v), want %q", got, err, "hello world")
	}
	// Beyond 4 GiB (a sparse file): the offset's upper half counts.
	const far = 5 << 30
	if err := Pwrite(f, []byte("far"), far); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	if _, err := f.ReadAt(b, far); err != nil || string(b) != "far" {
		t.Fatalf("at 5 GiB the file holds %q (%v), want %q", b, err, "far")
	}
	f.Close()
	if err := Pwrite(f, []byte("x"), 0); err == nil {
		t.Fatal("Pwrite to a closed file succeeded")
	}
}

// TestConn_OrdersForTheRaceDetector: a value written before a Write is
// seen by the goroutine whose Read got those bytes, as with net's own
// connections; under -race a missing order would fail this test.
func TestConn_OrdersForTheRaceDetector(t *testing.T) {
	t.Parallel()
	raw, plain := pair(t)
	back, err := net.Dial("tcp", raw.LocalAddr().String())
	if err == nil {
		back.Close() // only the pair's own conns are used below
	}
	var shared int
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 1)
		if _, err := io.ReadFull(raw, b); err != nil {
			t.Error(err)
			return
		}
		shared++ // after the peer's write: ordered by the socket
		raw.Write(b)
	}()
	shared++
	plain.Write([]byte("x"))
	b := make([]byte, 1)
	if _, err := io.ReadFull(plain, b); err != nil {
		t.Fatal(err)
	}
	<-done
	if shared != 2 {
		t.Fatalf("shared = %d, want 2", shared)
	}
}

func TestDialer_DialsConns(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := Dialer(&net.Dialer{})(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*conn); !ok {
		t.Fatalf("Dialer returned a %T, want a raw conn", c)
	}
}

// TestConn_ReadAndWriteAllocateNothing: a Read and a Write make no
// objects of their own (Go's net makes none either).
func TestConn_ReadAndWriteAllocateNothing(t *testing.T) {
	if raceOn {
		t.Skip("the race detector's bookkeeping allocates")
	}
	raw, plain := pair(t)
	out, in := make([]byte, 512), make([]byte, 512)
	if n := testing.AllocsPerRun(200, func() {
		if _, err := raw.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(plain, in); err != nil {
			t.Fatal(err)
		}
		if _, err := plain.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(raw, in); err != nil {
			t.Fatal(err)
		}
	}); n > 0 {
		t.Fatalf("a Write and a Read each way made %v objects, want 0", n)
	}
}

// TestConn_ConcurrentWritesStayWhole: Writes from several goroutines at
// once each reach the peer in one piece, and Reads from several
// goroutines at once lose and repeat nothing.
func TestConn_ConcurrentWritesStayWhole(t *testing.T) {
	t.Parallel()
	raw, plain := pair(t)
	const writers, writes, block = 8, 64, 4096
	go func() {
		done := make(chan struct{})
		for w := range writers {
			go func() {
				defer func() { done <- struct{}{} }()
				b := bytes.Repeat([]byte{byte(w + 1)}, block)
				for range writes {
					if _, err := raw.Write(b); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		for range writers {
			<-done
		}
	}()
	got := make([]byte, writers*writes*block)
	if _, err := io.ReadFull(plain, got); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(got); i += block {
		if !bytes.Equal(got[i:i+block], bytes.Repeat(got[i:i+1], block)) {
			t.Fatalf("the block at %d mixes bytes of two Writes", i)
		}
	}

	go func() { // and back, read by several goroutines at once
		if _, err := plain.Write(got); err != nil {
			t.Error(err)
		}
	}()
	counts := make(chan [writers + 1]int, 4)
	var left = int64(len(got))
	var mu sync.Mutex
	for range 4 {
		go func() {
			var c [writers + 1]int
			buf := make([]byte, 1000)
			for {
				mu.Lock()
				more := left > 0
				mu.Unlock()
				if !more {
					break
				}
				raw.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				n, err := raw.Read(buf)
				for _, b := range buf[:n] {
					c[b]++
				}
				mu.Lock()
				left -= int64(n)
				mu.Unlock()
				if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Error(err)
					break
				}
			}
			counts <- c
		}()
	}
	var total [writers + 1]int
	for range 4 {
		c := <-counts
		for i := range c {
			total[i] += c[i]
		}
	}
	for w := 1; w <= writers; w++ {
		if total[w] != writes*block {
			t.Fatalf("the readers got %d bytes of writer %d, want %d", total[w], w, writes*block)
		}
	}
}
