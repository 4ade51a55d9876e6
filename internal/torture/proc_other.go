//go:build !linux

package torture

import "syscall"

// sysProcAttr has nothing to add where the parent's death cannot be
// forwarded to the daemon.
func sysProcAttr() *syscall.SysProcAttr { return nil }
