// Package socket owns sessiond's Unix socket: making it safe to serve on
// (private folder, 0600 socket, no second daemon on the same path, stale
// files cleaned up), taking it over from systemd socket activation, telling
// systemd about the daemon's state, and learning which user is on the other
// end of each connection so only the daemon's own user is served.
//
// The socket folder's permissions are the first guard; the per-call uid check
// (PeerCredentials with SameUserInterceptors) is the second, and the only one
// that still holds when the folder is shared or the socket comes from systemd.
package socket
