//go:build linux && !race

package rawio

import (
	"syscall"
	"unsafe"
)

// The system calls, raw. Under the race detector (sys_race.go) they are
// Go's ordinary ones instead, whose reads and writes order the goroutines
// that meet through them.

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

func sysPwrite(fd uintptr, p []byte, off int64) (int, syscall.Errno) {
	if unsafe.Sizeof(uintptr(0)) < 8 {
		// A 64-bit offset takes two argument slots, placed as each 32-bit
		// architecture wants: Go's own call knows how.
		n, err := syscall.Pwrite(int(fd), p, off)
		return n, errno(err)
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_PWRITE64, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(off), 0, 0)
	return int(n), e
}

func sysFdatasync(fd uintptr) syscall.Errno {
	_, _, e := syscall.RawSyscall(syscall.SYS_FDATASYNC, fd, 0, 0)
	return e
}

// sysPeek reads into p without taking the bytes off the socket, and
// without waiting.
func sysPeek(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return int(n), e
}
