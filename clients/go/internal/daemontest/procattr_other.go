//go:build !linux

package daemontest

import "syscall"

func procAttr() *syscall.SysProcAttr {
	return nil
}
