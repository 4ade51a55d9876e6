//go:build !linux

package owner

import "github.com/sessiond/sessiond/internal/fsys"

// Without /proc the lock's holder cannot be found from the lock; the
// state folder's owner file still names it.
func lockHolderPID(fsys.FS, string) int { return 0 }

func holderOf(fsys.FS, int) (Holder, bool) { return Holder{}, false }
