//go:build !linux

package testharness

import "syscall"

// sysProcAttr has nothing to add where the parent's death cannot be
// forwarded to the daemon.
func sysProcAttr() *syscall.SysProcAttr { return nil }
