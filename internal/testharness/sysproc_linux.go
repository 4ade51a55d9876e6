package testharness

import "syscall"

// sysProcAttr makes the daemon die with this process, so an interrupted
// run leaves no sessiond behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
