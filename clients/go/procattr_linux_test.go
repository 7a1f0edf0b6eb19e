package squawk

import "syscall"

// daemonProcAttr kills the daemon if the test binary dies first.
func daemonProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
