//go:build !linux

package rawio

import (
	"net"
	"os"
)

// Conn returns c.
func Conn(c net.Conn) net.Conn { return c }

// Pwrite writes all of b to f at off.
func Pwrite(f *os.File, b []byte, off int64) error {
	_, err := f.WriteAt(b, off)
	return err
}

// Fdatasync syncs f to the disk.
func Fdatasync(f *os.File) error { return f.Sync() }

// PeerClosed reports false: the check is made on Linux only.
func PeerClosed(net.Conn) bool { return false }
