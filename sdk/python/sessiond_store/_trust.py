"""The client trusts only its own daemon.

A transcript holds code, prompts and often secrets. The last default socket
(/tmp/sessiond-<uid>/) sits in a folder any local user can create first, and
a socket path can be pointed anywhere by a symlink, so before gRPC sends a
byte we check two things:

(a) the socket's folder is a real folder (lstat: a symlink is refused), owned
    by us or root, that nobody else may write to;
(b) the process that serves the socket runs as us or root, as the kernel
    reports it for a connection of our own (SO_PEERCRED on Linux,
    LOCAL_PEERCRED on macOS). That probe connection sends nothing and is
    closed.

(b) alone would not be enough: gRPC makes its own connection after our
probe (and again whenever it reconnects), and between the two someone could
replace the socket. (a) closes that gap: in a folder only we (or root) can
write, nobody else can remove, rename or plant a socket, so the socket gRPC
reaches is the one we probed, or one that we or root put there.
"""

from __future__ import annotations

import errno
import os
import posixpath
import socket
import stat
import struct
import sys
from typing import Optional, Tuple

from ._errors import SessiondUnavailableError, UntrustedSocketError


def socket_folder(path: str) -> str:
    folder = posixpath.dirname(path) or "."
    return posixpath.normpath(folder)


def _folder_facts(folder: str) -> Tuple[Optional[int], Optional[str]]:
    """The folder's owner and, when it is a symlink, its target (for the
    error message)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return None, None
    link = None
    if stat.S_ISLNK(st.st_mode):
        try:
            link = os.readlink(folder)
        except OSError:
            link = "?"
    return st.st_uid, link


def check_folder(path: str, own_uid: Optional[int] = None) -> None:
    """Check (a) for the socket at path. Raises UntrustedSocketError when
    the folder fails, SessiondUnavailableError when it does not exist
    (nothing to distrust: sessiond is not running there)."""
    own = os.geteuid() if own_uid is None else own_uid
    folder = socket_folder(path)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        raise SessiondUnavailableError(
            "no sessiond socket at %s: its folder %s does not exist; start sessiond "
            "(or point SESSIOND_SOCKET at the socket it serves)" % (path, folder)
        ) from None
    except OSError as exc:
        raise SessiondUnavailableError("cannot check the socket folder %s: %s" % (folder, exc)) from exc
    uid, link = _folder_facts(folder)
    if stat.S_ISLNK(st.st_mode):
        reason = "its folder %s is a symlink (to %s)" % (folder, link)
    elif not stat.S_ISDIR(st.st_mode):
        reason = "%s is not a folder" % folder
    elif st.st_uid not in (own, 0):
        reason = "its folder %s belongs to uid %d" % (folder, st.st_uid)
    elif st.st_mode & 0o022:
        reason = "its folder %s may be written by others (mode %#o)" % (folder, stat.S_IMODE(st.st_mode))
    else:
        return
    raise UntrustedSocketError(
        socket=path, folder=folder, own_uid=own, reason=reason, folder_uid=uid, folder_link=link
    )


# Linux: struct ucred {pid_t pid; uid_t uid; gid_t gid;}
_UCRED = struct.Struct("3i")
# macOS: SOL_LOCAL = 0, LOCAL_PEERCRED = 1, LOCAL_PEERPID = 2;
# struct xucred {u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16];}
_XUCRED_SIZE = 4 + 4 + 2 + 2 + 16 * 4


def peer_credentials(sock: socket.socket) -> Optional[Tuple[int, int]]:
    """(pid, uid) of the process serving the connected socket, or None
    where this platform offers no way to ask (pid -1 when only the uid is
    known)."""
    if sys.platform.startswith("linux"):
        so_peercred = getattr(socket, "SO_PEERCRED", 17)
        raw = sock.getsockopt(socket.SOL_SOCKET, so_peercred, _UCRED.size)
        pid, uid, _gid = _UCRED.unpack(raw)
        return pid, uid
    if sys.platform == "darwin":
        raw = sock.getsockopt(0, 1, _XUCRED_SIZE)
        _version, uid = struct.unpack_from("=II", raw)
        try:
            pid = struct.unpack("=i", sock.getsockopt(0, 2, 4))[0]
        except OSError:
            pid = -1
        return pid, uid
    return None


def verify(path: str, probe_timeout: float = 5.0) -> None:
    """Check (a), then (b), for the socket at path; return when both pass.

    Raises UntrustedSocketError (never worth retrying) or
    SessiondUnavailableError (no daemon there now; a retry may succeed).
    """
    own = os.geteuid()
    check_folder(path, own)
    check_peer(path, own, probe_timeout)


def check_peer(path: str, own_uid: Optional[int] = None, probe_timeout: float = 5.0) -> None:
    """Check (b) alone: connect, ask the kernel who serves the socket,
    close without sending anything. Safe on its own only for a socket in a
    folder that passed (a)."""
    own = os.geteuid() if own_uid is None else own_uid
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(probe_timeout)
        try:
            sock.connect(path)
        except FileNotFoundError:
            raise SessiondUnavailableError(
                "no sessiond socket at %s: start sessiond (or point SESSIOND_SOCKET at the "
                "socket it serves)" % path
            ) from None
        except ConnectionRefusedError:
            raise SessiondUnavailableError(
                "nothing listens on %s: sessiond is not running (a stale socket file was left "
                "behind); start it" % path
            ) from None
        except OSError as exc:
            if exc.errno == errno.ENOTSOCK:
                raise SessiondUnavailableError("%s is not a socket" % path) from None
            raise SessiondUnavailableError("cannot connect to %s: %s" % (path, exc)) from exc
        creds = peer_credentials(sock)
    finally:
        sock.close()
    if creds is None:
        # No way to name the peer here: the folder check above decided.
        return
    pid, uid = creds
    if uid in (own, 0):
        return
    folder = socket_folder(path)
    folder_uid, link = _folder_facts(folder)
    raise UntrustedSocketError(
        socket=path,
        folder=folder,
        own_uid=own,
        server_uid=uid,
        server_pid=pid,
        folder_uid=folder_uid,
        folder_link=link,
    )
