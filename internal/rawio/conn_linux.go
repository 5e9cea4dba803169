package rawio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// Conn returns c reading and writing with raw system calls if it is a
// *net.TCPConn, and c itself otherwise. Deadlines, Close and the rest
// behave as c's.
func Conn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	cn := &conn{TCPConn: tc, rc: rc}
	cn.readFn, cn.writeFn = cn.read, cn.write
	return cn
}

// conn embeds *net.TCPConn for everything but Read and Write. It must not
// expose TCPConn's ReadFrom and WriteTo (io.Copy would use them and bypass
// Write), so those are hidden below.
type conn struct {
	*net.TCPConn
	rc syscall.RawConn
	// rd and wr are a Read's and a Write's state, made once: closures made
	// per call would escape to the heap, three objects each. rmu and wmu
	// keep concurrent Reads (Writes) apart, as the descriptor's own lock
	// would.
	rmu, wmu sync.Mutex
	rd, wr   ioState
	readFn   func(fd uintptr) bool
	writeFn  func(fd uintptr) bool
}

// ioState is one direction's call under way.
type ioState struct {
	p     []byte
	n     int
	errno syscall.Errno
}

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rd = ioState{p: p}
	err := c.rc.Read(c.readFn)
	n, errno := c.rd.n, c.rd.errno
	c.rd.p = nil
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// read is Read's step on the descriptor: false until it is readable.
func (c *conn) read(fd uintptr) bool {
	for {
		r, e := sysRead(fd, c.rd.p)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until readable
		}
		c.rd.n, c.rd.errno = r, e
		return true
	}
}

func (c *conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wr = ioState{p: p}
	err := c.rc.Write(c.writeFn)
	n, errno := c.wr.n, c.wr.errno
	c.wr.p = nil
	if err != nil {
		return n, err
	}
	if errno != 0 {
		return n, c.opError("write", errno)
	}
	return n, nil
}

// write is Write's step on the descriptor: false while it is not writable.
func (c *conn) write(fd uintptr) bool {
	for c.wr.n < len(c.wr.p) {
		r, e := sysWrite(fd, c.wr.p[c.wr.n:])
		switch e {
		case 0:
			c.wr.n += r
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until writable
		default:
			c.wr.errno = e
			return true
		}
	}
	return true
}

func (c *conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}

// ReadFrom and WriteTo copy through Read and Write.
func (c *conn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(struct{ io.Writer }{c}, r) }
func (c *conn) WriteTo(w io.Writer) (int64, error)  { return io.Copy(w, struct{ io.Reader }{c}) }

// Pwrite writes all of b to f at off. A Close of f meanwhile makes it fail,
// never write to another file that reuses the descriptor.
func Pwrite(f *os.File, b []byte, off int64) error {
	return control(f, func(fd uintptr) error {
		for len(b) > 0 {
			n, e := sysPwrite(fd, b, off)
			switch {
			case e == syscall.EINTR:
			case e != 0:
				return os.NewSyscallError("pwrite", e)
			case n == 0:
				return io.ErrShortWrite
			default:
				b, off = b[n:], off+int64(n)
			}
		}
		return nil
	})
}

// Fdatasync syncs f's data to the disk.
func Fdatasync(f *os.File) error {
	return control(f, func(fd uintptr) error {
		for {
			e := sysFdatasync(fd)
			if e != syscall.EINTR {
				if e != 0 {
					return os.NewSyscallError("fdatasync", e)
				}
				return nil
			}
		}
	})
}

// control runs op on f's descriptor, which f keeps open meanwhile.
func control(f *os.File, op func(fd uintptr) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = op(fd) }); err != nil {
		return err
	}
	return opErr
}

// errno returns err's system error number, 0 for nil.
func errno(err error) syscall.Errno {
	var e syscall.Errno
	if err != nil && !errors.As(err, &e) {
		return syscall.EIO
	}
	return e
}

// PeerClosed reports, without waiting, whether c's peer has closed the
// connection (or reset it) and nothing is left to read. It is false for
// a connection that is not a socket.
func PeerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	var b [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, e := sysPeek(fd, b[:])
		closed = n == 0 && e == 0 || e != 0 && e != syscall.EAGAIN && e != syscall.EINTR
	}); err != nil {
		return true
	}
	return closed
}
