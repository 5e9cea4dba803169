package rawio

import (
	"errors"
	"io"
	"net"
	"os"
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
	return &conn{TCPConn: tc, rc: rc}
}

// conn embeds *net.TCPConn for everything but Read and Write. It must not
// expose TCPConn's ReadFrom and WriteTo (io.Copy would use them and bypass
// Write), so those are hidden below.
type conn struct {
	*net.TCPConn
	rc syscall.RawConn
}

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, e := sysRead(fd, p)
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until readable
			}
			n, errno = r, e
			return true
		}
	})
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

func (c *conn) Write(p []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, e := sysWrite(fd, p[n:])
			switch e {
			case 0:
				n += r
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait until writable
			default:
				errno = e
				return true
			}
		}
		return true
	})
	if err != nil {
		return n, err
	}
	if errno != 0 {
		return n, c.opError("write", errno)
	}
	return n, nil
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
