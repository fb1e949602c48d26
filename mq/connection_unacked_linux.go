//go:build linux

package mq

import (
	"net"
	"syscall"
	"unsafe"
)

// unacked is how many bytes c's kernel holds for the peer, sent or not
// yet, and not acknowledged (TIOCOUTQ); ok is false when it cannot say.
func unacked(c net.Conn) (n int, ok bool) {
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var v int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&v)))
	}); err != nil || errno != 0 {
		return 0, false
	}
	return int(v), true
}
