//go:build linux && race

package rawio

import "syscall"

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return n, errno(err)
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	return n, errno(err)
}

func sysPwrite(fd uintptr, p []byte, off int64) (int, syscall.Errno) {
	n, err := syscall.Pwrite(int(fd), p, off)
	return n, errno(err)
}

func sysFdatasync(fd uintptr) syscall.Errno { return errno(syscall.Fdatasync(int(fd))) }

func sysPeek(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, err := syscall.Recvfrom(int(fd), p, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, errno(err)
}
