package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"

	"github.com/fencelock/fencelock/internal/rawio"
)

// FloorSystem is the floor: the least a lock service written in Go can
// do per call on this machine, to tell what limits fencelock from what
// limits any Go service. Its server (ServeFloor) keeps a lock table in
// memory and writes every change to a log with one fdatasync per batch,
// as fencelock's node does, over a WebSocket per client, its sockets and
// log written with raw system calls (internal/rawio) as the node's; it has no
// consensus, no leases, no wait queue (a client that finds the lock held
// retries, as Redis's recipe does), no protobuf, no authentication.
const FloorSystem = "go-floor"

// The floor's messages: a request is its op, the owner (8 bytes) and the
// lock's name; the answer to an acquire is the token (8 bytes, 0: held),
// to a release one byte (1: released).
const (
	floorAcquire = 'a'
	floorRelease = 'r'
)

// floorLogSize is the floor log's size: it is written in full at start
// and then overwritten in a circle, so that a sync flushes data alone.
const floorLogSize = 16 << 20

// floorRequest is one call, from a connection's goroutine to the log's.
type floorRequest struct {
	op     byte
	owner  uint64
	name   string
	answer chan []byte
}

// ServeFloor serves the floor on ln with its log at path, until ln
// closes. Run it with GOMAXPROCS=1, as fencelock's node runs in bench/.
func ServeFloor(ln net.Listener, path string) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("floor log: %w", err)
	}
	f := os.NewFile(uintptr(fd), path) // owns fd from here on
	defer f.Close()
	zero := make([]byte, 1<<20)
	for off := int64(0); off < floorLogSize; off += int64(len(zero)) {
		if _, err := unix.Pwrite(fd, zero, off); err != nil {
			return fmt.Errorf("floor log: %w", err)
		}
	}
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("floor log: %w", err)
	}
	reqs := make(chan floorRequest, 1024)
	go floorLog(f, reqs)
	up := websocket.Upgrader{}
	return http.Serve(rawio.Listener(ln), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		answer := make(chan []byte, 1)
		for {
			_, m, err := c.ReadMessage()
			if err != nil || len(m) < 9 {
				return
			}
			reqs <- floorRequest{op: m[0], owner: binary.BigEndian.Uint64(m[1:9]), name: string(m[9:]), answer: answer}
			if c.WriteMessage(websocket.BinaryMessage, <-answer) != nil {
				return
			}
		}
	}))
}

