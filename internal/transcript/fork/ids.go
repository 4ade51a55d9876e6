package fork

import (
	"fmt"

	"github.com/sessiond/sessiond/internal/errdefs"
)

// sdkUUID reports whether s is a UUID as the SDK's session id check
// accepts it: 8-4-4-4-12 hex digits, either case.
func sdkUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// checkSDKSessionID refuses a session id the SDK would refuse.
func checkSDKSessionID(what, id string) error {
	if !sdkUUID(id) {
		return fmt.Errorf("%s %q is not a UUID (8-4-4-4-12 hex digits): %w", what, id, errdefs.ErrInvalidArgument)
	}
	return nil
}
