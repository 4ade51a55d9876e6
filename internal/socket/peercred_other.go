//go:build !linux && !darwin

package socket

import (
	"fmt"
	"runtime"
)

func peerOfFD(int) (Peer, error) {
	return Peer{}, fmt.Errorf("reading peer credentials is not implemented on %s", runtime.GOOS)
}