// floorLog applies the requests queued together to the lock table,
// writes their changes with one pwrite and one fdatasync, then answers
// them. Its batches are as large as fencelock's node makes its log
// appends, so that the floor is one at many clients too.
func floorLog(f *os.File, reqs <-chan floorRequest) {
	type lock struct{ owner, token uint64 }
	locks := map[string]*lock{}
	var off int64
	var buf []byte
	batch := make([]floorRequest, 0, 1024)
	answers := make([][]byte, 0, 1024)
	for r := range reqs {
		batch, answers, buf = append(batch[:0], r), answers[:0], buf[:0]
		// The connections ready now queue theirs first: one sync for all
		// (on one thread, this goroutine would run before them).
		runtime.Gosched()
	more:
		for len(batch) < cap(batch) {
			select {
			case r := <-reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		for _, r := range batch {
			l := locks[r.name]
			if l == nil {
				l = &lock{}
				locks[r.name] = l
			}
			switch {
			case r.op == floorAcquire && l.owner == 0:
				l.owner, l.token = r.owner, l.token+1
				answers = append(answers, binary.BigEndian.AppendUint64(nil, l.token))
				buf = binary.BigEndian.AppendUint64(append(append(buf, r.op), r.name...), l.token)
			case r.op == floorAcquire:
				answers = append(answers, make([]byte, 8))
			case r.op == floorRelease && l.owner == r.owner:
				l.owner = 0
				answers = append(answers, []byte{1})
				buf = append(append(buf, r.op), r.name...)
			default:
				answers = append(answers, []byte{0})
			}
		}
		if len(buf) > 0 {
			if off+int64(len(buf)) > floorLogSize {
				off = 0
			}
			if err := rawio.Pwrite(f, buf, off); err != nil {
				fatal(err)
			}
			if err := rawio.Fdatasync(f); err != nil {
				fatal(err)
			}
			off += int64(len(buf))
		}
		for i, r := range batch {
			r.answer <- answers[i]
		}
	}
}

// fatal ends the floor server after a failed write: the run that uses it
// then fails on its next call.
func fatal(err error) {
	fmt.Fprintln(os.Stderr, "floor log:", err)
	os.Exit(1)
}

// FloorServer is a floor server process started by StartFloor.
type FloorServer struct {
	Addr string
	cmd  *exec.Cmd
}

// StartFloor runs "bin floor-serve ADDR LOG" (fencebench's subcommand) on
// a free loopback port with GOMAXPROCS=1, its log in dir, and waits until
// it accepts connections.
func StartFloor(bin, dir string) (*FloorServer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "floor-serve", addr, dir+"/floor.log")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return &FloorServer{Addr: addr, cmd: cmd}, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, errors.New("floor server did not start listening")
}

// PID returns the server's process id.
func (s *FloorServer) PID() int { return s.cmd.Process.Pid }

// Stop ends the server.
func (s *FloorServer) Stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// Floor is the Target of the floor server at an address: each locker has
// a connection of its own; one that finds the lock held sleeps a jittered
// retry (uniform in [retry/2, 3·retry/2]) and tries again.
type Floor struct {
	addr   string
	retry  time.Duration
	owners atomic.Uint64
}

// NewFloor returns the Target of the floor server at addr.
func NewFloor(addr string, retry time.Duration) *Floor { return &Floor{addr: addr, retry: retry} }

func (f *Floor) Name() string { return FloorSystem }
func (f *Floor) Close() error { return nil }

func (f *Floor) NewLocker(ctx context.Context, _ int) (Locker, error) {
	d := websocket.Dialer{NetDialContext: rawio.Dialer(&net.Dialer{})}
	c, _, err := d.DialContext(ctx, "ws://"+f.addr+"/", nil)
	if err != nil {
		return nil, fmt.Errorf("floor at %s: %w", f.addr, err)
	}
	return &floorLocker{f: f, c: c, owner: f.owners.Add(1)}, nil
}

type floorLocker struct {
	f     *Floor
	c     *websocket.Conn
	owner uint64
	name  string
}

// call sends one request and reads its answer; a context that ends
// closes nothing (the call is short), it is checked between calls.
func (l *floorLocker) call(op byte, name string) ([]byte, error) {
	m := append(binary.BigEndian.AppendUint64([]byte{op}, l.owner), name...)
	if err := l.c.WriteMessage(websocket.BinaryMessage, m); err != nil {
		return nil, err
	}
	_, a, err := l.c.ReadMessage()
	return a, err
}

func (l *floorLocker) Acquire(ctx context.Context, name string) (uint64, error) {
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		a, err := l.call(floorAcquire, name)
		if err != nil {
			return 0, err
		}
		if len(a) != 8 {
			return 0, fmt.Errorf("floor: an acquire answer of %d bytes", len(a))
		}
		if tok := binary.BigEndian.Uint64(a); tok != 0 {
			l.name = name
			return tok, nil
		}
		t := time.NewTimer(l.f.retry/2 + time.Duration(mrand.Int64N(int64(l.f.retry)+1)))
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

func (l *floorLocker) Release(context.Context) error {
	a, err := l.call(floorRelease, l.name)
	if err != nil {
		return err
	}
	if len(a) != 1 || a[0] != 1 {
		return errors.New("floor release: not the holder")
	}
	return nil
}

func (l *floorLocker) Close() error { return l.c.Close() }
