"""Where the daemon's socket is when nobody says: the same choice, in the
same order, as sessiond itself (internal/layout/defaults.go DefaultSocket).

Client and daemon must agree on it without talking to each other, so every
rule below mirrors the Go code, including its corner cases (a relative
SESSIOND_STATE_DIR or HOME skips the state folder; a relative XDG_* value is
ignored; the length limit counts bytes).
"""

from __future__ import annotations

import os
import posixpath
import pwd
import stat
import sys
from typing import Callable, Mapping, Optional

SOCKET_NAME = "sessiond.sock"


def max_socket_path(platform: str = sys.platform) -> int:
    """The longest socket path the kernel takes: sun_path (108 bytes on
    Linux, 104 on macOS) minus the terminating NUL, as the Go side counts."""
    return 103 if platform == "darwin" else 107


def _clean(path: str) -> str:
    """Go's filepath.Clean for the absolute paths used here. posixpath keeps
    a leading "//" (POSIX allows it a meaning); Go does not."""
    out = posixpath.normpath(path)
    if out.startswith("//") and not out.startswith("///"):
        out = out[1:]
    return out


def _join(*parts: str) -> str:
    return _clean(posixpath.join(*parts))


def _utf8(value: str) -> bool:
    try:
        os.fsencode(value).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _nbytes(path: str) -> int:
    return len(os.fsencode(path))


class _NoFolder(Exception):
    """The environment names a folder that cannot be used (relative, not
    UTF-8, no home): the Go side then skips the state-folder choice."""


def _abs_from_env(getenv: Callable[[str], Optional[str]], name: str) -> Optional[str]:
    value = getenv(name) or ""
    if value == "":
        return None
    if not _utf8(value) or not posixpath.isabs(value):
        raise _NoFolder(name)
    return _clean(value)


def _user_home() -> str:
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError as exc:
        raise _NoFolder("no passwd entry") from exc
    if not home or not posixpath.isabs(home):
        raise _NoFolder("home not absolute")
    return _clean(home)


def default_state_dir(
    getenv: Callable[[str], Optional[str]],
    home: Callable[[], str] = _user_home,
) -> str:
    """$SESSIOND_STATE_DIR (must be absolute), else $XDG_STATE_HOME/sessiond
    (used only when absolute), else $HOME/.local/state/sessiond, HOME falling
    back on the user database. Raises _NoFolder where Go returns an error."""
    value = _abs_from_env(getenv, "SESSIOND_STATE_DIR")
    if value is not None:
        return value
    xdg = getenv("XDG_STATE_HOME") or ""
    if posixpath.isabs(xdg):
        return _join(xdg, "sessiond")
    h = _abs_from_env(getenv, "HOME")
    if h is None:
        h = home()
    return _join(h, ".local", "state", "sessiond")


def private_folder(path: str, uid: int) -> bool:
    """A real folder (not a symlink) owned by uid that nobody else may enter."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_mode & 0o077 == 0 and st.st_uid == uid


def default_socket(
    environ: Optional[Mapping[str, str]] = None,
    *,
    uid: Optional[int] = None,
    platform: Optional[str] = None,
    home: Callable[[], str] = _user_home,
    private: Callable[[str, int], bool] = private_folder,
) -> str:
    """The socket sessiond listens on by default, the first of:

    1. $SESSIOND_SOCKET as given;
    2. $XDG_RUNTIME_DIR/sessiond/sessiond.sock when XDG_RUNTIME_DIR is absolute;
    3. on Linux, /run/user/<uid>/sessiond/sessiond.sock when /run/user/<uid>
       is a private folder of the user;
    4. on macOS, $TMPDIR/sessiond/sessiond.sock when absolute and short enough;
    5. <state folder>/run/sessiond.sock when short enough;
    6. /tmp/sessiond-<uid>/sessiond.sock.

    The keyword arguments exist for tests; leave them out.
    """
    env = os.environ if environ is None else environ
    getenv = env.get
    uid = os.getuid() if uid is None else uid
    platform = sys.platform if platform is None else platform
    limit = max_socket_path(platform)

    value = getenv("SESSIOND_SOCKET") or ""
    if value:
        return value
    runtime = getenv("XDG_RUNTIME_DIR") or ""
    if posixpath.isabs(runtime):
        return _join(runtime, "sessiond", SOCKET_NAME)
    if platform.startswith("linux"):
        folder = "/run/user/%d" % uid
        if private(folder, uid):
            return _join(folder, "sessiond", SOCKET_NAME)
    elif platform == "darwin":
        tmp = getenv("TMPDIR") or ""
        if posixpath.isabs(tmp):
            path = _join(tmp, "sessiond", SOCKET_NAME)
            if _nbytes(path) <= limit:
                return path
    try:
        state = default_state_dir(getenv, home)
    except _NoFolder:
        state = None
    if state is not None:
        path = _join(state, "run", SOCKET_NAME)
        if _nbytes(path) <= limit:
            return path
    return "/tmp/sessiond-%d/%s" % (uid, SOCKET_NAME)
