//go:build !linux

package squawk

import "syscall"

func daemonProcAttr() *syscall.SysProcAttr {
	return nil
}
